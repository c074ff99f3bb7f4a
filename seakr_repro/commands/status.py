"""`python -m seakr_repro status`: where a (days-long) `make reproduce` stands, read-only from disk
while it runs: whether it is alive (`core.runlock`), where a stopped one stopped and the command
that resumes it; each notebook done, running, stopped, failed or not run; `cost`'s last
prediction beside the run's files and stamps; and every planned run, then every other run file:
questions done of the total, derived rows, EM/F1 with bootstrap intervals, seconds per computed
question, time left at that pace, size on disk. A torn last line is ignored as the runner does.
"""
from __future__ import annotations

import contextlib
import math
import shlex
import time
from pathlib import Path

import pandas as pd

from ..core.config import Config
from ..core.runlock import LOCK_NAME, describe, holder
from ..core.disk import free_bytes, human_bytes
from ..core.errors import UserError
from ..core.paths import NOTEBOOKS_DIR, RESULTS_ROOT
from ..runs.plan import label_files, notebook_parameter, planned_runs, run_file, run_total, with_parameters


RUN_COLUMNS = ["dataset", "run", "config", "done", "derived", "total", "em", "f1", "s/question", "eta", "disk", "file"]


def _results(cfg: Config) -> Path:
    return RESULTS_ROOT / cfg.profile       # not results_dir(): status creates nothing


