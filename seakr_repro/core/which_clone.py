"""Which clone of the repository a path lies in (`checkout_of`), and the check that a command runs
in the clone its package is from (`checked_repo_root`): started inside another clone, every path
would be the other clone's (core/paths.py). Not in paths.py because it raises a UserError, whose
paragraphs name paths relative to the root (errors imports paths)."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError
from .paths import PACKAGE_ROOT, REPO_ROOT


def checkout_of(path: str | Path) -> Path | None:
    """The clone of this repository that `path` lies in (the nearest folder with seakr_repro/ and
    notebooks/), or None."""
    path = Path(path).resolve()
    for folder in (path, *path.parents):
        if (folder / "seakr_repro" / "__init__.py").is_file() and (folder / "notebooks").is_dir():
            return folder
    return None


def checked_repo_root(cwd: str | Path | None = None) -> Path:
    """The repository root, after checking that the command runs in it: started inside another
    clone, the package (and so every path) would be the other clone's, which is an error naming
    both. Outside any clone, or with SEAKR_REPO_ROOT set, the root is as chosen."""
    here = checkout_of(Path.cwd() if cwd is None else cwd)
    if here is not None and "SEAKR_REPO_ROOT" not in os.environ and here != REPO_ROOT.resolve():
        raise UserError(f"this command runs in the clone {here}, but imports seakr_repro from {PACKAGE_ROOT} "
                        "(the environment's editable install points there): its results, tables and "
                        "figures would go there", setting="repository root",
                        fix=f"run `python -m seakr_repro ...` (or `make ...`) from the root of {here}, "
                            f"whose own package then comes first; or cd {REPO_ROOT}; or set "
                            "SEAKR_REPO_ROOT to the clone every path should follow")
    return REPO_ROOT
