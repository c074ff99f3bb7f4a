"""Which engine answers a profile's questions (`runner.engine`, one of
`core.setting_choices.ENGINES`): this process (`local`) or Ray workers, one model each (`ray`)."""
from __future__ import annotations

from ..core.errors import UserError
from ..core.setting_choices import ENGINES


def engine_of(cfg) -> str:
    """runner.engine, checked."""
    name = cfg.get("runner.engine", "local") or "local"
    if name not in ENGINES:
        raise UserError(f"unknown runner.engine {name!r}", setting="runner.engine",
                        fix="use " + " or ".join(f"{n} ({what})" for n, what in ENGINES.items()))
    return name


def uses_ray(cfg) -> bool:
    return engine_of(cfg) == "ray"
