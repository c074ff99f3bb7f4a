"""The shell command that runs a command again, and so resumes it after a stop: the same
arguments, with the SEAKR_* folders and overrides it ran with, from where it ran. `reproduce`,
`status` and the disk-full paragraph (`core.disk_full`) print it to be copied as it is."""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from .config import OVERRIDES_ENV

# the environment variables that change what a run reads or writes: a resume command repeats them
PATH_ENV = ("SEAKR_RESULTS_DIR", "SEAKR_CACHE_DIR", "SEAKR_RAW_DIR", "SEAKR_FIGURES_DIR",
            "SEAKR_TABLES_DIR", "SEAKR_MODEL_PATH", OVERRIDES_ENV)


def python_command(args: Sequence[str]) -> str:
    """`SEAKR_*=... <this python> <args>` as one shell line; the interpreter relative to the working
    directory where it lies under it (.venv/bin/python, as the Makefile runs it)."""
    exe = Path(sys.executable)
    with contextlib.suppress(ValueError):
        exe = exe.relative_to(Path.cwd())
    folders = [f"{k}={v}" for k in PATH_ENV if (v := os.environ.get(k))]
    return shlex.join([*folders, str(exe), *args])


def from_here(command: str) -> str:
    """`cd <this working directory> && command`: right wherever it is pasted."""
    return f"cd {shlex.quote(os.getcwd())} && {command}"
