"""The shared-prefix decode step against what the card can do, every decode path side by side.

`python -m seakr_repro bench decode` builds LLaMA-2-7B's architecture with random weights
(`doubles.random_llama`, 32,000-token vocabulary) in float16 on CUDA and, in one run, measures:
- the floor: a large device-to-device copy's bandwidth (bytes read + written per second) against
  the bytes one step must read (every weight but the input embedding; the prompt's keys and values);
- each decode path (`core.setting_choices.DECODE_PATHS`; by default every one the device runs:
  `graph` on CUDA only) in alternating repeats, the order rotating: one SeaKR U-evaluation's decode
  (`--rows` rows over one `--prompt-tokens` prompt, `--new-tokens` steps) as ms per step, tokens per
  second and "x floor"; the pre-fill's ms; on CUDA the peak of allocated memory. The graph path's
  step is timed over its replays alone; each call's captures, replays, capture seconds and warm-up
  step are reported apart (`ms_per_step_with_capture`: all a call pays). Without CUDA the graph
  path runs as a stand-in (`doubles.simulated_graph`), said under `simulated`;
- the checks (every model they build fits beside the timed one under a 7B run's 24 GiB cap):
  1. at `--dtype` on the timed model, each path against the first (`python` by default): greedy and
     sampled tokens, and the statistics up to each row's first differing token over the position's
     logsumexp, REPORTED, not judged: after 32 random layers float16 kernels drift by percents;
  2. at float32 on the SAME weights at `--check-layers` layers (~4.3 GB at 7B for 4 layers), each path
     against the reference path (`shared_prefix=False`): the same greedy and sampled tokens,
     log-probabilities within 1e-4, vectors within 1e-4 relative: the path's verdict.
Random weights run every row to its limit (no stop string), so each step has all rows.

Writes one JSON (`--out`, and returns it): commit, device, versions, the floor, each path's times,
its checks and `ok` (exit status 1 otherwise). Timings are written BEFORE the checks; a path whose
timing or check fails records its error and the others go on. `--device cpu --shape tiny` runs in
seconds (tests/test_bench_decode.py). `--model NAME` times a model the package has on disk
(`llm.registry.model_dir`, e.g. smollm2-135m-instruct) with its own tokenizer; rows may end early.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from pathlib import Path

F32_LOGPROB_ABS = 1e-4           # tests/test_llm_shared_prefix.py's bounds at float32
F32_VECTOR_REL = 1e-4


def _rel(a, b) -> float:
    import numpy as np

    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-12))


def bandwidth(device: str, n_bytes: int, repeats: int = 5) -> float:
    """Bytes per second of a device-to-device copy, counting bytes read plus bytes written."""
    import torch

    src = torch.ones(n_bytes // 2, dtype=torch.float16, device=device)
    dst = torch.empty_like(src)
    ts = []
    for _ in range(repeats + 1):                   # the first copy warms up, untimed
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        ts.append(time.perf_counter() - t0)
    return 2 * src.numel() * src.element_size() / statistics.median(ts[1:])


def step_bytes(model, prefix_cache) -> dict[str, int]:
    """Bytes one decode step reads: the weights but the input embedding (rows look up their own
    tokens only) and the shared prompt's keys and values."""
    emb = model.get_input_embeddings().weight
    weights = sum(p.numel() * p.element_size() for p in model.parameters() if p is not emb)
    kv = sum(t.numel() * t.element_size() for lay in prefix_cache.layers for t in (lay.keys, lay.values))
    return {"weights": weights, "prefix_kv": kv}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _prompt(tok, n: int) -> tuple[str, list[int]]:
    words = ("Question: Who was born first? Answer: The director was born in 1901. So the answer "
             "is X. " * (n // 8 + 8)).split()
    ids = tok(" ".join(words))["input_ids"][:n]
    text = tok.decode(ids, skip_special_tokens=True)
    return text, tok(text)["input_ids"]


def time_decode(backend, ids: list[int], rows: int, new_tokens: int, seed: int,
                device: str) -> tuple[float, float, list[list[int]], dict | None]:
    """(pre-fill seconds, decode seconds, each row's tokens, the graph path's split or None) of
    `rows` samples of `ids`, top-k 50, top-p 0.9 (SeaKR's), with SeaKR's statistics. The split
    (`graph.LOG`): captures, replays, capture seconds, the warm-up (decode start to first capture;
    each draw reads back, so the host's clock follows the card) and the replayed steps' seconds."""
    from ..llm.hf.decode import graph
    from ..llm.hf.decode.base import Lane, Prefix

    backend.reset_prefix_cache()
    _sync(device)
    t0 = time.perf_counter()
    cache, logits = backend.prefill(ids)
    _sync(device)
    mark = graph.LOG.mark()
    t1 = time.perf_counter()
    lane = Lane(0, rows, backend.picker(seed, 1.0, 50, 0.9), new_tokens, (), True)
    (got,) = backend.decode_lanes([Prefix(cache, len(ids), logits)], [lane])
    _sync(device)
    t2 = time.perf_counter()
    cap = graph.LOG.since(mark)
    split = None
    if cap["captures"]:
        warm = cap["first_capture_at"] - t1
        split = {"captures": cap["captures"], "replays": cap["replays"], "capture_s": cap["capture_seconds"],
                 "warm_up_s": warm, "replayed_s": (t2 - t1) - warm - cap["capture_seconds"]}
    return t1 - t0, t2 - t1, [r.ids for r in got], split


def fewer_layers_float32(model, n_layers: int):
    """`model` in float32 with its first `n_layers` layers only, the same weights, on the same device."""
    import copy

    import torch

    cfg = copy.deepcopy(model.config)
    n = min(int(n_layers), cfg.num_hidden_layers)
    cfg.num_hidden_layers = n
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:n]
    state = {k: v for k, v in model.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < n}
    device = next(model.parameters()).device
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.device(device):
            small = type(model)(cfg).float()
    finally:
        torch.set_default_dtype(default)
    small.load_state_dict(state)            # copies, converting float16 to float32
    return small.eval()


def _sample_args(model, rows: int, new_tokens: int, seed: int):
    from ..llm.sampling_settings import Sampling
    return Sampling(k=rows, max_new_tokens=new_tokens, seed=seed, want_stats=True, hook="mlp_out",
                    layer=max(0, model.config.num_hidden_layers // 2 - 1))


def decode_for_checks(path: str, model, tok, prompt: str, rows: int, new_tokens: int, seed: int):
    """(greedy Generation, SampleSet) of `path` on `model`: a greedy row beside `rows` samples."""
    from ..llm.hf.backend import HFBackend

    be = HFBackend(model, tok, path, decode=path, prefix_cache_tokens=0)
    ((g, ss),) = be.generate_and_sample_many([prompt], generate={"max_new_tokens": new_tokens,
                                                                 "want_stats": True},
                                             sample=_sample_args(model, rows, new_tokens, seed))
    return g, ss


def check_same_dtype(got, want, against: str) -> dict:
    """Check 1 (the module's note). Half precision rounds a logit to ~5e-4 of its size, so a
    position's statistics are compared relative to its logsumexp (at least 1)."""
    diff, scaled = 0.0, 0.0
    for a, b in zip([got[0], *got[1].samples], [want[0], *want[1].samples]):
        n = next((j for j, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
                 min(len(a.token_ids), len(b.token_ids)))
        # the first differing step's context is shared: its entropy and logsumexp compare too
        for j in range(min(n + 1, len(a.entropies), len(b.entropies))):
            d = [abs(a.entropies[j] - b.entropies[j]), abs(a.logsumexp[j] - b.logsumexp[j])]
            d += [abs(a.logprobs[j] - b.logprobs[j])] if j < n else []
            diff = max(diff, *d)
            scaled = max(scaled, max(d) / max(1.0, abs(b.logsumexp[j])))
    same = [s.token_ids == w.token_ids for s, w in zip(got[1].samples, want[1].samples)]
    return {"against": against, "greedy_tokens_equal": got[0].token_ids == want[0].token_ids,
            "sampled_rows_equal": f"{sum(same)}/{len(same)}", "stats_max_abs_diff": diff,
            "stats_max_diff_over_logsumexp": scaled}


def check_float32(path: str, m32, tok, prompt: str, rows: int, new_tokens: int, seed: int) -> dict:
    """Check 2 (see the module's note): `path` against the reference path at float32."""
    from ..llm.hf.backend import HFBackend

    smp = _sample_args(m32, rows, new_tokens, seed)
    ref = HFBackend(m32, tok, "ref", shared_prefix=False, prefix_cache_tokens=0)
    new = HFBackend(m32, tok, "new", decode=path, prefix_cache_tokens=0)
    greedy, want = ref.generate(prompt, max_new_tokens=new_tokens), ref.sample(prompt, smp)
    ((g, got),) = new.generate_and_sample_many([prompt], generate={"max_new_tokens": new_tokens},
                                               sample=smp)
    flat = lambda ss: [x for s in ss.samples for x in s.logprobs + s.entropies + s.logsumexp]  # noqa: E731
    out = {"layers": m32.config.num_hidden_layers,
           "greedy_tokens_equal_f32": g.token_ids == greedy.token_ids,
           "sampled_tokens_equal_f32": [s.token_ids for s in got.samples] == [s.token_ids for s in want.samples],
           "stats_max_abs_diff_f32": max((abs(a - b) for a, b in zip(flat(got), flat(want))), default=0.0),
           "vectors_rel_f32": _rel(got.vectors, want.vectors)}
    out["ok"] = bool(out["greedy_tokens_equal_f32"] and out["sampled_tokens_equal_f32"]
                     and out["stats_max_abs_diff_f32"] <= F32_LOGPROB_ABS
                     and out["vectors_rel_f32"] <= F32_VECTOR_REL)
    return out


def _error(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()[:500]


def _write(report: dict, out: Path | None) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        tmp.replace(out)


def _time_paths(backends: dict, a, ids: list[int], report: dict) -> None:
    """Each path's timing into report["paths"]; a path that fails records its error and leaves."""
    import torch

    from ..llm.hf.decode.paths import strategy

    cuda = a.device.startswith("cuda")
    times = {p: {"prefill": [], "decode": [], "peak": [], "split": []} for p in backends}
    tokens, failed = {}, {}
    for p, b in backends.items():          # one untimed short run each first (kernel selection, allocator)
        try:
            time_decode(b, ids, a.rows, min(4, a.new_tokens), a.seed, a.device)
        except Exception as e:              # noqa: BLE001 - kept in the report, the others go on
            failed[p] = _error(e)
    paths = [p for p in backends if p not in failed]
    for rep in range(a.repeats):
        for p in paths[rep % max(len(paths), 1):] + paths[:rep % max(len(paths), 1)]:
            if p in failed:
                continue
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            try:
                pre, dec, tokens[p], split = time_decode(backends[p], ids, a.rows, a.new_tokens, a.seed, a.device)
            except Exception as e:          # noqa: BLE001
                failed[p] = _error(e)
                continue
            times[p]["prefill"].append(pre)
            times[p]["decode"].append(dec)
            times[p]["split"].append(split)
            times[p]["peak"].append(torch.cuda.max_memory_allocated() / 2**30 if cuda else None)
    floor = report["floor"]["weights_and_prefix_kv_ms"]
    first = next((p for p in backends if p in tokens), None)
    for p in backends:
        if p in failed:
            report["paths"][p] = {"error": failed[p]}
            continue
        steps = max(len(t) for t in tokens[p])
        whole_ms = 1000 * statistics.median(times[p]["decode"]) / steps
        row = {"ms_per_step": whole_ms, "steps": steps,
               "prefill_ms": 1000 * statistics.median(times[p]["prefill"]),
               "decode_seconds": times[p]["decode"], "floor_ms": floor,
               "peak_allocated_gib": max(times[p]["peak"]) if cuda else None,
               f"same_tokens_as_{first}_at_{a.dtype}": tokens[p] == tokens[first]}
        splits = times[p]["split"]
        if p == "graph" or any(splits):
            row.update(_graph_row(splits, whole_ms))
        if strategy(p).simulated:        # why it ran as a stand-in (doubles.simulated_graph)
            row["simulated"] = strategy(p).simulated
        row.update(step_rates(a.rows, row["ms_per_step"], floor))
        report["paths"][p] = row
    for p in backends:
        if p in tokens:
            report["paths"][p][f"speedup_vs_{first}"] = (report["paths"][first]["ms_per_step"]
                                                         / report["paths"][p]["ms_per_step"])


def step_rates(rows: int, ms_per_step: float, floor_ms: float) -> dict[str, float]:
    """Tokens per second (every row draws one token a step) and the step over the floor."""
    return {"tokens_per_s": rows * 1000 / ms_per_step, "x_floor": ms_per_step / floor_ms}


def _graph_row(splits: list[dict | None], whole_ms: float) -> dict:
    """The graph path's calls: captures, replays, capture and warm-up apart, the step as the
    replayed steps' median ms (no capture: the whole call's ms per step, captures 0)."""
    done = [s for s in splits if s]
    per_step = [1000 * s["replayed_s"] / (s["replays"] / s["captures"]) for s in done if s["replays"]]
    row = {"ms_per_step_with_capture": whole_ms, "captures_per_call": [s["captures"] if s else 0 for s in splits],
           "replays_per_call": [s["replays"] if s else 0 for s in splits]}
    if per_step:
        row.update(ms_per_step=statistics.median(per_step), capture_s=statistics.median(s["capture_s"] for s in done),
                   warm_up_ms=1000 * statistics.median(s["warm_up_s"] for s in done))
    return row


def parser() -> argparse.ArgumentParser:
    from ..doubles.random_llama import SHAPES

    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench decode", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="llama-2-7b", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="float16", help="the timed runs' dtype (checks add float32)")
    ap.add_argument("--rows", type=int, default=20, help="rows decoded together (SeaKR's k)")
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument("--new-tokens", type=int, default=100, help="decode steps per timed run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--paths", default=None, help="decode paths, comma-separated (default: every one "
                    "the device runs: graph on CUDA only)")
    ap.add_argument("--check-rows", type=int, default=4, help="rows of the checks (0: time only, no checks)")
    ap.add_argument("--check-tokens", type=int, default=16)
    ap.add_argument("--check-layers", type=int, default=4,
                    help="layers of the float32 copy the float32 checks run on (the same weights)")
    ap.add_argument("--tokenizer", default=None,
                    help="a tokenizer directory (default: the package's LLaMA-style one, built here)")
    ap.add_argument("--copy-mib", type=int, default=None,
                    help="size of the bandwidth copy (default 2048 on CUDA, 256 on CPU)")
    ap.add_argument("--model", default=None,
                    help="a model the package has on disk, instead of random weights of --shape")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    return ap


def main(argv=None) -> dict:
    import torch
    import transformers
    from transformers import AutoTokenizer

    from ..core.provenance import git_revision
    from ..doubles.random_llama import LLAMA_2_VOCAB, random_llama
    from ..llm.hf.backend import HFBackend
    from ..core.setting_choices import DECODE_PATHS
    from ..llm.hf.decode.paths import strategy
    from ..llm.model_info import resolve_dtype

    a = parser().parse_args(argv)
    paths = ([p for p in a.paths.split(",") if p] if a.paths is not None
             else [p for p in DECODE_PATHS if strategy(p).runs_on(a.device)])
    bad = [p for p in paths if p not in DECODE_PATHS]
    if bad:
        raise SystemExit(f"--paths: unknown decode path(s) {bad}; use some of {', '.join(DECODE_PATHS)}")

    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = resolve_dtype(a.dtype)
    if a.model:
        from transformers import AutoModelForCausalLM

        from ..llm.registry import model_dir
        path = model_dir(a.model)
        tok = AutoTokenizer.from_pretrained(a.tokenizer or path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(a.device).eval()
    else:
        if a.tokenizer:
            tok = AutoTokenizer.from_pretrained(a.tokenizer)
        else:
            import tempfile

            from ..doubles.llama_tokenizer import build_tokenizer
            with tempfile.TemporaryDirectory(prefix="bench-decode-tok-") as d:   # loaded into memory
                tok = build_tokenizer(Path(d))
        vocab = LLAMA_2_VOCAB if a.shape == "llama-2-7b" else None
        model = random_llama(a.shape, tok, a.device, dtype, seed=a.seed, vocab_size=vocab)
    prompt, ids = _prompt(tok, a.prompt_tokens)
    cuda = a.device.startswith("cuda")
    report = {"what": "shared-prefix decode step per decode path, against the bandwidth floor",
              "commit": git_revision(),
              "device": torch.cuda.get_device_name() if cuda else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "torch_threads": torch.get_num_threads(), "model": a.model or "random",
              "shape": None if a.model else a.shape, "dtype": a.dtype,
              "vocab": model.config.vocab_size, "rows": a.rows, "prompt_tokens": len(ids),
              "new_tokens": a.new_tokens, "repeats": a.repeats, "default_path": HFBackend(
                  model, tok, "x").decode_path, "paths": {}, "checks": {}, "ok": None}

    # 1. the floor
    bw = bandwidth(a.device, (a.copy_mib or (2048 if cuda else 256)) * 2**20)
    backends = {p: HFBackend(model, tok, p, decode=p, prefix_cache_tokens=0) for p in paths}
    need = step_bytes(model, backends[paths[0]].prefill(ids)[0])
    report["floor"] = {"copy_bytes_per_s": bw, "step_bytes": need,
                       "weights_ms": 1000 * need["weights"] / bw,
                       "weights_and_prefix_kv_ms": 1000 * (need["weights"] + need["prefix_kv"]) / bw}

    # 2. the paths, alternating; written before any check runs
    _time_paths(backends, a, ids, report)
    del backends
    _write(report, a.out)

    # 3. the checks (the module's note): each path on its own, its error kept if it fails
    if a.check_rows == 0:
        report["ok"] = all("error" not in r for r in report["paths"].values())
        return report
    timed = [p for p in paths if "error" not in report["paths"][p]]
    first = timed[0] if timed else paths[0]
    args = (tok, prompt, a.check_rows, a.check_tokens, a.seed)
    want, m32 = None, None
    for p in paths:
        c = report["checks"][p] = {}
        try:
            if want is None:
                want = decode_for_checks(first, model, *args)
            c[f"at_{a.dtype}"] = check_same_dtype(want if p == first else decode_for_checks(p, model, *args),
                                                  want, first)
            if m32 is None:
                m32 = fewer_layers_float32(model, a.check_layers)
            c["float32"] = check_float32(p, m32, *args)
            c["ok"] = c["float32"]["ok"]
        except Exception as e:              # noqa: BLE001 - kept in the report, the others go on
            c.update(ok=False, error=_error(e))
        _write(report, a.out)
    report["ok"] = all(c["ok"] for c in report["checks"].values()) and all(
        "error" not in r for r in report["paths"].values())
    print(json.dumps(report, indent=1))
    _write(report, a.out)
    return report

