"""Each decode path's strategy, by its name (a test checks that every name has one), and the reference."""
from __future__ import annotations

from .base import DecodePath
from .fused import Fused
from .graph import Graph
from .one_sync import OneSync
from .python_loop import PythonLoop
from .reference import Reference
from .static import Static

STRATEGIES: dict[str, DecodePath] = {p.name: p for p in (PythonLoop(), OneSync(), Fused(), Static(),
                                                          Graph())}
REFERENCE = Reference()


def strategy(name: str) -> DecodePath:
    """The strategy of a decode path named in DECODE_PATHS."""
    return STRATEGIES[name]


def calls() -> dict[str, int]:
    """Decode calls this process has run on each path, by name (a report's proof of which ran)."""
    return {name: s.calls for name, s in STRATEGIES.items()}
