"""Tests leave the checkout alone (issue 40.9): the session's results go to a temporary folder,
and the session fails if the checkout's results/ changed (conftest.py holds both ends)."""
from __future__ import annotations

import os
from pathlib import Path

CHECKOUT_RESULTS = Path(__file__).resolve().parents[1] / "results"


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder`: {relative path: (size, mtime_ns)}; a folder (0, 0), as
    what is added to it or removed from it is listed itself."""
    out = {".": (0, 0)} if folder.is_dir() else {}
    for base, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(base) / name
            try:
                st = path.lstat()
            except FileNotFoundError:           # removed while walked
                continue
            out[path.relative_to(folder).as_posix()] = (0, 0) if name in dirs else (st.st_size, st.st_mtime_ns)
    return out


def changes(before: dict, after: dict) -> list[str]:
    """What differs between two listings, one line per path: added, removed or changed."""
    out = [f"added {p}" for p in sorted(set(after) - set(before))]
    out += [f"removed {p}" for p in sorted(set(before) - set(after))]
    out += [f"changed {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return out


def live_runs(folder: Path) -> list[str]:
    """The reproduce runs holding a lock under `folder` now (core/runlock.py): a user's real run
    writes to results/ while `make test` runs beside it, so its changes are not the tests'."""
    from seakr_repro.core.runlock import LOCK_NAME, describe, holder

    out = []
    for lock in sorted(folder.glob(f"*/{LOCK_NAME}")):
        info = holder(lock)
        if info and info["alive"]:
            out.append(f"{lock.parent.name}: {describe(info)}")
    return out
