"""Safe file I/O: atomic writes (nothing half-written survives a crash), appended lines that land
whole or not at all, and JSON/JSONL readers whose errors name the file and the line. A write that
finds the disk full raises `core.disk_full.DiskFullError` (one paragraph: the disk, what is free,
what to free, the command that resumes)."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .disk_full import writing
from .errors import DataMissingError, UserError


@contextlib.contextmanager
def atomic_path(path: str | Path, suffix: str = ""):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds
    (a full disk: a DiskFullError naming `path`, the temporary file removed, `path` as it was)."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix + ".tmp", dir=path.parent)
        os.close(fd)
        try:
            yield Path(tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8"):
    """Open a temporary file for writing; it replaces `path` only when the block succeeds."""
    with atomic_path(path) as tmp:
        kwargs = {} if "b" in mode else {"encoding": encoding}
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


@contextlib.contextmanager
def appending(path: str | Path) -> Iterator[Callable[[str], None]]:
    """Yield `write(text)`, which appends `text` (whole lines) to `path` and syncs it to disk. A
    write lands whole or not at all: when the disk fills (or the process is interrupted) in the
    middle of one, the bytes it got onto the disk are cut off again before the DiskFullError
    (naming `path`) is raised, so the file keeps only whole lines. (A kill -9 mid-write can still
    leave a torn last line: the readers of these files drop it on resume.)"""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            with writing(path):
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise

    try:
        yield write
    finally:
        os.close(fd)


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=indent, ensure_ascii=False, default=json_default)
        fh.write("\n")
    return Path(path)


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> int:
    n = 0
    with atomic_open(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
            n += 1
    return n


def json_default(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (Path, set, frozenset)):
        return str(obj) if isinstance(obj, Path) else sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def require_file(path: str | Path, what: str, how_to_get: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DataMissingError(f"{what} was not found", fix=how_to_get, path=path)
    return path


def read_json(path: str | Path, what: str = "JSON file", how_to_get: str = "") -> Any:
    """Load a JSON document; a syntax error names the file, line and column."""
    path = require_file(path, what, how_to_get or "check the path")
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{what} is not valid JSON ({e.msg}, column {e.colno})",
                        fix="re-download or repair the file; it may be truncated",
                        path=path, line=e.lineno) from None


def iter_jsonl(path: str | Path, what: str = "JSONL file", how_to_get: str = "") -> Iterator[tuple[int, dict]]:
    """Yield (line_number, object) for each non-blank line; a bad line names file and line."""
    path = require_file(path, what, how_to_get or "check the path")
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{what} has a malformed JSON line ({e.msg}, column {e.colno})",
                                fix="repair or delete that line (each line must be one JSON object)",
                                path=path, line=lineno) from None
            if not isinstance(obj, dict):
                raise UserError(f"{what} line holds a {type(obj).__name__}, not a JSON object",
                                fix="each line must be one JSON object", path=path, line=lineno)
            yield lineno, obj
