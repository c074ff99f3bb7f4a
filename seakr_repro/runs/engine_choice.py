"""Which engine answers a profile's questions (`runner.engine`): this process (`local`) or Ray
workers, one model each (`ray`). The settings schema (`core.config`) takes the engines' names from
here, so this module imports nothing at module level but the package's errors."""
from __future__ import annotations

from ..core.errors import UserError

ENGINES = ("local", "ray")


def engine_of(cfg) -> str:
    """runner.engine, checked."""
    name = cfg.get("runner.engine", "local") or "local"
    if name not in ENGINES:
        raise UserError(f"unknown runner.engine {name!r}", setting="runner.engine",
                        fix="use local (this process) or ray (Ray workers, one model each)")
    return name


def uses_ray(cfg) -> bool:
    return engine_of(cfg) == "ray"
