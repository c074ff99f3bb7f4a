"""One `reproduce` per profile: the lock file results/<profile>/reproduce.lock (docs/paper-profile.md,
"One run per profile").

An flock, which the kernel drops when the holder ends in any way, so a dead holder is never taken
for a live one; the file (pid, host, start, directory, command) is emptied on release, never
deleted: deleting a locked file would let a second process lock a new file of the same name (two
holders). Where flock does not reach across hosts, a holder on another host counts as alive while
its heartbeat (every `HEARTBEAT_S`) is younger than `STALE_S`. `fcntl` (Linux) is imported lazily."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from .disk_full import writing
from .errors import UserError

LOCK_NAME = "reproduce.lock"
HEARTBEAT_S = 30.0
STALE_S = 300.0           # another host's holder with an older heartbeat is taken for gone
_RETRY_S = 1.0            # a probe by `status` holds a shared lock for an instant: retry that long


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        info = json.loads(raw) if raw.strip() else {}
    except ValueError:
        info = {}               # written by something else: no holder named
    return info if isinstance(info, dict) else {}


def describe(info: dict) -> str:
    """'pid 123 on host h, started 2026-01-01 10:00:00: <command>'."""
    return (f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started "
            f"{info.get('started', '?')}: {info.get('command', '?')}")


def holder(path: str | Path) -> dict | None:
    """Who holds (or last held) the lock, and whether that run is alive, without taking it. None
    when no run has the lock (no file, or an empty one). Otherwise the holder's record plus
    `alive` (bool), `heartbeat` (the file's last change, epoch seconds) and `how` (why alive or not)."""
    import fcntl

    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        info = _read(fd)
        beat = os.fstat(fd).st_mtime
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held = True
        else:
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if not info:
        return None
    age = time.time() - beat
    if held:
        alive, how = True, "its lock is held"
    elif info.get("host") != socket.gethostname():
        alive = age < STALE_S
        how = f"another host; heartbeat {age:.0f} s ago" + ("" if alive else f", older than {STALE_S:.0f} s")
    else:
        alive, how = False, "its process is gone"
    return {**info, "alive": alive, "heartbeat": beat, "how": how}


def _heartbeat(fd: int, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        with contextlib.suppress(OSError):
            os.utime(fd)


@contextlib.contextmanager
def hold(path: str | Path, command: str, notice=None):
    """Hold the profile's lock for the block; a UserError naming the holder when a live run has it.
    A lock left by a run whose process is gone is taken over, with a line to `notice` (default:
    stderr) naming that run."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + _RETRY_S
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read(fd)
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise UserError(f"another reproduce of this profile is running ({describe(info)})",
                            path=path, fix="wait for it to finish (`status` shows its progress), or "
                            f"stop it (kill {info.get('pid', '<pid>')}) and run again; a stopped "
                            "run resumes where it was") from None
        if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)            # the file was replaced while we waited: lock the one now there
    try:
        previous = _read(fd)
        if previous and previous.get("host") != socket.gethostname():
            age = time.time() - os.fstat(fd).st_mtime
            if age < STALE_S:
                raise UserError(f"a reproduce of this profile on another host may be running "
                                f"({describe(previous)}; heartbeat {age:.0f} s ago)", path=path,
                                fix="wait for it, or if that run is gone, empty this file and run again")
        if previous:
            print(f"[reproduce] taking over the lock of an earlier run whose process is gone "
                  f"({describe(previous)})", file=notice or sys.stderr, flush=True)
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cwd": os.getcwd(), "command": command}
        with writing(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(fd, stop), daemon=True, name="reproduce-lock")
    beat.start()
    try:
        yield info
    finally:
        stop.set()
        beat.join()
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)           # released: no holder named
        os.close(fd)                      # drops the flock
