"""methods: the Table 1 methods end to end on LLaMA-2-7B's shape under the card's cap, to show that
each loads, fits and runs: the dtype its model loaded in, its own peak memory and seconds per
question.

`runs.grid.run_grid` on the paper profile at test sizes (`--methods-profile paper-tiny`, the
default: every paper setting but the sizes; `paper` for its own) over random models
(stand_ins.RandomLlamaLoader), stand-in data (stand_ins.profile_inputs) and bm25s, one question
on the first set of each table (`--questions`, `--sets`: the model and its settings are the same
on every set of a table, so one set shows fit, dtype and peak). Per method and set a result as it
comes (`ctx.partial`), so a part that runs out of time keeps the methods that finished. The
faithful baselines' float32 does not fit 24 GiB: they load float16 (`baselines.dtype_when_too_large`,
announced as `dtype_departure`). A method's peak is its own: the pool frees the previous model,
then the peak is reset. ok (verdicts._methods): every method ran without error, at least one
question on each of its sets, none failed.
"""
from __future__ import annotations

import json
import time
import traceback

from ..device import peak_gib, reset_peak
from ..stand_ins import RandomLlamaLoader, model_overrides, profile_inputs, tokenizer_dir
from ..peak_prediction import peak_fields


def table_sets(cfg, method: str, tables: list[str], first: int | None = None) -> list[str]:
    """The sets `method` runs on in `tables` (with `first`, the first that many of each table's)."""
    from ...artifacts import methods

    out = []
    for table, key in (("table1", "datasets.complex"), ("table2", "datasets.simple")):
        if table in tables and method in methods(table):
            out += list(cfg[key])[:first]
    return out


def rehearsal_methods(opt) -> list[str]:
    """The methods the part runs: --methods, else every method of --methods-tables, SeaKR first."""
    from ...artifacts import methods

    if opt.methods:
        return [m for m in opt.methods.split(",") if m]
    every = [m for t in opt.methods_tables for m in methods(t)]
    return ["seakr"] + [m for m in dict.fromkeys(every) if m != "seakr"]


def _set_row(res, dataset: str) -> dict:
    f1 = res[(res.metric == "f1") & (res.dataset == dataset)]
    row = f1.iloc[0]
    return {"n": int(row["n"]), "seconds_per_q": round(float(row["seconds_per_q"]), 3),
            "llm_calls_per_q": float(row["llm_calls_per_q"]), "retrievals_per_q": float(row["retrievals_per_q"]),
            "failed": int(row["failed"])}


def run(ctx) -> dict:
    from ...artifacts import spec_for
    from ...runs import grid

    opt = ctx.opt
    overrides = {**model_overrides(ctx.device), **getattr(opt, "overrides", {})}
    cfg, searcher = profile_inputs(opt.methods_profile, overrides, opt.questions, opt.passages)
    loader = RandomLlamaLoader(ctx.shape, ctx.device, tokenizer_dir(ctx.work))
    pool = grid.BackendPool(cfg, loader=loader)
    out = {"profile": opt.methods_profile, "shape": ctx.shape, "dtype": cfg["model.dtype"],
           "retrieval": f"{cfg['retrieval.backend']}/{cfg['retrieval.scheme']}", "tables": opt.methods_tables,
           "questions_per_set": opt.questions, "sets_per_table": opt.sets or "all",
           "peak_note": "peak_gib: torch's max allocated from after the previous model was freed (the pool "
                        "frees it, gc, empty_cache, then resets the peak) to the method's end; predicted_7b: "
                        "the peak predicted at LLaMA-2-7B's shape (rehearsal/peak_prediction.py)",
           "methods": {}, "model_builds": loader.builds}
    for m in rehearsal_methods(opt):
        entry: dict = {"asked_sets": table_sets(cfg, m, opt.methods_tables, opt.sets), "sets": {}, "skipped": {}}
        out["methods"][m] = entry
        try:
            reset_peak(ctx.device)
            t0 = time.perf_counter()
            for d in entry["asked_sets"]:
                res, skipped = grid.run_grid(cfg, pool, searcher, [spec_for(m)], [d], opt.questions, progress=False)
                entry["skipped"].update(skipped)
                if len(res):
                    entry["sets"][d] = _set_row(res, d)
                entry.update(peak_gib=peak_gib(ctx.device),
                             model_dtype=pool.loaded[1] if pool.loaded else None)
                ctx.partial(out)
            n = opt.questions * len(entry["asked_sets"])
            entry.update(questions=n, wall_s_per_q=round((time.perf_counter() - t0) / max(n, 1), 3))
            entry.update(peak_fields(ctx, opt.methods_profile, m, entry.get("model_dtype")))
            if m in pool.departures:
                entry["dtype_departure"] = pool.departures[m]
        except Exception as e:          # noqa: BLE001  (one method's failure must not hide the rest)
            entry["error"] = f"{type(e).__name__}: {e}"[:1000]
            entry["traceback"] = traceback.format_exc()[-3000:]
        ctx.watch.sample(f"after {m}")
        ctx.partial(out)
        print(f"[rehearsal] methods: {m} {json.dumps(entry, default=str)[:400]}", flush=True)
    pool.close()
    if pool.departures:
        out["dtype_departures"] = dict(pool.departures)
        print(f"[rehearsal] methods: WARNING: models loaded in another dtype than asked: "
              f"{json.dumps(pool.departures)}", flush=True)
    return out
