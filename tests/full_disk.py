"""A disk that fills, for the tests of every writer's ENOSPC case without a real full disk.

`FullDisk(root, room)` lets the files under `root` grow by `room` bytes in all. The write that
would cross that puts on disk the bytes that still fit and then fails with OSError ENOSPC (or
EDQUOT), as a real file system does: a torn write. Bytes written over a file's existing bytes take
no room (a record reserved in advance is rewritten in place). It stands in for the file system
where Python writes: `open` (builtins and io: Python's file objects, numpy, pandas, matplotlib,
Pillow, papermill and nbformat), `os.open`, `os.write` and `os.pwrite` (the package's line
appender, its lock and stop record, and encoders that write to a file's descriptor).

A notebook kernel or a child process starts one with `FullDisk(root, room).start()` (tests/ on
its sys.path); a test uses it as a context manager.
"""
from __future__ import annotations

import builtins
import errno
import fcntl
import io
import os


class FullDisk:
    def __init__(self, root, room: int = 0, code: int = errno.ENOSPC):
        self.root = os.path.realpath(os.fspath(root))
        self.room, self.code = int(room), code
        self.torn = 0            # writes cut short: some bytes on disk, then the error
        self.written = 0         # bytes that took room, all writes together
        self.refused = 0         # writes that failed
        self._fds: dict[int, tuple[int, int]] = {}     # fd -> (device, inode) of a file under root
        self._saved: dict = {}

    # ---------------------------------------------------------------- bookkeeping
    def under(self, path) -> bool:
        try:
            real = os.path.realpath(os.fspath(path))
        except TypeError:        # a descriptor or a file object
            return False
        return real == self.root or real.startswith(self.root + os.sep)

    def _track(self, fd: int) -> None:
        st = os.fstat(fd)
        self._fds[fd] = (st.st_dev, st.st_ino)

    def _tracked(self, fd: int) -> bool:
        ident = self._fds.get(fd)
        if ident is None:
            return False
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == ident          # not a reused descriptor number

    def _fail(self):
        self.refused += 1
        raise OSError(self.code, os.strerror(self.code))

    def fits(self, growth: int) -> int:
        """Of `growth` new bytes, how many the disk still takes (and takes them)."""
        got = max(0, min(growth, self.room))
        self.room -= got
        self.written += got
        return got

    # ---------------------------------------------------------------- the patched calls
    def _open(self, file, mode="r", *args, **kwargs):
        real = self._saved["open"](file, mode, *args, **kwargs)
        if isinstance(file, int) or not any(c in mode for c in "wax+") or not self.under(file):
            return real
        return _File(self, real)

    def _os_open(self, path, flags, mode=0o777, *args, **kwargs):
        fd = self._saved["os.open"](path, flags, mode, *args, **kwargs)
        if flags & (os.O_WRONLY | os.O_RDWR) and self.under(path):
            self._track(fd)
        return fd

    def _write_fd(self, fd, data, offset=None):
        write = self._saved["os.write"] if offset is None else self._saved["os.pwrite"]
        call = (lambda d: write(fd, d)) if offset is None else (lambda d: write(fd, d, offset))
        if not self._tracked(fd):
            return call(data)
        data = memoryview(data).cast("B")
        size = os.fstat(fd).st_size
        if offset is None:
            appending = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
            offset_now = size if appending else os.lseek(fd, 0, os.SEEK_CUR)
        else:
            offset_now = offset
        in_place = max(0, min(len(data), size - offset_now))
        growth = len(data) - in_place
        got = self.fits(growth)
        if got == growth:
            return call(data)
        if in_place + got == 0:
            self._fail()
        self.torn += 1
        return call(data[:in_place + got])     # a short write; the next one finds no space

    # ---------------------------------------------------------------- on and off
    def start(self) -> "FullDisk":
        self._saved = {"open": builtins.open, "io.open": io.open, "os.open": os.open,
                       "os.write": os.write, "os.pwrite": os.pwrite}
        builtins.open = io.open = self._open
        os.open = self._os_open
        os.write = self._write_fd
        os.pwrite = lambda fd, data, offset: self._write_fd(fd, data, offset)
        return self

    def stop(self) -> None:
        builtins.open, io.open = self._saved["open"], self._saved["io.open"]
        os.open, os.write, os.pwrite = self._saved["os.open"], self._saved["os.write"], self._saved["os.pwrite"]

    def __enter__(self) -> "FullDisk":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _File:
    """A file object under the full disk's root: its writes take room."""

    def __init__(self, disk: FullDisk, real):
        self._disk, self._real = disk, real
        self._text = isinstance(real, io.TextIOBase)
        self._encoding = getattr(real, "encoding", None) or "utf-8"
        disk._track(real.fileno())      # an encoder may write to the descriptor itself

    def write(self, data):
        raw = data.encode(self._encoding) if self._text else bytes(memoryview(data).cast("B"))
        got = self._disk.fits(len(raw))
        if got == len(raw):
            return self._real.write(data)
        if got:
            self._disk.torn += 1
            self._real.write(raw[:got].decode(self._encoding, "ignore") if self._text else raw[:got])
            self._real.flush()
        self._disk._fail()

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()

    def __iter__(self):
        return iter(self._real)

    def __getattr__(self, name):
        return getattr(self._real, name)
