"""SeaKR questions per minute on the Ray engine, 1 and 2 workers, against the local engine, in one
run (docs/paper-profile.md has the record), with the arithmetic for 8 GPUs (`runs.preflight`).

All three answer the same questions, call cache off, and must write the same answers; each fleet's
start is timed apart."""
from __future__ import annotations

import os
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path


def _questions(cfg, dataset: str, n: int) -> list:
    from ..runs.grid import select_questions
    from ..steps.prepare import ensure_index, prepare_datasets

    prepare_datasets(cfg, [dataset])
    ensure_index(cfg, progress=False)
    return select_questions(cfg, dataset, None)[:n]


def _timed(method, records, backend, out: Path) -> tuple[float, list[dict]]:
    from ..runs.runner import run_method

    t0 = time.perf_counter()
    rows = run_method(method, records, out, backend=backend, progress=False)
    return time.perf_counter() - t0, rows


def measure(cfg, dataset: str, n: int, workers: tuple[int, ...] = (1, 2)) -> list[dict]:
    """One row per engine: questions, start seconds, question seconds, questions per minute."""
    from ..runs.engine import Fleet, open_backend
    from ..runs.grid import deltas_for, method_settings

    records = _questions(cfg, dataset, n)
    settings = method_settings(cfg, "seakr", deltas_for(cfg))
    out, answers = [], {}
    with tempfile.TemporaryDirectory(prefix="seakr-bench-ray-") as tmp:
        from ..methods import build_method
        from ..runs.inputs import open_profile_searcher

        t0 = time.perf_counter()
        local = open_backend(cfg.with_overrides({"runner.engine": "local"}), cached=False)
        start = time.perf_counter() - t0
        method = build_method("seakr", local, open_profile_searcher(cfg), dataset, **settings)
        wall, rows = _timed(method, records, local, Path(tmp) / "local.jsonl")
        out.append(_row("local", 1, start, wall, rows))
        answers["local"] = {r["id"]: r["answer"] for r in rows}
        del local, method
        for w in workers:
            t0 = time.perf_counter()
            fleet = Fleet(cfg.with_overrides({"runner.engine": "ray"}), w, status_path=False)
            try:
                backend = fleet.backend(cached=False)
                fleet.warm(cached=False)             # every worker loads its model before the clock
                start = time.perf_counter() - t0
                wall, rows = _timed(backend.method("seakr", dataset, settings), records, backend,
                                    Path(tmp) / f"ray{w}.jsonl")
            finally:
                fleet.close()
            out.append(_row("ray", w, start, wall, rows))
            answers[f"ray{w}"] = {r["id"]: r["answer"] for r in rows}
    same = all(a == answers["local"] for a in answers.values())
    for row in out:
        row["same_answers_as_local"] = same
    return out


def _row(engine: str, workers: int, start: float, wall: float, rows: list[dict]) -> dict:
    return {"engine": engine, "workers": workers, "questions": len(rows),
            "start_seconds": round(start, 1), "question_seconds": round(wall, 1),
            "questions_per_minute": round(60 * len(rows) / wall, 2) if wall else None,
            "llm_calls": sum(r["llm_calls"] for r in rows), "tokens": sum(r["tokens"] for r in rows)}


def arithmetic(gpus: int = 8, profiles=("paper", "paper-sample")) -> list[dict]:
    """Hours of each profile's paper tables at Table 7's pace, and over `gpus` workers: ARITHMETIC."""
    from ..core.config import load_config
    from ..runs.plan import question_runs
    from ..runs.preflight import spread, totals, with_hours

    out = []
    for p in profiles:
        n, timed, hours = totals(with_hours(question_runs(load_config(p))))
        out.append({"profile": p, "question_runs": n, "with_paper_pace": timed,
                    "hours_one_run": round(hours, 1), "workers": gpus,
                    "hours_over_workers": round(spread(hours, gpus), 1)})
    return out


def parser():
    import argparse

    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench ray-engine",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--dataset", default="bundled-2wiki")
    ap.add_argument("-n", type=int, default=4, help="questions per engine (default 4)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of the arithmetic (default 8)")
    return ap


def main(argv=None) -> dict:
    import pandas as pd

    from ..core.config import load_config
    from ..core.io import write_json
    from ..core.paths import results_dir

    args = parser().parse_args(argv)
    cfg = load_config(args.profile)
    rows = measure(cfg, args.dataset, args.n)
    paper = arithmetic(args.gpus)
    print(pd.DataFrame(rows).to_markdown(index=False))
    print(f"\n(measured on this machine: {os.cpu_count()} CPU cores; Ray workers share them, so "
          "expect no gain from a second worker here)\n")
    print(f"ARITHMETIC, not measured: the paper tables at the paper's Table 7 pace, one run against "
          f"{args.gpus} Ray workers (one GPU each, each at that pace):")
    print(pd.DataFrame(paper).to_markdown(index=False))
    report = {"what": "SeaKR questions per minute: local engine vs Ray with 1 and 2 workers, same run",
              "profile": args.profile, "dataset": args.dataset, "measured": rows,
              "arithmetic_8_gpus": paper,
              "provenance": {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "python": platform.python_version(), "cpu_cores": os.cpu_count(),
                             "machine": platform.machine()}}
    out = results_dir(args.profile) / "bench" / "ray_engine.json"
    write_json(out, report)
    print(f"saved {out}")
    return report

