"""`make reproduce`: run the numbered notebooks in order under papermill, incrementally.

Each executed notebook is kept as results/<profile>/notebooks/<name>.ipynb (the log of the run).
A step re-runs only when one of its inputs changed: the notebook itself, the resolved profile, the
package source, the parameters passed, or an earlier step's stamp (earlier steps produce its inputs).
Execution goes to a temporary file that is renamed on success, so a failed run never leaves a
fresh-looking notebook; the failed one is kept as <name>.failed.ipynb for inspection.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .config import OVERRIDES_ENV, Config, env_overrides, load_config
from .errors import UserError
from .io import read_json, write_json
from .paths import NOTEBOOKS_DIR, REPO_ROOT, results_dir

KERNEL = "python3"


def notebook_steps(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The numbered notebooks (NN-name.ipynb), in order."""
    return sorted(p for p in notebooks_dir.glob("[0-9][0-9]-*.ipynb"))


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def package_fingerprint() -> str:
    """Hash of the package source and shipped data: a code change re-runs what depends on it."""
    files = sorted((REPO_ROOT / "seakr_repro").rglob("*.py"))
    for shipped in ("bundled", "paper"):  # not data/raw or data/cache: those are inputs/outputs
        files += sorted(p for p in (REPO_ROOT / "data" / shipped).rglob("*") if p.is_file())
    return _sha(*(str(p.relative_to(REPO_ROOT)).encode() + p.read_bytes() for p in files))


@dataclass
class StepResult:
    name: str
    status: str          # ran | up-to-date | failed
    seconds: float
    output: Path


def _stamp_path(profile: str, name: str) -> Path:
    return results_dir(profile) / "stamps" / f"{name}.json"


def run_notebook(notebook: Path, profile: str, parameters: dict[str, Any] | None = None,
                 out_dir: Path | None = None, timeout: int | None = 3600,
                 progress: bool = True) -> Path:
    """Execute one notebook with papermill (kernel python3); returns the executed notebook's path."""
    import papermill as pm

    params = {"PROFILE": profile, **(parameters or {})}
    out_dir = out_dir or results_dir(profile) / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / notebook.name
    failed = out_dir / notebook.name.replace(".ipynb", ".failed.ipynb")
    tmp = out_dir / f".{notebook.stem}.running.ipynb"   # papermill wants the .ipynb suffix
    try:
        pm.execute_notebook(str(notebook), str(tmp), parameters=params, kernel_name=KERNEL,
                            cwd=str(notebook.parent), progress_bar=progress,
                            execution_timeout=timeout, log_output=False)
    except pm.PapermillExecutionError as e:
        os.replace(tmp, failed)
        raise UserError(f"notebook {notebook.name} failed in cell {e.exec_count}: {e.ename}: "
                        f"{e.evalue}", path=failed,
                        fix="open the failed notebook to see the cell and its output, fix the "
                            "cause, then run the step again") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, final)   # only a finished notebook appears under its real name
    failed.unlink(missing_ok=True)
    return final


@contextlib.contextmanager
def _overrides_env(overrides: dict[str, Any]):
    """SEAKR_OVERRIDES for the notebook kernels started inside (they inherit the environment)."""
    before = os.environ.get(OVERRIDES_ENV)
    if overrides:
        os.environ[OVERRIDES_ENV] = json.dumps(overrides)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OVERRIDES_ENV, None)
        else:
            os.environ[OVERRIDES_ENV] = before


def reproduce(profile: str = "default", only: Iterable[str] | None = None, force: bool = False,
              parameters: dict[str, dict] | None = None, progress: bool = True,
              notebooks_dir: Path = NOTEBOOKS_DIR,
              overrides: dict[str, Any] | None = None) -> list[StepResult]:
    """Run every numbered notebook for `profile` in order, skipping steps whose inputs are unchanged.

    `overrides` ({dotted key: value}, the CLI's --set) reach every notebook through the
    SEAKR_OVERRIDES environment variable and enter the stamps through the config's hash."""
    cfg: Config = load_config(profile, overrides)
    # per-profile notebook parameters (params/<profile>.yaml, section `notebooks`), then the caller's
    parameters = {name: {**(cfg.get("notebooks", {}) or {}).get(name, {}), **(parameters or {}).get(name, {})}
                  for name in {*(cfg.get("notebooks", {}) or {}), *(parameters or {})}}
    steps = notebook_steps(notebooks_dir)
    if not steps:
        raise UserError("no numbered notebooks found", path=notebooks_dir,
                        fix="run from the repository root")
    only = set(only or [])
    unknown = only - {p.stem for p in steps} - {p.stem[:2] for p in steps}
    if unknown:
        raise UserError(f"unknown step(s) {sorted(unknown)}", setting="--only",
                        fix="use notebook names such as " + ", ".join(p.stem for p in steps[:3]))
    code = package_fingerprint()
    upstream = ""
    results = []
    for nb in steps:
        step_params = (parameters or {}).get(nb.stem, {})
        stamp = _sha(nb.read_bytes(), cfg.hash.encode(), code.encode(), upstream.encode(),
                     json.dumps(step_params, sort_keys=True).encode())
        upstream = stamp
        selected = not only or nb.stem in only or nb.stem[:2] in only
        out = results_dir(profile) / "notebooks" / nb.name
        stamp_file = _stamp_path(profile, nb.stem)
        previous = read_json(stamp_file).get("stamp") if stamp_file.is_file() else None
        if not selected or (not force and previous == stamp and out.is_file()):
            results.append(StepResult(nb.stem, "up-to-date" if selected else "skipped", 0.0, out))
            if progress:
                print(f"[reproduce] {nb.stem}: {results[-1].status}", flush=True)
            continue
        if progress:
            print(f"[reproduce] {nb.stem}: running (profile {profile})", flush=True)
        t0 = time.perf_counter()
        with _overrides_env({**env_overrides(), **(overrides or {})}):
            run_notebook(nb, profile, step_params, progress=progress)
        seconds = time.perf_counter() - t0
        write_json(stamp_file, {"stamp": stamp, "seconds": round(seconds, 1),
                                "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
        results.append(StepResult(nb.stem, "ran", seconds, out))
        if progress:
            print(f"[reproduce] {nb.stem}: done in {seconds:.0f} s", flush=True)
    return results
