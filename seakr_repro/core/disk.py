"""Disks as the package meets them: free space before a long step (a step that would fill the disk
stops before it starts, with the amount it needs, not hours later in a bare OSError), the file
system a path lies on, and how much a folder holds (counted for a bounded time)."""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Collection

from .errors import UserError

# counting a folder stops after this long (a call cache of millions of files): its size is then
# what was counted, a lower bound
LOOK_SECONDS = 10.0


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _existing(path: str | Path) -> Path:
    """`path`, or its nearest parent that exists (links resolved)."""
    p = Path(os.path.realpath(Path(path).expanduser()))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | Path) -> int:
    return shutil.disk_usage(_existing(path)).free


def mount_of(path: str | Path) -> Path:
    """The mount point of the file system that holds (or will hold) `path`."""
    p = _existing(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def device_of(path: str | Path) -> int:
    return os.stat(_existing(path)).st_dev


def tree_bytes(path: str | Path, deadline: float | None = None,
               skip: Collection[str] = ()) -> tuple[int, bool]:
    """Bytes allocated under `path` (as du counts them; folders in `skip` left out), and whether
    every file was counted before `deadline` (time.monotonic(); default LOOK_SECONDS from now)."""
    deadline = time.monotonic() + LOOK_SECONDS if deadline is None else deadline

    def size(st: os.stat_result) -> int:
        return getattr(st, "st_blocks", 0) * 512 or st.st_size

    try:
        st = os.lstat(path)
    except OSError:
        return 0, True
    if not os.path.isdir(path) or os.path.islink(path):
        return size(st), True
    total = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
        for name in files:
            with contextlib.suppress(OSError):        # removed while we looked
                total += size(os.lstat(os.path.join(root, name)))
        if time.monotonic() > deadline:
            return total, False
    return total, True


def largest_under(folders: list[Path], device: int, leave_out: Collection[str] = (),
                  n: int | None = None) -> tuple[list[tuple[Path, int]], bool]:
    """The `n` largest things `folders` hold two levels down (results/<profile>/runs,
    cache/llm/<model>, ...) on the file system `device`, with their sizes; and whether every size
    is whole (counting stops after LOOK_SECONDS). Links are left out (they keep nothing on this
    disk), and so are the other folders among `folders` and the names in `leave_out`."""
    deadline = time.monotonic() + LOOK_SECONDS
    roots = [f for f in folders if f.is_dir() and device_of(f) == device]
    skip = {os.path.realpath(r) for r in roots} | {str(r) for r in roots}

    def kept(path: Path) -> bool:
        return not (path.is_symlink() or str(path) in skip or path.name in leave_out)

    entries = (entry for root in roots for child in sorted(root.iterdir()) if kept(child)
               for entry in (sorted(child.iterdir()) if child.is_dir() else [child]) if kept(entry))
    sizes, complete = {}, True
    for entry in entries:
        sizes[entry], done = tree_bytes(entry, deadline, skip)
        complete = complete and done
        if time.monotonic() > deadline:
            break
    return sorted(((p, size) for p, size in sizes.items() if size > 0), key=lambda x: -x[1])[:n], complete


def require_free_space(path: str | Path, need_bytes: int, what: str) -> None:
    """Raise a UserError when fewer than `need_bytes` are free where `path` will be written."""
    free = free_bytes(path)
    if free < need_bytes:
        raise UserError(f"{what} needs about {human_bytes(need_bytes)} free but only "
                        f"{human_bytes(free)} is free", path=path,
                        fix="free some space on that disk, or point the output elsewhere "
                            "(SEAKR_CACHE_DIR / SEAKR_RESULTS_DIR)")
