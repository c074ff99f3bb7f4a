"""Provenance for every artifact: config, model, data, seed, versions, git revision, time, and where
the model ran (`compute`: device, GPU name, dtype; core/device.py). `save_dataframe`/`save_json`
write the artifact and a `<name>.provenance.json` beside it, so any number in a table can be traced
to the run that produced it."""
from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import os
import platform
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from .device import compute
from .io import atomic_open, write_json
from .paths import REPO_ROOT

_PACKAGES = ("seakr-repro", "torch", "transformers", "pyserini", "bm25s", "numpy", "pandas",
             "spacy", "papermill", "vllm")


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


# What a run writes into the checkout itself: rewriting them is the run, not a change to the code
# that made it, so they never make a checkout dirty
RUN_OUTPUTS = ("tables", "figures")


def git_revision() -> dict[str, Any]:
    """{revision, dirty, changed}: the checkout's commit, and the tracked files (outside
    RUN_OUTPUTS; the first 20) that differ from it."""
    def run(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    rev = run("rev-parse", "HEAD").strip()
    changed = [line[3:] for line in run("status", "--porcelain", "--untracked-files=no", "--", ".",
                                         *(f":(exclude){p}" for p in RUN_OUTPUTS)).splitlines() if line]
    return {"revision": rev or "unknown", "dirty": bool(changed), "changed": changed[:20]}


def provenance(cfg=None, **extra) -> dict[str, Any]:
    """A JSON-able record of how an artifact was made."""
    rec: dict[str, Any] = {"time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           "git": git_revision(), "versions": versions(),
                           "machine": {"platform": platform.platform(), "cpus": os.cpu_count()}}
    if cfg is not None:
        rec.update(profile=cfg.profile, config_hash=cfg.hash, seed=cfg.get("seed"),
                   model=cfg.get("model.name"), corpus=cfg.get("corpus.name"),
                   compute=compute(cfg), config=cfg.to_dict())
    rec.update(extra)          # an artifact made from others adds theirs (the ledger: inputs_compute)
    return rec


def read_compute(path: str | Path) -> dict[str, Any] | None:
    """The `compute` record of an artifact's provenance (None: no provenance, or written before
    it was recorded)."""
    from .io import read_json

    prov = Path(path).with_name(Path(path).name + ".provenance.json")
    return read_json(prov).get("compute") if prov.is_file() else None


def save_json(obj: Any, path: str | Path, cfg=None, **extra) -> Path:
    path = Path(path)
    write_json(path, obj)
    write_json(path.with_name(path.name + ".provenance.json"), provenance(cfg, **extra))
    return path


def save_dataframe(df, path: str | Path, cfg=None, **extra) -> Path:
    """Write a DataFrame as CSV (and Markdown beside it when the path ends in .csv)."""
    path = Path(path)
    with atomic_open(path) as fh:
        df.to_csv(fh, index=False)
    if path.suffix == ".csv":
        with atomic_open(path.with_suffix(".md")) as fh:
            fh.write(df.to_markdown(index=False) + "\n")
    write_json(path.with_name(path.name + ".provenance.json"), provenance(cfg, **extra))
    return path
