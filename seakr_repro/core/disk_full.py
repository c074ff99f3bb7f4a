"""A disk that fills while a run is under way ends in one paragraph, and the same command resumes.

Every writer of the package writes inside `writing(path)`: there an OSError ENOSPC, or EDQUOT (a
quota used up: the same situation for whoever meets it), becomes a `DiskFullError`. Its paragraph
names the file and its disk, what is free there, what the rest of the run still needs there, the
largest things this package keeps there, and the fix: free space or move that folder, then the
command that resumes. That command and the estimate come from the command that runs (`Run`,
declared by `recording_stop_of`, which also records the stop for `status`: `core.stop_record`)."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from . import disk, paths, stop_record
from .disk import human_bytes, mount_of
from .errors import UserError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
RUN_ENV = "SEAKR_DISK_FULL_RUN"    # how `reproduce` tells a notebook kernel its run (JSON)
LARGEST_NAMED = 4                  # how many of the largest things the package keeps are named

Needs = list[tuple[str, int, Path]]     # (what, bytes, folder): runs.disk_needs.needs_by_place


@contextlib.contextmanager
def writing(path: str | Path | None = None) -> Iterator[None]:
    """Writes to `path` (a file, or the folder a step fills) inside this block: a write that finds
    no space raises a DiskFullError naming `path` (or the file the OSError names, without one)."""
    try:
        yield
    except OSError as err:
        if err.errno not in FULL_ERRNOS:
            raise
        raise DiskFullError(path or err.filename, err.errno) from None


# ------------------------------------------------------------------ the run, as its command declared it

@dataclass
class Run:
    """What the paragraph says of the run under way."""
    profile: str | None = None
    resume: str | None = None       # the shell command that resumes it
    # what it still has to write, or a function giving that when the disk fills (what is left
    # shrinks as steps build the corpus and the index)
    needs: Needs | Callable[[], Needs] = ()
    step: str | None = None         # the notebook step, under `reproduce`

    def needs_now(self) -> Needs:
        """The estimate as it stands; none where it fails (a help: the paragraph must come out)."""
        try:
            return list(self.needs() if callable(self.needs) else self.needs)
        except Exception:       # noqa: BLE001
            return []

    def for_another_process(self) -> Run:
        """This run with its estimate taken now, for a Ray worker (`runs.fleet` hands it over)."""
        return replace(self, needs=self.needs_now())

    def kernel_environment(self) -> dict[str, str]:
        """The environment that tells a notebook kernel this run's resume command and estimate."""
        needs = [[what, n, str(where)] for what, n, where in self.needs_now()]
        return {RUN_ENV: json.dumps({"resume": self.resume, "needs": needs})}

    @classmethod
    def from_environment(cls, profile: str, step: str) -> Run:
        """A notebook kernel's run: its profile and step, and from `reproduce` the command that
        resumes it and its estimate (in the Lab: neither)."""
        with contextlib.suppress(ValueError, TypeError, AttributeError):     # none, or not ours
            said = json.loads(os.environ.get(RUN_ENV) or "{}")
            needs = [(str(what), int(n), Path(where)) for what, n, where in said.get("needs") or []]
            return cls(profile, said.get("resume") or None, needs, step)
        return cls(profile, step=step)


_RUN = Run()


def current() -> Run:
    """The run this process declared (an empty Run where none did)."""
    return _RUN


def set_run(run: Run) -> None:
    """Declare the run of this process from here on (a notebook's first cell, a Ray worker)."""
    global _RUN
    _RUN = run


@contextlib.contextmanager
def recording_stop_of(run: Run, reserve: bool = False) -> Iterator[Run]:
    """Declare `run` for this block. A full disk inside it, met by a writer or not (a library's
    own write), leaves as the paragraph with its stop recorded for `status`. `reserve`: this
    command writes the profile's results, so the record's space is reserved (an earlier stop
    cleared) first."""
    before = _RUN
    set_run(run)
    try:
        with writing():
            if reserve and run.profile:
                with writing(stop_record.path(run.profile)):
                    stop_record.reserve(run.profile)
            yield run
    except DiskFullError as err:
        err.record_stop()
        raise
    finally:
        set_run(before)


# ------------------------------------------------------------------ the error and its paragraph

