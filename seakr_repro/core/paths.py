"""Repository-rooted paths. Every path the package writes is derived here, so a smoke run never
overwrites a real one: results live under results/<profile>/."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(os.environ.get("SEAKR_REPO_ROOT", Path(__file__).resolve().parents[2]))
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
    """results/<profile>/, created on demand."""
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
