"""Seconds per SeaKR question on the transformers and the vLLM backend, in one run, same machine
(docs/vllm.md has the record).

Both run the same SeaKR on the same first n questions, call cache off, one question at a time and
`--concurrency` in flight. Their random streams differ, so questions take different numbers of
steps: calls and generated tokens per question are reported too. Without vLLM importable
(`make setup-vllm`) its rows are reported as skipped, with the reason."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path


def run_seakr(cfg, backend, searcher, dataset, records, deltas, concurrency, out_dir, label) -> dict:
    """SeaKR (the profile's settings, thresholds `deltas`) on `records`, `concurrency` in flight, into
    out_dir/<label>.jsonl: seconds, LLM calls, generated tokens and EM per question."""
    from ..llm.cache import CachedBackend
    from ..methods import build_method
    from ..runs.grid import method_settings
    from ..runs.runner import run_method

    backend.reset_prefix_cache()        # every run starts cold: the runs share prompts and seeds
    counted = CachedBackend(backend, root=out_dir / "nocache", enabled=False)   # counts only
    method = build_method("seakr", counted, searcher, dataset, **method_settings(cfg, "seakr", deltas))
    t0 = time.perf_counter()
    rows = run_method(method, records, out_dir / f"{label}.jsonl", backend=counted, progress=True,
                      desc=label, concurrency=concurrency)
    wall = time.perf_counter() - t0
    n = len(rows)
    tokens = sum(r["tokens"] for r in rows)
    return {
        "label": label, "backend": getattr(backend, "kind", "hf"), "concurrency": concurrency,
        "questions": n, "wall_seconds": round(wall, 2),
        # sequential: mean latency; concurrent: wall time / questions (throughput)
        "seconds_per_question": round(wall / n if concurrency > 1 else
                                      statistics.mean(r["seconds"] for r in rows), 2),
        "mean_question_latency": round(statistics.mean(r["seconds"] for r in rows), 2),
        "llm_calls_per_question": round(sum(r["llm_calls"] for r in rows) / n, 2),
        "generated_tokens_per_question": round(tokens / n, 1),
        "seconds_per_1k_generated_tokens": round(1000 * wall / max(tokens, 1), 2),
        "em": round(100 * sum(r["em"] for r in rows) / n, 1),
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench backends",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--dataset", default="bundled-2wiki")
    ap.add_argument("-n", type=int, default=4, help="questions per backend (default 4)")
    ap.add_argument("--concurrency", type=int, default=4,
                    help="questions in flight (vLLM; transformers via llm.batching)")
    ap.add_argument("--backends", default="hf,vllm", help="comma-separated: hf, vllm")
    ap.add_argument("--only", help=argparse.SUPPRESS)        # child: measure one backend
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    return _child(args) if args.only else _parent(args)


def _parent(args) -> dict:
    """Each backend in its own process: an idle vLLM engine's threads would slow the transformers
    backend down and skew the ratio (docs/speed.md, "Every benchmark and its record")."""
    import json
    import subprocess
    import sys

    import torch
    import transformers

    from .. import __version__
    from ..core.provenance import git_revision
    from ..core.io import write_json
    from ..core.paths import results_dir

    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    rows, skipped, meta = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="seakr-bench-") as tmp:
        for b in wanted:
            out = Path(tmp) / f"{b}.json"
            cmd = [sys.executable, "-m", "seakr_repro", "bench", "backends", "--profile", args.profile,
                   "--dataset", args.dataset, "-n", str(args.n), "--concurrency",
                   str(args.concurrency), "--only", b, "--json-out", str(out)]
            rc = subprocess.call(cmd)
            if rc == 2:
                sys.exit(2)          # a UserError, already explained by the child
            if rc != 0 or not out.is_file():
                skipped[b] = f"the {b} run failed (exit {rc}); see its output above"
                continue
            got = json.loads(out.read_text())
            rows += got["rows"]
            skipped.update(got["skipped"])
            meta = meta or got["meta"]
    base = next((r for r in rows if r["label"] == "hf"), None)
    for r in rows:
        r["speedup_vs_hf"] = (round(base["seconds_per_question"] / r["seconds_per_question"], 2)
                              if base else None)
    if meta:
        print(f"\nSeaKR on {args.dataset}, first {meta['n']} questions, model {meta['model']} "
              f"({meta['dtype']}) on {meta['device']}, {os.cpu_count()} cores; call cache off; "
              "each backend in its own process")
    head = (f"{'run':<12}{'s/question':>11}{'LLM calls/q':>13}{'gen tok/q':>11}"
            f"{'s/1k tok':>10}{'EM':>6}{'threads':>9}{'vs hf':>8}")
    print(head)
    for r in rows:
        ratio = f"{r['speedup_vs_hf']:.2f}x" if r["speedup_vs_hf"] else "-"
        print(f"{r['label']:<12}{r['seconds_per_question']:>11.2f}{r['llm_calls_per_question']:>13.2f}"
              f"{r['generated_tokens_per_question']:>11.1f}{r['seconds_per_1k_generated_tokens']:>10.2f}"
              f"{r['em']:>6.1f}{r['torch_threads']:>9}{ratio:>8}")
    for k, why in skipped.items():
        print(f"{k}: skipped - {why}")
    try:
        import vllm
        vllm_version = vllm.__version__
    except Exception:
        vllm_version = None
    report = {
        "what": "seconds per SeaKR question, transformers vs vLLM backend, same machine and run",
        "profile": args.profile, "dataset": args.dataset, "questions": meta.get("ids", []),
        "model": meta.get("model"), "dtype": meta.get("dtype"), "device": meta.get("device"),
        "rows": rows, "skipped": skipped,
        "provenance": {
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seakr_repro": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "vllm": vllm_version,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpu_cores": os.cpu_count(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "git": git_revision(),
        },
    }
    out = results_dir(args.profile) / "bench" / "backends.json"
    write_json(out, report)
    print(f"saved {out}")
    return report


def _child(args) -> dict:
    """Measure one backend (args.only), built from the profile as every run builds it."""
    import json

    import torch

    from ..core.config import load_config
    from ..core.errors import UserError, report_and_exit
    from ..runs.grid import deltas_for
    from ..llm import load_backend
    from ..core.device import resolve_device
    from ..llm.vllm.backend import vllm_available
    from ..core.paths import results_dir
    from ..steps.prepare import ensure_index, prepare_datasets
    from ..runs.inputs import load_prepared, open_profile_searcher

    kind = args.only
    backend, skipped = None, {}
    try:
        cfg = load_config(args.profile, overrides={"model.backend": kind})
        if not (results_dir(cfg.profile) / "data" / f"{args.dataset}.jsonl").is_file():
            prepare_datasets(cfg, [args.dataset])
        ensure_index(cfg)
        searcher = open_profile_searcher(cfg)
        records = load_prepared(cfg, args.dataset)[:args.n]
        deltas = deltas_for(cfg)
        why = vllm_available() if kind == "vllm" else None
        if why is None:
            backend = load_backend(cfg, cache=False)
        else:
            skipped[kind] = f"vLLM is not importable ({why}): run `make setup-vllm`"
    except UserError as e:
        report_and_exit(e)

    rows = []
    if backend is not None:
        with tempfile.TemporaryDirectory(prefix="seakr-bench-") as tmp:
            tmp = Path(tmp)
            # warm-up: first-call allocations, kernels, prefix caches
            backend.generate("Question: What is the capital of France?\nAnswer:", max_new_tokens=4)
            rows.append(run_seakr(cfg, backend, searcher, args.dataset, records, deltas, 1, tmp, kind))
            if kind == "vllm" and args.concurrency > 1:
                rows.append(run_seakr(cfg, backend, searcher, args.dataset, records, deltas,
                                 args.concurrency, tmp, f"vllm-x{args.concurrency}"))
            if kind == "hf" and args.concurrency > 1 and backend.shared_prefix:
                # the questions' calls merged into shared-prefix batches (llm/batching.py)
                from ..llm.batching import ThreadBatcher
                rows.append(run_seakr(cfg, ThreadBatcher(backend), searcher, args.dataset, records, deltas,
                                 args.concurrency, tmp, f"hf-x{args.concurrency}"))
    for r in rows:
        r["torch_threads"] = torch.get_num_threads()
    result = {"rows": rows, "skipped": skipped,
              "meta": {"n": len(records), "ids": [r.id for r in records],
                       "model": cfg["model.name"], "dtype": cfg.get("model.dtype", "float32"),
                       "device": resolve_device(cfg.get("model.device", "auto"))}}
    Path(args.json_out).write_text(json.dumps(result))
    return result

