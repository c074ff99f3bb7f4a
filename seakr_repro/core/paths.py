"""Repository-rooted paths. Every path the package writes is derived here, so a smoke run never
overwrites a real one: results live under results/<profile>/.

One root: the repository holding the package that runs (SEAKR_REPO_ROOT moves it). `reproduce`
hands its notebook kernels that same package and root (`kernel_environment`), so a second clone
sharing one environment (its editable install pointing at the other clone) never receives half
of a run, and refuses to start from inside another clone than the one its package is from
(`core.which_clone.checked_repo_root`)."""
from __future__ import annotations

import os
import re
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]     # the folder holding this seakr_repro/
REPO_ROOT = Path(os.environ.get("SEAKR_REPO_ROOT", PACKAGE_ROOT))
DATA_DIR = REPO_ROOT / "data"
RAW_DIR = Path(os.environ.get("SEAKR_RAW_DIR", DATA_DIR / "raw"))  # user downloads (git-ignored)
CACHE_DIR = Path(os.environ.get("SEAKR_CACHE_DIR", DATA_DIR / "cache"))  # derived, re-buildable
BUNDLED_DIR = DATA_DIR / "bundled"
PAPER_DIR = DATA_DIR / "paper"
PARAMS_DIR = REPO_ROOT / "params"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
FIGURES_DIR = Path(os.environ.get("SEAKR_FIGURES_DIR", REPO_ROOT / "figures"))
TABLES_DIR = Path(os.environ.get("SEAKR_TABLES_DIR", REPO_ROOT / "tables"))
RESULTS_ROOT = Path(os.environ.get("SEAKR_RESULTS_DIR", REPO_ROOT / "results"))


def written_folders() -> list[tuple[Path, str]]:
    """The folders this package writes, each with the variable that moves it (as they stand when
    asked: tests move them)."""
    return [(RESULTS_ROOT, "SEAKR_RESULTS_DIR"), (CACHE_DIR, "SEAKR_CACHE_DIR"),
            (FIGURES_DIR, "SEAKR_FIGURES_DIR"), (TABLES_DIR, "SEAKR_TABLES_DIR"), (RAW_DIR, "SEAKR_RAW_DIR")]


def setting_path(value: str | os.PathLike) -> Path:
    """A path named by a setting (corpus.tsv_path, prompts.official_repo, ...): absolute as given;
    relative to the repository root, except that `data/raw/...` follows RAW_DIR, so that
    SEAKR_RAW_DIR moves the profiles' default places of the user's downloads with it."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    parts = path.parts
    if parts[:2] == ("data", "raw"):
        return RAW_DIR.joinpath(*parts[2:])
    return REPO_ROOT / path


def results_dir(profile: str) -> Path:
    path = RESULTS_ROOT / profile
    path.mkdir(parents=True, exist_ok=True)
    return path


def repo_relative(path: str | Path) -> str:
    """`path` relative to the repository where it lies inside it (what a reader can open), else as given."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def repo_relative_text(text: str) -> str:
    """`text` with every absolute path inside the repository written relative to it (a paragraph
    shown to a reader, in a notebook or a terminal, names what they can find in their own clone);
    the root itself and paths outside it stay as they are."""
    for root in sorted({str(REPO_ROOT), str(REPO_ROOT.resolve())}, key=len, reverse=True):
        # the root where a path starts (not inside a longer one: /tmp/<root>/... stays whole)
        text = re.sub(r"(?<![\w./~-])" + re.escape(root.rstrip("/") + "/"), "", text)
    return text


def kernel_environment() -> dict[str, str]:
    """What a notebook kernel started by `reproduce` needs to import this package (not another
    clone's, through the environment's editable install) and to use this root."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(PACKAGE_ROOT) + (os.pathsep + path if path else ""),
            "SEAKR_REPO_ROOT": str(REPO_ROOT)}
