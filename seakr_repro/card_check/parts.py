"""The card check's parts, in the order they run (check.py); each returns what it measured and
writes what it has so far through `Run.keep`, so a part that fails or runs out of time keeps it.

1. seakr: the decode paths checked at float32 against the reference path, fastest first (graph,
   static, python: a failing path says why, the next is tried); then SeaKR at the profile's
   settings, one question per Table 7 set, on the first path that passed;
2. methods: every other Table 1 method, one question, in the dtype the profile runs it in (the
   faithful baselines' float32), each method's peak its own, the cap lifted on a GPU so a model
   over it loads and its peak is read against the cap;
3. decode: each path's ms per decode step against the card's bandwidth floor (the decode benchmark);
4. oom: the out-of-memory retry under caps between the reserved peak of k/2 rows per pass and the
   allocated peak of k rows in one (`cap_schedule`): the retried run's tokens against an uncapped
   run at the width the retry finished at.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import card
from .plan import PAPER_SETS
from .stand_ins import RandomLlamaLoader, profile_inputs, run_file_rows, tokenizer_dir

PATH_ORDER = ("graph", "static", "python")
K = 20


@dataclass
class Run:
    """What a part gets: the check's options, its folder, the cap in force (torch's bytes, None:
    none) and `keep(doc)`, which writes a part's result so far."""
    opt: argparse.Namespace
    work: Path
    cap_bytes: int | None = None
    keep: Callable[[dict], None] = field(default=lambda doc: None)

    @property
    def device(self) -> str:
        return self.opt.device

    @property
    def paper_shape(self) -> bool:
        return self.opt.shape == "llama-2-7b"


def _inputs(run: Run, sets, overrides: dict | None = None):
    return profile_inputs(run.opt.profile, {"model.device": run.device, "datasets.complex": list(sets),
                                            "datasets.simple": [], "analysis.datasets": list(sets),
                                            **(overrides or {})}, 1, run.opt.passages)


def _tokenizer(run: Run):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir(run.work))


def check_paths(run: Run, dtype: str) -> tuple[str | None, dict]:
    """(the first path of PATH_ORDER whose float32 check passes, each tried path's check)."""
    from ..benchmarks.decode import check_float32, fewer_layers_float32
    from ..doubles.random_llama import random_llama
    from ..llm.hf.decode.paths import strategy
    from ..llm.model_info import resolve_dtype

    tok = _tokenizer(run)
    model = random_llama(run.opt.shape, tok, run.device, resolve_dtype(dtype))
    m32 = fewer_layers_float32(model, 2)
    del model
    prompt = tok.decode(tok(" ".join(["The river runs past the old mill."] * 40))["input_ids"][:200],
                        skip_special_tokens=True)
    checks: dict = {}
    try:
        for p in PATH_ORDER:
            if not strategy(p).runs_on(run.device):
                checks[p] = {"ok": False, "why": f"does not run on {run.device}"}
                continue
            try:
                checks[p] = check_float32(p, m32, tok, prompt, 4, 8, 42)
            except Exception as e:      # noqa: BLE001  (a path that breaks says why; the next is tried)
                checks[p] = {"ok": False, "why": f"{type(e).__name__}: {e}"[:300]}
            if checks[p]["ok"]:
                return p, checks
            checks[p].setdefault("why", "its tokens, log-probabilities or vectors differ from the reference path's")
        return None, checks
    finally:
        del m32
        card.reset_peak(run.device)


def _question(cfg, d: str, label: str) -> dict:
    q = run_file_rows(cfg, d, label)[-1]
    return {"seconds": round(q["seconds"], 2), "llm_calls": q["llm_calls"], "generated_tokens": q["tokens"],
            "retrievals": q["n_retrievals"], "oom_retries": q.get("oom_retries", 0), "failed": bool(q.get("failed"))}


