"""seakr_paper: SeaKR at the paper profile's own settings on LLaMA-2-7B's shape, question by
question, for as many questions as what is left of the call allows.

The paper profile's k (20), max_tokens (100), demonstrations (the official lists' lengths),
reasoning steps and memory settings, on `--paper-sets` (2Wiki and HotpotQA), one question of
each set in turn (so every set has one before any has two), up to `--paper-questions` per set. A
question starts only where it fits in what is left of the part's limit (the slowest so far, or
the plan's estimate before the first: plan.question_room); a set that gets none says so with the
estimate (`not_reached`). After each question its result is written (`ctx.partial`): seconds,
LLM calls, retrievals, prompt tokens per call, generated tokens, and its out-of-memory retries
and the seconds they cost. Random weights run every sample to max_tokens, so the pace is an
upper bound, given per question and per 1,000 generated tokens (which compares across runs that
stop early and runs that do not), against the paper's Table 7 (4 x GeForce 3090 with vLLM).
Then `cost`'s question-runs of the paper profile priced at that pace (SeaKR's rows only).
The decode path is `--paper-decode` (graph by default: the one whose pace a GPU has to show; where
no CUDA exists the child process runs it as the static step, doubles/simulated_graph.py), and
`decode` says what ran: the decode calls per path and the graph path's captures and replays.
ok (verdicts._seakr_paper): on each set at least one question finished and none failed, and the
decode calls ran on the path named (graph: with a capture); a set not reached for time is
`skipped` (the report's next_call runs it).
"""
from __future__ import annotations

import time

from ..device import peak_gib, reset_peak
from ..stand_ins import RandomLlamaLoader, model_overrides, profile_inputs, run_file_rows, tokenizer_dir
from ..peak_prediction import peak_fields
from ..plan import question_room, skip_record

TABLE7 = {"2wiki": 4.94, "hotpotqa": 7.30}      # SeaKR's seconds per question, paper Table 7


def seconds_per_1k(seconds: list[float], generated: list[int]) -> float:
    """The questions' seconds per 1,000 tokens they generated (all questions pooled)."""
    return round(1000 * sum(seconds) / max(sum(generated), 1), 3)


