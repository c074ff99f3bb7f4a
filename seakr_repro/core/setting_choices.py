"""The words two settings may take, defined in core so that the settings schema (`core.config`)
checks them without importing the modules that act on them (above core; numpy or torch):
- `runner.engine`: which engine answers a profile's questions (`runs.engine_choice` opens it);
- `model.decode`: the transformers backend's decode path (`llm.hf.decode`, one module per path;
  `auto` is DECODE_AUTO, why in `llm.hf.decode`)."""
from __future__ import annotations

# runner.engine: each engine, and what it is (an unknown one is answered with these)
ENGINES = {"local": "this process", "ray": "Ray workers, one model each"}

DECODE_PATHS = ("python", "one_sync", "fused", "static", "graph")
DECODE_SETTINGS = ("auto",) + DECODE_PATHS
DECODE_AUTO = "one_sync"                    # what `auto` resolves to, on every device


def resolve_decode(setting: str) -> str:
    """The decode path a `model.decode` setting names (`auto`: DECODE_AUTO); the setting is checked
    by the caller (`HFBackend` raises a UserError naming the setting)."""
    return DECODE_AUTO if setting == "auto" else setting