def seakr(run: Run) -> dict:
    from ..artifacts import spec_for
    from ..core.config import load_config
    from ..runs import grid

    dtype = load_config(run.opt.profile)["model.dtype"]
    path, checks = check_paths(run, dtype)
    out: dict = {"dtype": dtype, "path_checks": checks, "decode_path": path, "questions": {}}
    run.keep(out)
    if path is None:
        out["why"] = "no decode path passed its check"
        return out
    cfg, searcher = _inputs(run, PAPER_SETS, {"model.decode": path})
    out["settings"] = {k: cfg[k] for k in ("uncertainty.k", "uncertainty.max_tokens", "seakr.max_reasoning_steps",
                                           "model.max_batch_contexts", "model.prefix_cache_tokens")}
    loader = RandomLlamaLoader(run.opt.shape, run.device, tokenizer_dir(run.work))
    pool = grid.BackendPool(cfg, loader=loader)
    card.reset_peak(run.device)
    try:
        for d in PAPER_SETS:
            grid.run_grid(cfg, pool, searcher, [spec_for("seakr")], [d], 1, progress=False)
            out["questions"][d] = _question(cfg, d, "seakr")
            out["peak_bytes"] = card.peak_bytes(run.device)
            run.keep(out)
        out.update(_predicted(run, "seakr", dtype))       # before the model is freed, which starts it over
    finally:
        pool.close()
    return out


def _predicted(run: Run, method: str, dtype: str | None) -> dict:
    from .peak_prediction import peak_fields

    return {"predicted_7b": peak_fields(run.opt.profile, method, dtype)}


def methods(run: Run) -> dict:
    from ..artifacts import methods as table_methods
    from ..artifacts import spec_for
    from ..runs import grid

    cfg, searcher = _inputs(run, PAPER_SETS[:1], getattr(run.opt, "overrides", None))
    asked = getattr(run.opt, "methods", None) or [m for m in table_methods("table1") if m != "seakr"]
    loader = RandomLlamaLoader(run.opt.shape, run.device, tokenizer_dir(run.work))
    pool = grid.BackendPool(cfg, loader=loader)
    out: dict = {"dataset": PAPER_SETS[0], "methods": {}}
    card.set_cap(run.device, None if card.is_cuda(run.device) else run.cap_bytes)
    try:
        for m in asked:
            entry = out["methods"][m] = {}
            try:
                card.reset_peak(run.device)
                grid.run_grid(cfg, pool, searcher, [spec_for(m)], [PAPER_SETS[0]], 1, progress=False)
                entry.update(_question(cfg, PAPER_SETS[0], m), peak_bytes=card.peak_bytes(run.device),
                             dtype=pool.loaded[1] if pool.loaded else None)
                entry.update(_predicted(run, m, entry["dtype"]))
                if m in pool.departures:
                    entry["dtype_departure"] = pool.departures[m]
            except Exception as e:      # noqa: BLE001  (one method's failure must not hide the rest)
                entry["error"] = f"{type(e).__name__}: {e}"[:500]
            run.keep(out)
    finally:
        pool.close()
        card.set_cap(run.device, run.cap_bytes)
    return out


def decode(run: Run) -> dict:
    from ..benchmarks import decode as benchmark
    from ..core.config import load_config

    size = ("--new-tokens", "50", "--repeats", "2") if run.paper_shape else \
        ("--rows", "6", "--prompt-tokens", "300", "--new-tokens", "12", "--repeats", "1", "--copy-mib", "16")
    got = benchmark.main(["--tokenizer", str(tokenizer_dir(run.work)), "--device", run.device,
                          "--shape", run.opt.shape, "--dtype", load_config(run.opt.profile)["model.dtype"],
                          "--check-rows", "0", *size])
    return {"floor_ms": got["floor"]["weights_and_prefix_kv_ms"],
            "paths": {p: {k: r[k] for k in ("ms_per_step", "x_floor", "error", "simulated") if k in r}
                      for p, r in got["paths"].items()}}


def cap_schedule(floor: int, need: int) -> list[int]:
    """The caps the retry runs under: between the reserved peak of k/2 rows per pass (`floor`) and
    the allocated peak of k rows in one pass (`need`), so the call at k rows cannot fit any of them
    (the allocator frees its cached segments before it fails, so only bytes in tensors are sure to
    fail) and one halving does."""
    return [floor + int(f * (need - floor)) for f in (0.5, 0.25)]