def run(ctx) -> dict:
    from ...artifacts import spec_for
    from ...core.config import load_config
    from ...llm.hf.decode import graph, paths
    from ...llm.hf.decode.names import resolve
    from ...runs import grid
    from ...runs.preflight import with_hours
    from ...runs.disk_needs import estimate_needs
    from ...runs.plan import question_runs

    opt = ctx.opt
    sets = list(opt.paper_sets)
    cfg, searcher = profile_inputs("paper", {**model_overrides(ctx.device), "model.decode": opt.paper_decode,
                                             "datasets.complex": sets,
                                             "datasets.simple": [], "analysis.datasets": sets},
                                   opt.paper_questions, opt.passages)
    loader = RandomLlamaLoader(ctx.shape, ctx.device, tokenizer_dir(ctx.work))
    pool = grid.BackendPool(cfg, loader=loader)
    settings = {k: cfg[k] for k in ("uncertainty.k", "uncertainty.max_tokens", "seakr.n_shot",
                                    "seakr.max_reasoning_steps", "seakr.max_new_tokens", "seakr.max_docs",
                                    "prompts.demos", "seakr.mode", "model.max_batch_contexts",
                                    "model.prefix_cache_tokens", "model.decode")}
    needs = estimate_needs(cfg)
    out: dict = {"profile": "paper", "shape": ctx.shape, "dtype": cfg["model.dtype"], "settings": settings,
                 "disk_needs_bytes": {k: needs[k] for k in ("call_cache", "run_files")},
                 "note": "random weights: every generation runs to its token limit, so an upper bound"
                         + ("" if ctx.paper_shape else "; tiny shape on CPU: a rehearsal, not a pace"),
                 "table7_s_per_q": {d: TABLE7[d] for d in sets}, "questions": {}, "not_reached": {},
                 "model_builds": loader.builds}
    reset_peak(ctx.device)
    slowest = 0.0
    calls_before, captures_before = paths.calls(), graph.LOG.mark()

    def decode_record() -> dict:
        ran = {p: n - calls_before[p] for p, n in paths.calls().items() if n > calls_before[p]}
        named = resolve(cfg["model.decode"])
        cap = graph.LOG.since(captures_before)
        return {"named": named, "calls": ran, "graph_captures": cap["captures"], "graph_replays": cap["replays"],
                **({"simulated": paths.strategy(named).simulated} if paths.strategy(named).simulated else {})}

    def fits() -> tuple[bool, float]:
        need = question_room(slowest or ctx.estimate.per_question)
        soft = opt.soft_seconds is None or ctx.used() < opt.soft_seconds
        # the call's slack (plan.SLACK_FRACTION) is left to what runs over, not spent on more questions
        return soft and ctx.used() + need <= ctx.limit - getattr(opt, "reserve_s", 0.0), need

    for n in range(1, opt.paper_questions + 1):
        for d in sets:
            ok, need = fits()
            if not ok:
                if n == 1:
                    left = ctx.limit - getattr(opt, "reserve_s", 0.0) - ctx.used()
                    out["not_reached"][d] = skip_record("seakr_paper", ctx.shape, need, left,
                                                        f"a {d} question")
                continue
            t0 = time.monotonic()
            grid.run_grid(cfg, pool, searcher, [spec_for("seakr")], [d], n, progress=False)
            q = run_file_rows(cfg, d, "seakr")[-1]
            slowest = max(slowest, time.monotonic() - t0)
            per = out["questions"].setdefault(d, {"seconds": [], "llm_calls": [], "retrievals": [],
                                                  "prompt_tokens_per_call": [], "generated_tokens": [],
                                                  "oom_retries": [], "oom_seconds": [], "failed": 0})
            per["seconds"].append(round(q["seconds"], 3))
            per["llm_calls"].append(q["llm_calls"])
            per["retrievals"].append(q["n_retrievals"])
            per["prompt_tokens_per_call"].append(round(q["prompt_tokens"] / max(q["llm_calls"], 1)))
            per["generated_tokens"].append(q["tokens"])
            per["oom_retries"].append(q.get("oom_retries", 0))
            per["oom_seconds"].append(q.get("oom_seconds", 0.0))
            per["failed"] += bool(q.get("failed"))
            out["peak_gib"] = peak_gib(ctx.device)
            out["decode"] = decode_record()
            ctx.watch.sample(f"after {d} question {n}")
            ctx.partial(out)
            print(f"[rehearsal] seakr_paper: {d} question {n}: {q['seconds']} s, {q['llm_calls']} calls, "
                  f"{q['tokens']} generated tokens, {q['n_retrievals']} retrievals, out-of-memory retries "
                  f"{q.get('oom_retries', 0)} ({q.get('oom_seconds', 0.0)} s lost)", flush=True)
    pool.close()
    done = {d: q for d, q in out["questions"].items() if q["seconds"]}
    pace = {("seakr", d): sum(q["seconds"]) / len(q["seconds"]) for d, q in done.items()}
    out["seconds_per_q"] = {d: round(v, 2) for (_, d), v in pace.items()}
    out["seconds_per_1k_generated_tokens"] = {d: seconds_per_1k(q["seconds"], q["generated_tokens"])
                                              for d, q in done.items()}
    out["vs_table7"] = {d: round(v / TABLE7[d], 2) for (_, d), v in pace.items()}
    out["oom_retries"] = sum(sum(q["oom_retries"]) for q in out["questions"].values())
    out["oom_seconds"] = round(sum(sum(q["oom_seconds"]) for q in out["questions"].values()), 2)
    out["peak_gib"] = peak_gib(ctx.device)
    out["decode"] = decode_record()
    out.update(peak_fields(ctx, "paper", "seakr", cfg["model.dtype"]))     # beside the predicted 7B peak
    # cost: the paper profile's SeaKR question-runs at this pace (others: the mean of the sets timed)
    runs = question_runs(load_config("paper"))
    seakr_rows = runs[runs.method == "seakr"]
    measured, at_paper = with_hours(seakr_rows, pace), with_hours(seakr_rows)
    out["cost"] = {"seakr_question_runs": int(seakr_rows["questions"].sum()),
                   "hours_at_measured_pace": round(float(measured["hours"].sum()), 1) if pace else None,
                   "hours_at_table7_pace": round(float(at_paper["hours"].sum()), 1),
                   "note": "ARITHMETIC: question-runs of the paper profile's SeaKR rows (Tables 1-4, 7) x "
                           "seconds per question; one GPU, no vLLM, random weights (upper bound)"}
    return out