class DiskFullError(UserError):
    """A write found no space. `path`: the file being written (an atomic write's target), or None
    where the write did not say. The paragraph is built when first shown, not when raised: a caller
    that goes on without the write (the call cache) pays for no look at the disk. It crosses to
    another process (Ray, a kernel's error in `reproduce`) as its paragraph and whether its stop
    was recorded where it was raised. `fix_note`: what the writer adds to the fix."""

    def __init__(self, path: str | Path | None = None, code: int = errno.ENOSPC,
                 paragraph: str | None = None, recorded: bool | None = None):
        self.written = Path(path) if path else None
        self.path = str(path) if path else None
        self.code = code if code in FULL_ERRNOS else errno.ENOSPC
        self.what, self.fix, self.line, self.setting = "", "", None, None
        self.fix_note: str | None = None
        self.run = _RUN                     # the run it stopped
        self._text = paragraph
        self.recorded = paragraph is not None if recorded is None else recorded
        Exception.__init__(self)

    def __str__(self) -> str:
        return self.paragraph()

    def __reduce__(self):
        return (DiskFullError, (self.path, self.code, self.paragraph(), self.recorded))

    def paragraph(self) -> str:
        if self._text is None:
            self._text = paths.repo_relative_text(_compose(self))
        return self._text

    def _render_traceback_(self) -> list[str]:
        """What IPython shows in a notebook: the paragraph, not a traceback. A notebook's run stops
        here (no command is around it), so its stop is recorded here."""
        self.record_stop()
        return textwrap.fill("DiskFullError: " + self.paragraph(), width=100, break_long_words=False,
                             break_on_hyphens=False).splitlines()

    def record_stop(self) -> None:
        """Record the stop for `status` (`core.stop_record`), once; nothing where no profile is known."""
        if self.recorded or not self.run.profile:
            return
        self.recorded = True
        mount = mount_of(self.written) if self.written else None
        stop_record.write(self.run.profile, {
            "stopped": "disk full", "at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "path": str(self.written) if self.written else None, "mount": str(mount) if mount else None,
            "free": shutil.disk_usage(mount).free if mount else None,
            "step": self.run.step, "resume": self.run.resume, "paragraph": self.paragraph()})


def _compose(err: DiskFullError) -> str:
    path = err.written or min((root for root, _ in paths.written_folders()), key=disk.free_bytes)
    mount = mount_of(path)
    usage, device = shutil.disk_usage(mount), disk.device_of(mount)
    where = f"writing {path}" if err.written else "a write of this run (the library did not say which file)"
    if err.code == errno.EDQUOT:
        text = (f"Your disk quota is used up: {where} failed (Disk quota exceeded) on the file system "
                f"mounted at {mount} ({human_bytes(usage.free)} free there, but none within your quota).")
    else:
        text = (f"The disk is full: {where} failed (No space left on device) on the file system mounted "
                f"at {mount}, which has {human_bytes(usage.free)} free of {human_bytes(usage.total)}.")
    needs = [(what, n) for what, n, folder in err.run.needs_now() if n > 0 and disk.device_of(folder) == device]
    need = sum(n for _, n in needs)
    if needs:
        text += (f" The rest of the profile {err.run.profile}'s run needs up to {human_bytes(need)} more "
                 "there (preflight's estimate, less what is already built: "
                 + ", ".join(f"{what} {human_bytes(n)}" for what, n in needs) + ").")
    folders = [root for root, _ in paths.written_folders()]
    largest, complete = disk.largest_under(folders, device, {stop_record.NAME}, LARGEST_NAMED)
    if largest:
        text += (" The largest things this package keeps there" +
                 ("" if complete else f" (counted for {disk.LOOK_SECONDS:g} s: at least these sizes)") +
                 ": " + ", ".join(f"{p} ({human_bytes(n)})" for p, n in largest) + ".")
    text += (" Nothing finished is lost: files are replaced only when written whole, and a run file "
             "keeps every finished question (the line being written when the disk filled is cut off).")
    fix = (f"free space within your quota on {mount} (or ask for a larger quota)" if err.code == errno.EDQUOT
           else f"free at least {human_bytes(need)} on {mount}" if need else f"free space on {mount}")
    real = Path(os.path.realpath(path))
    roots = [(root, var) for root, var in paths.written_folders() if real.is_relative_to(os.path.realpath(root))]
    if roots:                                   # the innermost folder, where one lies in another
        root, var = max(roots, key=lambda r: len(str(r[0])))
        move = f"move {root} to a disk with room and set {var} to its new place"
        if need > usage.total:        # more than the whole file system holds: freeing only delays
            fix = (f"free space on {mount} to go on for now; but the profile's run needs more than the "
                   f"{human_bytes(usage.total)} that file system holds in all, so {move}")
        else:
            fix += f", or {move}"
    if err.fix_note:
        fix += f" ({err.fix_note})"
    then = (f"then resume with: {err.run.resume}" if err.run.resume else
            "then run the same command or notebook again: finished work is kept and not redone")
    return text + f" Fix: {fix}; {then}."
