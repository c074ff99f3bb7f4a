"""SeaKR seconds per question: this checkout against the package as it was at an earlier git
revision, in one run on one machine, alternating question by question.

This script measures against the code itself as it was before, e.g. the revision an issue was
filed against:

    .venv/bin/python scripts/bench_against_revision.py --rev 1f04356 [-n 4] [--dataset bundled-2wiki]

The old revision is checked out into a temporary git worktree and run from there with this
environment's libraries; it gets its own copy of the derived data cache (corpus, index, call
cache: it may write them in its own format), with the converted models shared read-only. Each
question runs in a fresh process on each side (model load and warm-up not timed), call cache off,
the calibrated thresholds given explicitly (the same on both sides). The two sides must agree on
every question's LLM calls, generated tokens, answer and raw output, else the timing compares
different work and the script says so. Output: tables/<profile>/bench_against_<rev>.json.
Meant for the default profile: the copy of the derived cache would hold the paper profile's DPR
corpus and index (tens of GiB) too.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAME = ("llm_calls", "tokens", "answer", "raw_output")   # must match for the timing to compare


def _child(root: str, profile: str, dataset: str, index: int, deltas: str) -> None:
    """One question on the package under `root` (either module layout); prints one JSON line."""
    import tempfile as tf
    import time

    sys.path.insert(0, root)
    import seakr_repro
    assert seakr_repro.__file__.startswith(root), seakr_repro.__file__
    # the layout is chosen by what is on disk: a failed import could fall through to the
    # editable install's finder and mix in this checkout's modules
    if (Path(root) / "seakr_repro" / "core").is_dir():   # since the core/steps/tools split
        from seakr_repro.core.config import load_config
        from seakr_repro.steps.prepare import ensure_index, load_prepared, open_profile_searcher, prepare_datasets
        from seakr_repro.core.paths import results_dir
        if (Path(root) / "seakr_repro" / "benchmarks" / "seakr_questions.py").is_file():
            from seakr_repro.benchmarks.seakr_questions import run_seakr as _run
        elif (Path(root) / "seakr_repro" / "benchmarks").is_dir():   # since the benchmarks' room
            from seakr_repro.benchmarks.backends import run_seakr as _run
        else:
            from seakr_repro.tools.bench_backends import _run
    else:                                                 # the flat layout before it
        from seakr_repro.config import load_config
        from seakr_repro.prepare import ensure_index, load_prepared, open_profile_searcher, prepare_datasets
        from seakr_repro.paths import results_dir
        from seakr_repro.bench_backends import _run
    from seakr_repro.llm import load_backend

    cfg = load_config(profile, overrides={"model.backend": "hf"})
    if not (results_dir(cfg.profile) / "data" / f"{dataset}.jsonl").is_file():
        prepare_datasets(cfg, [dataset])
    ensure_index(cfg)
    searcher = open_profile_searcher(cfg)
    rec = load_prepared(cfg, dataset)[index]
    backend = load_backend(cfg, cache=False)
    backend.generate("Question: What is the capital of France?\nAnswer:", max_new_tokens=4)  # warm-up
    with tf.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _run(cfg, backend, searcher, dataset, [rec], json.loads(deltas), 1, Path(tmp), "q")
        wall = time.perf_counter() - t0
        (row,) = [json.loads(line) for line in open(Path(tmp) / "q.jsonl", encoding="utf-8")]
    mixed = sorted(name for name, m in sys.modules.items() if name.startswith("seakr_repro")
                   and getattr(m, "__file__", None) and not m.__file__.startswith(root))
    if mixed:
        sys.exit(f"modules from outside {root}: {mixed}")
    out = {k: row.get(k) for k in ("id", "seconds", *SAME, "em", "f1", "n_retrievals")}
    out["wall"] = round(wall, 2)
    print("ROW " + json.dumps(out), flush=True)


def _run_side(root: Path, env: dict, args, index: int, deltas: dict) -> dict:
    cmd = [sys.executable, __file__, "--child", str(root), "--profile", args.profile, "--dataset",
           args.dataset, "--index", str(index), "--deltas", json.dumps(deltas)]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    rows = [line[4:] for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode != 0 or not rows:
        sys.exit(f"the run in {root} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(rows[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", help="the earlier git revision")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--dataset", default="bundled-2wiki")
    ap.add_argument("-n", type=int, default=4, help="questions (the data set's first n)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--deltas", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.child, args.profile, args.dataset, args.index, args.deltas)
    if not args.rev:
        ap.error("--rev is required")

    sys.path.insert(0, str(REPO))
    from seakr_repro.core.config import load_config
    from seakr_repro.core.io import write_json
    from seakr_repro.core.paths import CACHE_DIR, TABLES_DIR
    from seakr_repro.core.provenance import provenance
    from seakr_repro.runs.grid import deltas_for

    deltas = deltas_for(load_config(args.profile))
    rev = subprocess.run(["git", "rev-parse", "--short", args.rev], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    rows: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="seakr-rev-") as tmp:
        tree, cache = Path(tmp) / "tree", Path(tmp) / "cache"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=REPO, check=True,
                       capture_output=True)
        try:
            cache.mkdir()
            for entry in CACHE_DIR.iterdir():      # models shared (read-only use), the rest copied
                if entry.name in ("models", "gguf"):
                    (cache / entry.name).symlink_to(entry.resolve())
                elif entry.is_dir():
                    shutil.copytree(entry, cache / entry.name)
            old_env = {**os.environ, "SEAKR_CACHE_DIR": str(cache),
                       "SEAKR_RESULTS_DIR": str(Path(tmp) / "results")}
            for i in range(args.n):
                rows["old"].append(_run_side(tree, old_env, args, i, deltas))
                rows["new"].append(_run_side(REPO, dict(os.environ), args, i, deltas))
                o, n = rows["old"][-1], rows["new"][-1]
                print(f"{o['id']}: {rev} {o['seconds']:.2f} s, {head} {n['seconds']:.2f} s, "
                      f"{o['seconds'] / n['seconds']:.2f}x", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO,
                           capture_output=True)
    differ = [o["id"] for o, n in zip(rows["old"], rows["new"]) if any(o[k] != n[k] for k in SAME)]
    mean = {side: statistics.mean(r["seconds"] for r in rs) for side, rs in rows.items()}
    report = {
        "what": f"SeaKR seconds per question, the package at {rev} against {head}, one question at "
                "a time, alternating, call cache off, each question in a fresh process",
        "profile": args.profile, "dataset": args.dataset, "revision_old": rev, "revision_new": head,
        "seconds_per_question": {rev: round(mean["old"], 2), head: round(mean["new"], 2)},
        "speedup": round(mean["old"] / mean["new"], 2),
        "same_work": not differ, "questions_that_differ": differ,
        "llm_calls_per_question": statistics.mean(r["llm_calls"] for r in rows["new"]),
        "generated_tokens_per_question": statistics.mean(r["tokens"] for r in rows["new"]),
        "rows": rows, "provenance": provenance(),
    }
    out = TABLES_DIR / args.profile / f"bench_against_{rev}.json"
    write_json(out, report)
    print(f"\n{rev}: {mean['old']:.2f} s per question, {head}: {mean['new']:.2f} s, "
          f"{report['speedup']:.2f}x" + ("" if not differ else f"; NOT the same work on {differ}"))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
