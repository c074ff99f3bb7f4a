"""SeaKR on a few questions on one backend, timed. The call cache is off and every run starts with
a cold prefix cache, so each backend computes every call itself."""
from __future__ import annotations

import statistics
import time


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