def _duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "?"
    days, rest = divmod(int(round(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def run_holder(cfg: Config) -> dict | None:
    """The profile's `reproduce` lock: who holds or last held it and whether that run is alive."""
    return holder(_results(cfg) / LOCK_NAME)


def step_status(cfg: Config, notebooks_dir: Path = NOTEBOOKS_DIR, run=...) -> pd.DataFrame:
    """`run`: `run_holder(cfg)` when already read (default: read it)."""
    from ..core.io import read_json
    from ..pipeline import last_run_arguments, notebook_steps, plan

    res = _results(cfg)
    run = run_holder(cfg) if run is ... else run
    alive = bool(run and run["alive"])
    # a done step is stale when an input changed after it ran (the plan `reproduce` would follow)
    # (with the --set and --param of the last run, which are not stale inputs by themselves)
    last = last_run_arguments(res)
    planned = plan(cfg.profile, notebooks_dir=notebooks_dir, results=res, overrides=last["overrides"],
                   parameters=last["parameters"]) if (res / "stamps").is_dir() else []
    stale = {p.name: p.reasons for p in planned if p.action == "run"}
    maybe = {p.name: p.reasons[0] for p in planned if p.action == "may-run"}
    rows = []
    out_dir = res / "notebooks"
    for nb in notebook_steps(notebooks_dir):
        stamp = res / "stamps" / f"{nb.stem}.json"
        info = {}
        with contextlib.suppress(UserError, ValueError):
            info = read_json(stamp) if stamp.is_file() else {}
        if (out_dir / f".{nb.stem}.running.ipynb").is_file():
            state = "running" if alive else "stopped"
        elif (out_dir / nb.name.replace(".ipynb", ".failed.ipynb")).is_file():
            state = "failed"
        elif info:
            state = "stale: " + "; ".join(stale[nb.stem]) if nb.stem in stale else \
                "done; " + maybe[nb.stem] if nb.stem in maybe else "done"
        else:
            state = "not run"
        rows.append({"step": nb.stem, "state": state, "finished": info.get("finished", ""),
                     "took": _duration(info.get("seconds")) if info else ""})
    return pd.DataFrame(rows, columns=["step", "state", "finished", "took"])


def stopped_line(cfg: Config, run: dict | None, notebooks_dir: Path = NOTEBOOKS_DIR) -> str | None:
    """'stopped at <time> ...; resume with: <command>' where a gone run left a step mid-way, else None."""
    from ..pipeline import notebook_steps, reproduce_command

    if run and run["alive"]:
        return None
    out_dir = _results(cfg) / "notebooks"
    left = [p for nb in notebook_steps(notebooks_dir) if (p := out_dir / f".{nb.stem}.running.ipynb").is_file()]
    if not left:
        return None
    # the last sign of life: the holder's heartbeat, or papermill's last save of the notebook
    last = max([p.stat().st_mtime for p in left] + ([run["heartbeat"]] if run else []))
    step = left[0].name[1:].replace(".running.ipynb", "")
    if run:
        who = f" ({describe(run)}; {run['how']})"
        resume = f"cd {shlex.quote(run.get('cwd', '.'))} && {run['command']}"
    else:
        who, resume = "", reproduce_command(cfg.profile)
    return (f"stopped at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(last))} in step {step}"
            f"{who}; resume with: {resume}")


def with_last_run(cfg: Config) -> Config:
    """`cfg` with the last `reproduce`'s --set and --param on top: a run's total as it was asked for."""
    from ..pipeline import last_run_arguments

    last = last_run_arguments(_results(cfg))
    cfg = cfg.with_overrides(last["overrides"]) if last["overrides"] else cfg
    return with_parameters(cfg, last["parameters"])


def _planned_total(cfg: Config, run, sizes: dict):
    from ..artifacts import table

    total = run_total(cfg, run.dataset, run.label, sizes)
    if run.step == table("table7").step and total is not None:     # Table 7 times its notebook's N_QUESTIONS
        total = min(total, int(notebook_parameter(cfg, run.step, "N_QUESTIONS")))
    return total


def _skipped(res: Path, step: str) -> dict:
    """{label: why} of the rows a step skipped when it last ran (its skipped.json)."""
    from ..core.io import read_json

    path, found = res / step / "skipped.json", {}
    with contextlib.suppress(UserError, ValueError):
        found = read_json(path) if path.is_file() else {}
    return found if isinstance(found, dict) else {}


def run_status(cfg: Config, n_boot: int | None = None) -> pd.DataFrame:
    from ..evaluation import score_predictions
    from ..runs.runner import current_name, read_results

    res = _results(cfg)
    runs = res / "runs"
    n_boot = n_boot or cfg.get("evaluation.bootstrap_samples", 1000)
    cfg = with_last_run(cfg)              # totals as the last run was asked: its --set and --param
    sizes: dict = {}
    rows, shown = [], set()
    planned = {}                          # one row per (folder, label): 04, 06 and 10 share SeaKR's
    for run in planned_runs(cfg):
        planned.setdefault((run.folder, run.label), run)
    entries = [(run, run_file(res, run)) for run in planned.values()]
    entries += [(None, path) for path in sorted(runs.glob("*/*.jsonl")) if runs.is_dir()]
    for run, path in entries:
        if path is not None and path in shown:
            continue
        if path is None and label_files(res / run.folder, run.label):
            continue                  # files of several configurations, none recorded: listed below
        if path is None:              # planned, no file: deleted, not run yet, or skipped by its step
            why = _skipped(res, run.step).get(run.label)
            rows.append({**dict.fromkeys(RUN_COLUMNS, ""), "dataset": run.dataset, "run": run.label, "done": 0,
                         "config": "skipped" if why else "missing", "total": _planned_total(cfg, run, sizes),
                         "file": f"{run.folder}/{run.label}-*.jsonl"})
            continue
        shown.add(path)
        dataset, label = path.parent.name, path.stem.rsplit("-", 1)[0]
        current = current_name(path.parent, label)
        config = "" if current is None else "current" if current == path.name else "older"
        # an older configuration's questions are not this run's: no total, no time left
        total = "-" if config == "older" else _planned_total(cfg, run, sizes) if run is not None else \
            run_total(cfg, dataset, label, sizes)
        row = {**dict.fromkeys(RUN_COLUMNS, ""), "dataset": dataset, "run": label, "config": config, "done": 0,
               "derived": 0, "total": total, "disk": human_bytes(path.stat().st_size),
               "file": str(path.relative_to(res))}
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
            # concurrent questions overlap in time: the pace is seconds / questions in flight; a
            # derived row took no model time, so only the computed ones give the pace
            computed = [r for r in done if not r.get("derived_from")]
            row["derived"] = len(done) - len(computed)
            pace = sum(r.get("seconds", 0.0) / max(1, r.get("concurrency", 1)) for r in computed) / len(computed) \
                if computed else float("nan")
            row["s/question"] = f"{pace:.2f}" if computed else ""
            row["eta"] = "-" if config == "older" else "done" if total is not None and len(done) >= total else \
                _duration(pace * (total - len(done))) if total is not None else "?"
        rows.append(row)
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def disk_status(cfg: Config, cache: bool = False) -> str:
    from ..core.disk import tree_bytes
    from ..core.paths import CACHE_DIR

    def used(path: Path) -> str:    # counted to the end, as du would, however long it takes
        got, _ = tree_bytes(path, deadline=math.inf)
        return human_bytes(got)

    res = _results(cfg)
    parts = [f"results/{cfg.profile}: {used(res) if res.is_dir() else '0 B'}"]
    if cache:               # millions of files at paper scale: only on request
        parts.append(f"cache {CACHE_DIR}: {used(CACHE_DIR)}")
    parts.append(f"free: {human_bytes(free_bytes(res))}")
    return ", ".join(parts)


def predicted_beside_actual(cfg: Config) -> str:
    """Per notebook, `cost`'s last prediction beside what the run's files record; or how to get one."""
    from ..price.command import beside_run, beside_text, latest_prediction, priced

    got = latest_prediction(cfg.profile)
    if got is None:
        return (f"predicted beside actual: no prediction yet (`python -m seakr_repro cost --profile "
                f"{cfg.profile}` makes one, a dry run of the profile; this report then shows it here)")
    units, _ = priced(cfg, got)
    table = beside_run(cfg, units)
    return beside_text(cfg, got, table) if table is not None else "predicted beside actual: the run has no files yet"


def report(cfg: Config, cache: bool = False, notebooks_dir: Path = NOTEBOOKS_DIR) -> str:
    """The whole status report as text (Markdown tables)."""
    t0 = time.perf_counter()
    run = run_holder(cfg)
    steps = step_status(cfg, notebooks_dir, run)
    runs = run_status(cfg)
    parts = [f"profile {cfg.profile}, {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    stopped = stopped_line(cfg, run, notebooks_dir)
    if run and run["alive"]:
        parts.append(f"reproduce: running, {describe(run)} ({run['how']})")
    elif stopped:
        parts.append(f"reproduce: {stopped}")
    else:
        parts.append("reproduce: not running")
    from ..core.stop_record import last_stop, stop_line
    stop = last_stop(_results(cfg))       # a run or reproduce that stopped on a full disk
    if stop and not (run and run["alive"]):
        parts.append(stop_line(stop))
    parts += ["", "steps:", steps.to_markdown(index=False), ""]
    if runs.empty:
        parts.append("runs: none yet")
    else:
        conf = 100 * cfg.get("evaluation.confidence", 0.95)
        parts += [f"runs (every run the profile plans, then older files; EM/F1 in % with {conf:g}% "
                  "bootstrap intervals; derived: rows written from another run's file, no model call; "
                  "s/question and eta at the computed rows' pace so far; config: current = the file the row's "
                  "latest run wrote, older = an earlier configuration's file, missing = no file: "
                  "not run yet or deleted, `reproduce` runs it, skipped = its step skipped the row "
                  "and says why in <step>/skipped.json):",
                  runs.to_markdown(index=False)]
    parts += ["", predicted_beside_actual(cfg)]
    from ..runs.workers_status import workers_report
    workers = workers_report(_results(cfg))      # runner.engine: ray: the driver's workers.json
    if workers:
        parts += ["", workers]
    parts += ["", "disk: " + disk_status(cfg, cache), f"(status took {time.perf_counter() - t0:.1f} s)"]
    return "\n".join(parts)
