"""The backend protocol is written down: every member the package reaches on a backend through
getattr/hasattr is declared in `llm.base`, and `unwrap` is the one way under the call cache."""
from __future__ import annotations

import re
from pathlib import Path

import seakr_repro
from seakr_repro.llm.base import Backend, BackendExtras, unwrap
from seakr_repro.llm.cache import CachedBackend

from fakes import FakeBackend

ROOT = Path(seakr_repro.__file__).parent
REACHED = re.compile(r"""(?:getattr|hasattr)\((?:self\.)?\w*backend, ["'](\w+)["']""")


def _declared(cls) -> set[str]:
    return set(getattr(cls, "__annotations__", {})) | {n for n in vars(cls) if not n.startswith("_")}


def test_every_member_reached_by_getattr_is_declared():
    reached = {(m, str(p.relative_to(ROOT))) for p in ROOT.rglob("*.py")
               for m in REACHED.findall(p.read_text())}
    assert {m for m, _ in reached} >= {"kind", "concurrent", "stats", "scoped_counts"}   # the scan works
    undeclared = sorted((m, f) for m, f in reached
                        if m not in _declared(Backend) | _declared(BackendExtras))
    assert not undeclared, f"declare these in llm/base.py (Backend or BackendExtras): {undeclared}"


def test_unwrap_finds_the_model_backend_under_the_cache(tmp_path):
    fake = FakeBackend(lambda prompt, stop: "x")
    cached = CachedBackend(fake, root=tmp_path)
    assert unwrap(cached) is fake and unwrap(CachedBackend(cached, root=tmp_path)) is fake
    assert unwrap(fake) is fake and unwrap(None) is None
