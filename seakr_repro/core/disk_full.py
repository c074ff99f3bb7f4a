"""A disk that fills while a run is under way: one paragraph, from one place.

Every writer of the package writes inside `writing(path)`: core.io's atomic files and appended
lines do, and so do the index build, the lock and the executed notebooks. There an OSError ENOSPC,
or EDQUOT (a quota used up: the same situation for the person who meets it), becomes a
`DiskFullError`, whose paragraph names the disk (its mount point and the path being written), what
is free there, what the rest of the run still needs there (preflight's estimate,
`runs.disk_needs.needs_left`), the largest things this package keeps there, and the fix: free space
or point that folder elsewhere (its SEAKR_* variable), then the command that resumes.

What the paragraph knows of the run (its profile, the command that resumes it, its estimate) is
what the running command said (`running`): the command line, `reproduce`, or a notebook's first
cell (`notebook.parameters`; under `reproduce` the resume command comes in `RESUME_ENV`). A stop on
a full disk is recorded in results/<profile>/last-stop.json, a file reserved when the command
starts, so that recording it needs no new space on a full disk; `status` shows it.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import paths
from .disk import human_bytes
from .errors import UserError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# how `reproduce` tells its notebook kernels the command that resumes it and its estimate
RESUME_ENV, NEEDS_ENV = "SEAKR_RESUME_COMMAND", "SEAKR_DISK_NEEDS"
STOP_NAME = "last-stop.json"             # results/<profile>/: the last stop on a full disk (spaces: none)
STOP_BYTES = 8192                        # reserved for it when a command starts
LOOK_SECONDS = 10.0                      # sizing what the package keeps on a disk stops after this long
SHOWN = 4                                # the largest things named


def is_full(err: BaseException) -> bool:
    """Whether `err` is a write that found no space: the disk full, or the user's quota used up."""
    return isinstance(err, OSError) and err.errno in FULL_ERRNOS


