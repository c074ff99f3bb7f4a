"""The torch and transformers versions the package has been tested with, and what an installed
version that differs from the pins has not been tested with.

The one record is `data/measured/tested_versions.csv`: a row per (package, version) whose tests
passed, with the machine, the commit and what ran. A version is "tested" when its release (the
local label dropped: 2.11.0+cu130 is 2.11.0) has a row, or a row's version ends in `.*` and the
release starts with what comes before it. To add a version: run what a row names with that
version installed (for transformers, at least the decode paths' and the backend's tests:
tests/test_decode_static.py, tests/test_decode_paths.py, tests/test_llm_shared_prefix.py,
tests/test_llm_backend.py) and add its row, naming the commit and the machine.
"""
from __future__ import annotations

import csv
from pathlib import Path

from ..core.paths import DATA_DIR

RECORD = DATA_DIR / "measured" / "tested_versions.csv"
CHECKED = ("torch", "transformers")          # the packages whose drift the env part's verdict fails


def release(version: str) -> str:
    """The release of a version string: its local label (`+cu130`) dropped."""
    return version.split("+", 1)[0].strip()


def tested_versions(path: Path = RECORD) -> dict[str, list[str]]:
    """{package: [versions with a row]} of the record."""
    out: dict[str, list[str]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            out.setdefault(row["package"].strip().lower(), []).append(row["version"].strip())
    return out


def is_tested(package: str, version: str, tested: dict[str, list[str]]) -> bool:
    rel = release(version)
    for v in tested.get(package.lower(), []):
        if v == rel or (v.endswith(".*") and rel.startswith(v[:-1])):
            return True
    return False


def untested(versions: dict[str, str | None], pins: dict[str, str], path: Path = RECORD) -> dict[str, dict]:
    """{package: {installed, pinned, tested}} of CHECKED packages installed at a version that differs
    from its pin and has no row in the record (a package that does not import is not listed here)."""
    tested = tested_versions(path)
    out = {}
    for pkg in CHECKED:
        have, pin = versions.get(pkg), pins.get(pkg)
        if not have or (pin and release(have) == pin) or is_tested(pkg, have, tested):
            continue
        out[pkg] = {"installed": have, "pinned": pin, "tested": tested.get(pkg, [])}
    return out
