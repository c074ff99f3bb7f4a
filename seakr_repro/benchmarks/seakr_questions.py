"""SeaKR on a few questions, timed: one run of questions on one backend (`run_seakr`), and backends
taking turns question by question (`seakr_alternating`). The call cache is off and every run starts
with a cold prefix cache, so each backend computes every call itself."""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path


def run_seakr(cfg, backend, searcher, dataset, records, deltas, concurrency, out_dir, label) -> dict:
    """SeaKR (the profile's settings, thresholds `deltas`) on `records` with `concurrency` questions
    in flight; its run file is out_dir/<label>.jsonl. Seconds, LLM calls, generated tokens and EM
    per question."""
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


def seakr_alternating(cfg, backends: dict, dataset: str, n: int) -> dict:
    """SeaKR on the profile's first n questions of `dataset`, one question at a time with each
    backend in turn (the order swapped every question, so a shared machine's load falls on all
    alike; call cache off). Per backend: seconds, LLM calls, generated tokens, EM and answers per
    question; `answers_agree`: the questions on which every backend gave the same answer."""
    from ..core.paths import results_dir
    from ..runs.grid import deltas_for
    from ..steps.prepare import ensure_index, prepare_datasets
    from ..runs.inputs import load_prepared, open_profile_searcher
    from ..runs.runner import read_results

    if not (results_dir(cfg.profile) / "data" / f"{dataset}.jsonl").is_file():
        prepare_datasets(cfg, [dataset])
    ensure_index(cfg)
    searcher = open_profile_searcher(cfg)
    records = load_prepared(cfg, dataset)[:n]
    deltas = deltas_for(cfg)
    for be in backends.values():                 # warm-up: first-call allocations, kernels
        be.generate("Question: What is the capital of France?\nAnswer:", max_new_tokens=4)
    out: dict[str, list[dict]] = {label: [] for label in backends}
    answers: dict[str, list[str]] = {label: [] for label in backends}
    with tempfile.TemporaryDirectory(prefix="seakr-bench-") as tmp:
        for i, rec in enumerate(records):
            order = list(backends.items())
            for label, be in (order if i % 2 == 0 else order[::-1]):
                row = run_seakr(cfg, be, searcher, dataset, [rec], deltas, 1, Path(tmp), f"{label}-{i}")
                out[label].append(row)
                answers[label] += [r["answer"] for r in read_results(Path(tmp) / f"{label}-{i}.jsonl")]
    summary: dict = {}
    for label, rows in out.items():
        secs = [r["seconds_per_question"] for r in rows]
        summary[label] = {
            "seconds_per_question": round(statistics.mean(secs), 2), "per_question": secs,
            "llm_calls_per_question": round(statistics.mean(r["llm_calls_per_question"] for r in rows), 2),
            "generated_tokens_per_question": round(statistics.mean(
                r["generated_tokens_per_question"] for r in rows), 1),
            "em": round(statistics.mean(r["em"] for r in rows), 1), "answers": answers[label]}
    summary["answers_agree"] = sum(len(set(a)) == 1 for a in zip(*answers.values()))
    summary["questions"] = [r.id for r in records]
    summary["dataset"] = dataset
    return summary
