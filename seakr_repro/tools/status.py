"""`python -m seakr_repro status`: where a (possibly days-long) `make reproduce` stands.

Two tables from what is on disk, read-only and while the run goes on:
- steps: each numbered notebook, done (its stamp under results/<p>/stamps/), running (papermill's
  temporary notebook is there), failed (<name>.failed.ipynb) or not run;
- runs: each run file results/<p>/runs/<dataset>/<label>-<hash>.jsonl: questions done of the total,
  running EM/F1 with bootstrap intervals, seconds per question, the time left at that pace, and
  its size on disk.
A torn last line (a write in progress) is ignored as the runner does; a file damaged elsewhere is
listed as unreadable instead of stopping the report.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from ..core.config import Config
from ..core.disk import free_bytes, human_bytes
from ..core.errors import UserError
from ..core.paths import NOTEBOOKS_DIR, RESULTS_ROOT
from ..steps.plan import run_total


def _results(cfg: Config) -> Path:
    return RESULTS_ROOT / cfg.profile       # not results_dir(): status creates nothing


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "?"
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def step_status(cfg: Config, notebooks_dir: Path = NOTEBOOKS_DIR) -> pd.DataFrame:
    from ..core.io import read_json
    from ..pipeline import notebook_steps

    res = _results(cfg)
    rows = []
    for nb in notebook_steps(notebooks_dir):
        stamp = res / "stamps" / f"{nb.stem}.json"
        out_dir = res / "notebooks"
        info = {}
        if stamp.is_file():
            try:
                info = read_json(stamp)
            except (UserError, ValueError):
                info = {}
        if (out_dir / f".{nb.stem}.running.ipynb").is_file():
            state = "running"
        elif (out_dir / nb.name.replace(".ipynb", ".failed.ipynb")).is_file():
            state = "failed"
        elif info:
            state = "done"
        else:
            state = "not run"
        rows.append({"step": nb.stem, "state": state, "finished": info.get("finished", ""),
                     "took": _duration(info.get("seconds")) if info else ""})
    return pd.DataFrame(rows, columns=["step", "state", "finished", "took"])


def run_status(cfg: Config, n_boot: int | None = None) -> pd.DataFrame:
    from ..evaluation import score_predictions
    from ..steps.runner import read_results

    runs = _results(cfg) / "runs"
    n_boot = n_boot or cfg.get("evaluation.bootstrap_samples", 1000)
    sizes: dict = {}
    rows = []
    for path in sorted(runs.glob("*/*.jsonl")) if runs.is_dir() else []:
        dataset, label = path.parent.name, path.stem.rsplit("-", 1)[0]
        total = run_total(cfg, dataset, label, sizes)
        row = {"dataset": dataset, "run": label, "done": 0, "total": total, "em": "", "f1": "",
               "s/question": "", "eta": "", "disk": human_bytes(path.stat().st_size),
               "file": str(path.relative_to(_results(cfg)))}
        try:
            done = read_results(path)     # read-only: a torn last line is skipped, not cut
        except UserError as err:
            row["em"] = f"unreadable: line {err.line}"
            rows.append(row)
            continue
        row["done"] = len(done)
        if done:
            score = score_predictions([r.get("answer") for r in done], [r.get("golds", []) for r in done],
                                      n_boot=n_boot, confidence=cfg.get("evaluation.confidence", 0.95),
                                      seed=cfg.get("seed", 0))
            for m in ("em", "f1"):
                row[m] = f"{score[m]:.1f} [{score[m + '_low']:.1f}, {score[m + '_high']:.1f}]"
            # concurrent questions overlap in time: the pace is seconds / questions in flight
            pace = sum(r.get("seconds", 0.0) / max(1, r.get("concurrency", 1)) for r in done) / len(done)
            row["s/question"] = f"{pace:.2f}"
            row["eta"] = "done" if total is not None and len(done) >= total else \
                _duration(pace * (total - len(done))) if total is not None else "?"
        rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "run", "done", "total", "em", "f1", "s/question",
                                       "eta", "disk", "file"])


def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass        # removed while we looked
    return total


def disk_status(cfg: Config, cache: bool = False) -> str:
    from ..core.paths import CACHE_DIR

    res = _results(cfg)
    parts = [f"results/{cfg.profile}: {human_bytes(_tree_bytes(res)) if res.is_dir() else '0 B'}"]
    if cache:               # millions of files at paper scale: only on request
        parts.append(f"cache {CACHE_DIR}: {human_bytes(_tree_bytes(CACHE_DIR))}")
    parts.append(f"free: {human_bytes(free_bytes(res))}")
    return ", ".join(parts)


def report(cfg: Config, cache: bool = False, notebooks_dir: Path = NOTEBOOKS_DIR) -> str:
    """The whole status report as text (Markdown tables)."""
    t0 = time.perf_counter()
    steps = step_status(cfg, notebooks_dir)
    runs = run_status(cfg)
    parts = [f"profile {cfg.profile}, {time.strftime('%Y-%m-%d %H:%M:%S')}", "",
             "steps:", steps.to_markdown(index=False), ""]
    if runs.empty:
        parts.append("runs: none yet")
    else:
        conf = 100 * cfg.get("evaluation.confidence", 0.95)
        parts += [f"runs (EM/F1 in % with {conf:g}% bootstrap intervals; eta at the pace so far):",
                  runs.to_markdown(index=False)]
    from ..steps.engine import workers_report
    workers = workers_report(_results(cfg))      # runner.engine: ray: the driver's workers.json
    if workers:
        parts += ["", workers]
    parts += ["", "disk: " + disk_status(cfg, cache), f"(status took {time.perf_counter() - t0:.1f} s)"]
    return "\n".join(parts)
