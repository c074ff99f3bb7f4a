"""results/<profile>/last-stop.json: where and when a profile's run last stopped on a full disk, and
the command that resumes it (`status` shows it as one line).

A command that writes the profile's results reserves the file's bytes when it starts (`reserve`,
which also clears an earlier stop); the stop is then written over those bytes (`write`), so that
recording it asks a full disk for no new space."""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import paths
from .disk import human_bytes

NAME = "last-stop.json"
BYTES = 8192                       # reserved when a command starts


def _write_in_place(path: Path, data: bytes) -> None:
    """`data` over the start of `path`, padded with spaces to the file's size: bytes the file
    already holds need no new space."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def path(profile: str) -> Path:
    return paths.RESULTS_ROOT / profile / NAME


def reserve(profile: str) -> None:
    path(profile).parent.mkdir(parents=True, exist_ok=True)
    _write_in_place(path(profile), b" " * BYTES)
    os.truncate(path(profile), BYTES)


def write(profile: str, record: dict) -> None:
    """`record` (JSON; its "paragraph" dropped where the whole would not fit the reserved bytes)
    as the profile's last stop; nothing where it cannot be written."""
    data = json.dumps(record, ensure_ascii=False).encode("utf-8")
    if len(data) > BYTES:
        data = json.dumps({**record, "paragraph": None}, ensure_ascii=False).encode("utf-8")
    try:
        _write_in_place(path(profile), data)
    except OSError:
        pass


def last_stop(results: str | Path) -> dict | None:
    """The stop recorded in a profile's results folder, or None (none, or unreadable)."""
    try:
        text = (Path(results) / NAME).read_text(encoding="utf-8").strip()
        record = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("stopped") else None


def stop_line(record: dict) -> str:
    """'stopped: <what> at <time> [in step <NN>] [writing <path> on <mount> (<free> free then)];
    resume with: <command>' (<what>: "disk full", or what else stopped the run)."""
    step = f" in step {record['step']}" if record.get("step") else ""
    where = f" writing {record['path']}" if record.get("path") else ""
    if record.get("mount"):
        free = record.get("free")
        where += f" on {record['mount']}" + (f" ({human_bytes(free)} free then)" if free is not None else "")
    resume = record.get("resume") or "the command (or notebook) that stopped, again"
    return paths.repo_relative_text(f"stopped: {record['stopped']} at {record.get('at', '?')}{step}{where}; "
                                    f"resume with: {resume}")