def _same(got, ref) -> dict:
    return {"same_tokens": [s.token_ids for s in got.samples] == [s.token_ids for s in ref.samples],
            "max_abs_vector_diff": float(abs(got.vectors - ref.vectors).max())}


def oom(run: Run) -> dict:
    import torch

    from ..core.config import load_config
    from ..doubles.random_llama import LLAMA_2_VOCAB, random_llama
    from ..llm.hf.backend import HFBackend
    from ..llm.model_info import resolve_dtype
    from ..llm.sampling_settings import Sampling

    tok = _tokenizer(run)
    model = random_llama(run.opt.shape, tok, run.device, resolve_dtype(load_config(run.opt.profile)["model.dtype"]),
                         vocab_size=LLAMA_2_VOCAB)
    words = ("Question: Who directed the film? Answer: The film was directed by Ada. " * 300).split()
    prompt = tok.decode(tok(" ".join(words))["input_ids"][:1500 if run.paper_shape else 300], skip_special_tokens=True)
    args = Sampling(k=K, max_new_tokens=100 if run.paper_shape else 20, seed=42,
                    layer=model.config.num_hidden_layers // 2 - 1, hook="mlp_out")

    def fresh(rows: int | None = None):
        be = HFBackend(model, tok, "oom-check", prefix_cache_tokens=0)
        be.rows_per_forward = rows
        return be

    def measured(rows: int | None):
        card.reset_peak(run.device)
        got = fresh(rows).sample(prompt, args)
        return got, card.peak_bytes(run.device), card.peak_bytes(run.device, allocated=True)

    card.set_cap(run.device, None)
    try:
        measured(None)          # a first call makes one-time buffers a later call does not: not its peak
        _, uncapped, need = measured(None)
        by_width = {K // 2: measured(K // 2)}
        floor = by_width[K // 2][1]
        out: dict = {"k": K, "uncapped_peak_bytes": uncapped, "uncapped_allocated_bytes": need,
                     "half_rows_peak_bytes": floor, "runs": []}
        run.keep(out)
        if floor >= need:
            out["why"] = (f"passes of k/2 rows reserve {floor / 2**20:.1f} MiB at their peak, no less than the "
                          f"{need / 2**20:.1f} MiB the uncapped call holds in tensors: the allocator's segments "
                          "swallow the rows at this shape, so no cap makes the retry necessary and sufficient")
            return out
        for cap in cap_schedule(floor, need):
            be = fresh()
            be.oom.attempts = []
            be.oom.before_attempt = lambda: card.reset_peak(run.device)
            be.oom.after_attempt = lambda rec: rec.update(peak_bytes=card.peak_bytes(run.device))
            entry: dict = {"cap_bytes": cap, "attempts": be.oom.attempts}
            card.set_cap(run.device, cap)
            try:
                got = be.sample(prompt, args)
                entry["ok"] = True
            except torch.OutOfMemoryError as e:
                entry.update(ok=False, error=str(e)[:300])
            finally:
                card.set_cap(run.device, None)
            entry.update(oom_retries=be.stats()["oom_retries"], rows_per_forward=be.rows_per_forward)
            if entry["ok"]:
                width = be.rows_per_forward or K
                if width not in by_width:
                    by_width[width] = measured(width)
                entry.update(compared_at_rows=width, **_same(got, by_width[width][0]))
            done = [a for a in entry["attempts"] if a["outcome"] == "ok"]
            entry["peak_bytes"] = done[-1]["peak_bytes"] if done else None
            out["runs"].append(entry)
            run.keep(out)
            if entry["ok"] and entry["oom_retries"]:
                break
        out["retry_ran"] = any(r["ok"] and r["oom_retries"] and r["same_tokens"] and r["peak_bytes"] <= r["cap_bytes"]
                               < need for r in out["runs"])
        return out
    finally:
        card.set_cap(run.device, run.cap_bytes)


PARTS = {"seakr": seakr, "methods": methods, "decode": decode, "oom": oom}