def _existing(path: str | Path) -> Path:
    p = Path(os.path.realpath(Path(path).expanduser()))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def mount_of(path: str | Path) -> Path:
    """The mount point of the file system that holds (or will hold) `path`."""
    p = _existing(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def _device(path: str | Path) -> int:
    return os.stat(_existing(path)).st_dev


def _roots() -> list[tuple[Path, str]]:
    """The folders this package writes, each with the variable that moves it (read when asked:
    tests and `SEAKR_*` may move them)."""
    return [(paths.RESULTS_ROOT, "SEAKR_RESULTS_DIR"), (paths.CACHE_DIR, "SEAKR_CACHE_DIR"),
            (paths.FIGURES_DIR, "SEAKR_FIGURES_DIR"), (paths.TABLES_DIR, "SEAKR_TABLES_DIR"),
            (paths.RAW_DIR, "SEAKR_RAW_DIR")]


def _root_of(path: Path) -> tuple[Path, str] | None:
    """The package folder `path` lies in (the innermost, where one lies inside another)."""
    real = Path(os.path.realpath(path))
    found = [(root, var) for root, var in _roots() if real.is_relative_to(os.path.realpath(root))]
    return max(found, key=lambda f: len(str(f[0])), default=None)


# ------------------------------------------------------------------ what the package keeps there

def _walk_bytes(path: Path, deadline: float, skip: set[str]) -> tuple[int, bool]:
    """Bytes allocated under `path` (as du counts them), and whether the walk finished in time."""
    def size(st) -> int:
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


def tree_bytes(path: str | Path, seconds: float | None = None) -> tuple[int, bool]:
    """Bytes under `path`, and whether they were all counted within `seconds` (default
    LOOK_SECONDS: a call cache of millions of files is counted that long, then said to be at least
    that)."""
    return _walk_bytes(Path(path), time.monotonic() + (LOOK_SECONDS if seconds is None else seconds), set())


def kept_on(device: int, seconds: float | None = None) -> tuple[list[tuple[Path, int]], bool]:
    """The largest things this package keeps on the file system `device`, two levels under each
    of its folders (results/<profile>/runs, cache/llm/<model>, ...), largest first; and whether
    every size is complete (the look stops after `seconds`, default LOOK_SECONDS)."""
    deadline = time.monotonic() + (LOOK_SECONDS if seconds is None else seconds)
    roots = [root for root, _ in _roots() if root.is_dir() and _device(root) == device]
    skip = {os.path.realpath(r) for r in roots} | {str(r) for r in roots}
    sizes, complete = {}, True
    for root in roots:
        entries = []
        for child in sorted(root.iterdir()):
            if child.is_symlink() or str(child) in skip:      # a link keeps nothing on this disk
                continue
            entries += sorted(child.iterdir()) if child.is_dir() else [child]
        for entry in entries:
            if entry.is_symlink() or str(entry) in skip or entry.name == STOP_NAME:   # our reserved 8 KiB
                continue
            sizes[entry], done = _walk_bytes(entry, deadline, skip)
            complete = complete and done
            if time.monotonic() > deadline:
                break
        if time.monotonic() > deadline:
            break
    largest = sorted(((p, n) for p, n in sizes.items() if n > 0), key=lambda x: -x[1])
    return largest[:SHOWN], complete


# ------------------------------------------------------------------ the run, as the command said

@dataclass
class Run:
    """What the paragraph may say of the run under way."""
    profile: str | None = None
    resume: str | None = None       # the shell command that resumes it
    # (what, bytes, where) the run still has to write: runs.disk_needs.needs_left with its places
    needs: Callable[[], list[tuple[str, int, Path]]] | None = None
    step: str | None = None         # the notebook step, under `reproduce`


_RUN = Run()


def current() -> Run:
    """What this process said it runs (an empty Run when nothing did)."""
    return _RUN


def set_run(run: Run) -> None:
    """Say what this process runs (a notebook's first cell, for the rest of its kernel)."""
    global _RUN
    _RUN = run


def portable(run: Run) -> Run:
    """`run` as another process can take it (a Ray worker: `runs.fleet` hands it over), its
    estimate taken now: what is still to write changes when a step has built the corpus or the index."""
    needs = None
    with contextlib.suppress(Exception):     # the estimate is a help; the other process runs without it
        needs = run.needs() if run.needs is not None else None
    return Run(run.profile, run.resume, functools.partial(list, needs) if needs else None, run.step)


def kernel_environment(run: Run) -> dict[str, str]:
    """The environment that tells a notebook kernel `run`'s resume command and estimate (taken now,
    `portable`)."""
    run = portable(run)
    env = {RESUME_ENV: run.resume} if run.resume else {}
    if run.needs is not None:
        env[NEEDS_ENV] = json.dumps([[what, n, str(where)] for what, n, where in run.needs()])
    return env


def from_environment(profile: str, step: str) -> Run:
    """What a notebook kernel runs: the profile and step; from `reproduce` (`kernel_environment`)
    the command that resumes it and its estimate (in the Lab: neither)."""
    needs: list[tuple[str, int, Path]] = []
    with contextlib.suppress(ValueError, TypeError):
        needs = [(str(w), int(n), Path(p)) for w, n, p in json.loads(os.environ.get(NEEDS_ENV) or "[]")]
    return Run(profile, os.environ.get(RESUME_ENV) or None, (lambda: needs) if needs else None, step)


@contextlib.contextmanager
def running(run: Run, reserve: bool = False) -> Iterator[Run]:
    """Say what this block runs; a stop on a full disk inside it is recorded for `status`, and an
    ENOSPC no writer translated (a library's own write) still ends in the paragraph.
    `reserve`: this command writes the profile's results, so its stop record is reserved (and an
    earlier stop cleared) first."""
    before = _RUN
    set_run(run)
    try:
        if reserve and run.profile:
            reserve_stop_record(run.profile)
        yield run
    except BaseException as err:
        full = err if isinstance(err, DiskFullError) else DiskFullError(getattr(err, "filename", None),
                                                                        err.errno) if is_full(err) else None
        if full is None:
            raise
        full.record_stop()
        if full is err:
            raise
        raise full from None
    finally:
        set_run(before)


# ------------------------------------------------------------------ the error and its paragraph

class DiskFullError(UserError):
    """A write found no space. Its paragraph (`paragraph`) is built when first shown, not when
    raised: a caller that goes on without the write (the call cache) pays for no look at the disk.
    `path` is the file being written (the target, not an atomic write's temporary file), or None
    when the failing write did not say (then the fullest of the package's folders is named)."""

    def __init__(self, path: str | Path | None = None, code: int | None = errno.ENOSPC,
                 text: str | None = None):
        self.written = Path(path) if path else None
        self.code = code if code in FULL_ERRNOS else errno.ENOSPC
        self.what, self.fix, self.line, self.setting = "", "", None, None
        self.path = str(path) if path else None
        self._text = text
        self.run = _RUN                  # the run it stopped: what the paragraph says of it
        # an error told in another process's words (a notebook kernel's) was recorded there
        self.recorded = text is not None
        Exception.__init__(self)

    @classmethod
    def told(cls, text: str) -> "DiskFullError":
        """The error another process (a notebook kernel) showed, in its words."""
        return cls(text=text)

    @classmethod
    def _crossed(cls, text: str, path: str | None, code: int, recorded: bool) -> "DiskFullError":
        """The error as it left another process (a Ray worker): its words and file; recorded here
        (this process's run) unless it was recorded there."""
        err = cls(path, code, text)
        err.recorded = recorded
        return err

    def __str__(self) -> str:
        return self.paragraph()

    def __reduce__(self):            # crosses processes (Ray, papermill) as its paragraph
        return (DiskFullError._crossed, (self.paragraph(), self.path, self.code, self.recorded))

    def paragraph(self) -> str:
        if self._text is None:
            self._text = paths.repo_relative_text(_paragraph(self.written, self.code, self.run))
        return self._text

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook: the paragraph, not a traceback. That is the
        moment a notebook's run stops on it, so the stop is recorded here too."""
        self.record_stop()
        return textwrap.fill("DiskFullError: " + self.paragraph(), width=100, break_long_words=False,
                             break_on_hyphens=False).splitlines()

    def record_stop(self) -> None:
        """results/<profile>/last-stop.json, written in place (the space reserved at the start);
        nothing when no profile is known or the record cannot be written."""
        run = self.run
        if self.recorded or not run.profile:
            return
        self.recorded = True
        mount = mount_of(self.written) if self.written else None
        record = {"stopped": "disk full", "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "path": str(self.written) if self.written else None,
                  "mount": str(mount) if mount else None,
                  "free": shutil.disk_usage(mount).free if mount else None,
                  "step": run.step, "resume": run.resume, "paragraph": self.paragraph()}
        data = json.dumps(record, ensure_ascii=False).encode("utf-8")
        if len(data) > STOP_BYTES:
            data = json.dumps({**record, "paragraph": None}, ensure_ascii=False).encode("utf-8")
        stop = paths.RESULTS_ROOT / run.profile / STOP_NAME
        with contextlib.suppress(OSError):
            fd = os.open(stop, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data.ljust(max(os.fstat(fd).st_size, len(data))), 0)
                os.fsync(fd)
            finally:
                os.close(fd)


def _fullest_root() -> Path:
    roots = [root for root, _ in _roots()]
    return min(roots, key=lambda r: shutil.disk_usage(_existing(r)).free)


def _needs_there(run: Run, device: int) -> list[tuple[str, int]]:
    if run.needs is None:
        return []
    try:
        needs = run.needs()
    except Exception:           # noqa: BLE001 - the estimate is a help; the paragraph must come out
        return []
    return [(what, n) for what, n, where in needs if n > 0 and _device(where) == device]


def _paragraph(written: Path | None, code: int, run: Run) -> str:
    path = written or _fullest_root()
    mount = mount_of(path)
    usage = shutil.disk_usage(mount)
    device = _device(mount)
    where = f"writing {path}" if written else "a write of this run (the library did not say which file)"
    if code == errno.EDQUOT:
        text = (f"Your disk quota is used up: {where} failed (Disk quota exceeded) on the file system "
                f"mounted at {mount} ({human_bytes(usage.free)} free there, but none within your quota).")
    else:
        text = (f"The disk is full: {where} failed (No space left on device) on the file system mounted "
                f"at {mount}, which has {human_bytes(usage.free)} free of {human_bytes(usage.total)}.")
    needs = _needs_there(run, device)
    need = sum(n for _, n in needs)
    if needs:
        text += (f" The rest of the profile {run.profile}'s run needs up to {human_bytes(need)} more there "
                 f"(preflight's estimate, less what is already built: "
                 + ", ".join(f"{what} {human_bytes(n)}" for what, n in needs) + ").")
    largest, complete = kept_on(device)
    if largest:
        text += (" The largest things this package keeps there" +
                 ("" if complete else f" (counted for {LOOK_SECONDS:g} s: at least these sizes)") + ": " +
                 ", ".join(f"{p} ({human_bytes(n)})" for p, n in largest) + ".")
    text += (" Nothing finished is lost: files are replaced only when written whole, and a run file "
             "keeps every finished question (the line being written when the disk filled is cut off).")
    free = (f"free space within your quota on {mount} (or ask for a larger quota)" if code == errno.EDQUOT
            else f"free at least {human_bytes(need)} on {mount}" if need else f"free space on {mount}")
    root = _root_of(path)
    move = f"move {root[0]} to a disk with room and set {root[1]} to its new place" if root else ""
    if move and need > usage.total:      # more than the whole file system holds: freeing only delays
        free = (f"free space on {mount} to go on for now; but the profile's run needs more than the "
                f"{human_bytes(usage.total)} that file system holds in all, so {move}")
    elif move:
        free += f", or {move}"
    if Path(os.path.realpath(path)).is_relative_to(os.path.realpath(paths.CACHE_DIR / "llm")):
        free += (" (the LLM call cache is derived data: with cache.must_keep: false a run goes on "
                 "without it)")
    then = (f"then resume with: {run.resume}" if run.resume else
            "then run the same command or notebook again: finished work is kept and not redone")
    return text + f" Fix: {free}; {then}."


# ------------------------------------------------------------------ writers and the stop record

@contextlib.contextmanager
def writing(path: str | Path | None = None) -> Iterator[None]:
    """Writes to `path` (a file, or the folder a step fills) inside this block: a write that finds
    no space raises a DiskFullError naming `path` (or the file the OSError names, without one)."""
    try:
        yield
    except OSError as err:
        if not is_full(err):
            raise
        raise DiskFullError(path or err.filename, err.errno) from None


def reserve_stop_record(profile: str) -> None:
    """Clear the profile's stop record and reserve its space: a stop on a full disk later writes
    into these bytes instead of asking the file system for new ones."""
    stop = paths.RESULTS_ROOT / profile / STOP_NAME
    with writing(stop):
        stop.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(stop, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, b" " * STOP_BYTES, 0)
            os.ftruncate(fd, STOP_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)


def last_stop(results: str | Path) -> dict | None:
    """The stop recorded in a profile's results folder, or None (none, or unreadable)."""
    try:
        text = (Path(results) / STOP_NAME).read_text(encoding="utf-8").strip()
        record = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("stopped") else None


def stop_line(record: dict) -> str:
    """'stopped: disk full at <time> ...; resume with: <command>' (`status`); another stop names
    what stopped it where 'disk full' stands."""
    step = f" in step {record['step']}" if record.get("step") else ""
    where = f" writing {record['path']}" if record.get("path") else ""
    if record.get("mount"):
        free = record.get("free")
        where += f" on {record['mount']}" + (f" ({human_bytes(free)} free then)" if free is not None else "")
    resume = record.get("resume") or "the command (or notebook) that stopped, again"
    return paths.repo_relative_text(f"stopped: {record['stopped']} at {record.get('at', '?')}{step}{where}; "
                                    f"resume with: {resume}")
