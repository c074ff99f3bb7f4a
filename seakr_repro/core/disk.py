"""Free-space checks: a long step that would fill the disk stops before it starts, with the
amount it needs, instead of ending hours later in a bare OSError."""
from __future__ import annotations

import shutil
from pathlib import Path

from .errors import UserError


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def free_bytes(path: str | Path) -> int:
    """Free bytes on the file system holding `path` (its nearest existing parent)."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def require_free_space(path: str | Path, need_bytes: int, what: str) -> None:
    """Raise a UserError when fewer than `need_bytes` are free where `path` will be written."""
    free = free_bytes(path)
    if free < need_bytes:
        raise UserError(f"{what} needs about {human_bytes(need_bytes)} free but only "
                        f"{human_bytes(free)} is free", path=path,
                        fix="free some space on that disk, or point the output elsewhere "
                            "(SEAKR_CACHE_DIR / SEAKR_RESULTS_DIR)")
