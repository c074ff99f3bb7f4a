"""Shared-prefix decoding against the prompt-copying path, on the profile's model, in one run.

The prompt-copying path (`model.shared_prefix: false`) copies the prompt's KV cache into every row.
Measured in one run:
  - one k = 20 uncertainty evaluation of the 10-shot prompt (same tokens, vectors compared);
  - the same U-evaluation on the default decode path (`HFBackend(decode=...)`) against the
    shared-prefix decode loop as first written (`decode="python"`), alternating (same tokens
    required, vectors compared): the CPU default must be no slower;
  - one decode step of 30 rows over one shared 500-token prompt against 3 x 10 rows with copies;
  - KV-cache bytes against k (5, 10, 20) and prompt length (0.5k, 1k, 2k tokens): ARITHMETIC from
    the model's shapes (no CPU memory counter sees torch tensors reliably), for this model and
    for LLaMA-2-7B in bf16;
  - SeaKR seconds per question on the profile (transformers backend, call cache off, one question
    at a time, the two paths alternating question by question so machine load hits both alike).
Written to results/<profile>/bench/shared_prefix.json (`--parts seakr`: shared_prefix_seakr.json).

    python -m seakr_repro bench shared-prefix [--profile default] [--repeats 3] [--parts all|micro|seakr]
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from datetime import datetime, timezone

import numpy as np

from ..llm.sampling_settings import Sampling
from .profile_model import decode_twin, profile_hf, reference_twin
from .seakr_prompt import build_prompt, sample_settings
from .seakr_questions import seakr_alternating
from .timing import alternate


def kv_bytes_per_token(n_layers: int, kv_heads: int, head_dim: int, bytes_per_value: int) -> int:
    """Keys + values of one token in every layer."""
    return 2 * n_layers * kv_heads * head_dim * bytes_per_value


def kv_cache_bytes(per_token: int, k: int, prompt: int, generated: int, shared: bool) -> int:
    """Peak KV-cache bytes of one k-sample evaluation (decoding, or the forced-EOS pass over
    completion + EOS): the prompt once and each row's own tokens (shared), or the prompt copied
    into every row (today's path, on top of the pristine prompt cache it copies from)."""
    if shared:
        return per_token * (prompt + k * (generated + 1))
    return per_token * (prompt + k * (prompt + generated + 1))


def _model_kv_shape(model) -> tuple[int, int, int]:
    from ..llm.model_info import text_config
    cfg = text_config(model.config)
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    return int(cfg.num_hidden_layers), int(getattr(cfg, "num_key_value_heads", heads)), head_dim


def _decode_step(backend, prompt_ids: list[int], rows: int, groups: int, shared: bool,
                 generated: int):
    """A function timing ONE decode step of `groups` x `rows` rows over a prompt whose rows
    already hold `generated` tokens each: one batch over one prompt cache (shared), or `groups`
    batches of `rows` rows, each row with its own copy of the prompt's cache (today's path)."""
    import torch
    from transformers import DynamicCache

    from ..llm.hf import shared_prefix as sp
    from ..llm.hf.prefix_cache import repeat_cache
    prompt_cache, _ = backend.prefill(prompt_ids)
    P, n = len(prompt_ids), rows * groups
    tok = torch.full((n, 1), 29, dtype=torch.long)
    grow = torch.full((n, generated), 29, dtype=torch.long)
    model = backend.model
    with torch.inference_mode():
        if shared:
            suffix = DynamicCache()
            with sp.use_prefixes(model, [sp.Group(0, n, prompt_cache)]):
                model(input_ids=grow, past_key_values=suffix, use_cache=True, logits_to_keep=1,
                      position_ids=(P + torch.arange(generated))[None].expand(n, -1))
        else:
            caches = []
            for _ in range(groups):
                c = repeat_cache(prompt_cache, rows)
                model(input_ids=grow[:rows], past_key_values=c, use_cache=True, logits_to_keep=1)
                caches.append(c)

    @torch.inference_mode()
    def step() -> float:
        if shared:
            cache = copy.deepcopy(suffix)             # the step appends to it: start equal
            with sp.use_prefixes(model, [sp.Group(0, n, prompt_cache)]):
                t0 = time.perf_counter()
                model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1,
                      position_ids=torch.full((n, 1), P + generated))
                return time.perf_counter() - t0
        work = [copy.deepcopy(c) for c in caches]
        t0 = time.perf_counter()
        for c in work:
            model(input_ids=tok[:rows], past_key_values=c, use_cache=True, logits_to_keep=1)
        return time.perf_counter() - t0
    return step


def _seakr_per_question(cfg_profile: str, dataset: str, n: int) -> dict:
    """SeaKR seconds per question, today's path against shared prefix, alternating by question."""
    from ..core.config import load_config
    from ..llm import load_backend

    cfg = load_config(cfg_profile)
    new = load_backend(cfg, cache=False)
    summary = seakr_alternating(cfg, {"reference": reference_twin(new), "shared_prefix": new},
                                dataset, n)
    summary["speedup"] = round(summary["reference"]["seconds_per_question"]
                               / summary["shared_prefix"]["seconds_per_question"], 2)
    return summary


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench shared-prefix",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-shot", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--seakr-questions", type=int, default=4, help="SeaKR questions per path (0 = skip)")
    ap.add_argument("--dataset", default="bundled-2wiki", help="SeaKR's questions")
    ap.add_argument("--parts", choices=("all", "micro", "seakr"), default="all",
                    help="micro = U-evaluation, decode step and memory; seakr = SeaKR per question only "
                         "(written to shared_prefix_seakr.json)")
    return ap


def main(argv=None) -> dict:
    """The shared-prefix benchmark (see the module docstring)."""
    args = parser().parse_args(argv)
    import torch
    import transformers
    from .. import __version__
    from ..core.io import write_json
    from ..core.paths import results_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg, new = profile_hf(args.profile)
    name = new.name
    if not new.shared_prefix:
        raise SystemExit(f"shared-prefix decoding is not supported for {name}: "
                         f"{new.shared_prefix_unsupported}")
    ref = reference_twin(new)
    report: dict = {"what": "shared-prefix decoding against today's path (prompt cache copied per row)",
                    "profile": args.profile, "model": name, "device": str(new.device),
                    "dtype": str(cfg.get("model.dtype", "float32"))}
    out = results_dir(args.profile) / "bench" / (
        "shared_prefix_seakr.json" if args.parts == "seakr" else "shared_prefix.json")

    def save():                  # after each part: a long run keeps what it has measured
        report["provenance"] = {
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seakr_repro": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "cpu_cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "weights_fingerprint": new.fingerprint}
        write_json(out, report)

    if args.parts != "seakr":
        _micro(args, cfg, new, ref, report, save)
    # 4. SeaKR seconds per question
    if args.seakr_questions > 0 and args.parts in ("all", "seakr"):
        sq = _seakr_per_question(args.profile, args.dataset, args.seakr_questions)
        report["seakr_per_question"] = sq
        print(f"SeaKR on {sq['dataset']}, {len(sq['questions'])} questions, one at a time: today's "
              f"path {sq['reference']['seconds_per_question']:.2f} s/question, shared prefix "
              f"{sq['shared_prefix']['seconds_per_question']:.2f} s/question: {sq['speedup']:.2f}x")
    save()
    print(f"saved {out}")
    return report


def _decode_path_part(new, cold, results, args, report, save) -> None:
    """The U-evaluation on `new`'s decode path against `decode="python"`, alternating."""
    old = decode_twin(new, "python")
    ts = alternate({"python": lambda: cold("python", old),
                     new.decode_path: lambda: cold(new.decode_path, new)}, args.repeats)
    got, want = results[new.decode_path], results["python"]
    same = [g.token_ids for g in got.samples] == [g.token_ids for g in want.samples]
    rel = float(np.abs(got.vectors - want.vectors).max() / np.abs(want.vectors).max())
    paths = {"default": new.decode_path, "against": "python", "seconds": ts,
             "median_seconds": {k: statistics.median(v) for k, v in ts.items()},
             "same_tokens": same, "vectors_max_rel_diff": rel}
    paths["ratio"] = paths["median_seconds"]["python"] / paths["median_seconds"][new.decode_path]
    report["decode_path_u_evaluation_k20"] = paths
    save()
    print(f"k=20 U-evaluation: decode path 'python' (the loop as first written) "
          f"{paths['median_seconds']['python']:.2f} s, '{new.decode_path}' (the default) "
          f"{paths['median_seconds'][new.decode_path]:.2f} s: {paths['ratio']:.2f}x "
          f"(same tokens: {same}; vectors max rel diff {rel:.1e})")
    if not same:
        raise SystemExit(f"decode path '{new.decode_path}' changed the samples' tokens")


def _micro(args, cfg, new, ref, report, save) -> None:
    """Parts 1-3 of the shared-prefix benchmark."""
    import torch

    name = new.name
    # 1. one k = 20 uncertainty evaluation of the 10-shot prompt, cold prefix cache each time
    params = sample_settings(cfg, new.n_layers, Sampling.k)
    prompt = build_prompt(args.n_shot)

    results = {}

    def cold(label, be):
        be.reset_prefix_cache()
        t0 = time.perf_counter()
        results[label] = be.sample(prompt, params)
        return time.perf_counter() - t0
    ts = alternate({"reference": lambda: cold("reference", ref),
                     "shared_prefix": lambda: cold("shared_prefix", new)}, args.repeats)
    t_ref, t_new = ts["reference"], ts["shared_prefix"]
    got, want = results["shared_prefix"], results["reference"]
    same = [g.token_ids for g in got.samples] == [g.token_ids for g in want.samples]
    rel = float(np.abs(got.vectors - want.vectors).max() / np.abs(want.vectors).max())
    u_eval = {"prompt_tokens": new.count_tokens(prompt), "params": params,
              "seconds": {"reference": t_ref, "shared_prefix": t_new},
              "median_seconds": {"reference": statistics.median(t_ref),
                                 "shared_prefix": statistics.median(t_new)},
              "speedup": statistics.median(t_ref) / statistics.median(t_new),
              "same_tokens": same, "vectors_max_rel_diff": rel,
              "mean_generated_tokens": float(np.mean([len(g.token_ids) for g in got.samples]))}
    report["u_evaluation_k20"] = u_eval
    save()
    print(f"k=20 U-evaluation, {u_eval['prompt_tokens']}-token prompt: today's path "
          f"{u_eval['median_seconds']['reference']:.2f} s, shared prefix "
          f"{u_eval['median_seconds']['shared_prefix']:.2f} s: {u_eval['speedup']:.2f}x "
          f"(same tokens: {same}; vectors max rel diff {rel:.1e})")

    # 1b. the default decode path against the decode loop as first written, same run
    if new.decode_path != "python":
        _decode_path_part(new, cold, results, args, report, save)

    # 2. one decode step: 30 rows over one shared 500-token prompt vs 3 x 10 rows with copies
    long_ids = new.encode(build_prompt(10) * 2)[:500]
    ts = alternate({"copied": _decode_step(new, long_ids, 10, 3, False, 10),
                     "shared": _decode_step(new, long_ids, 30, 1, True, 10)}, args.repeats * 4)
    t_sh, t_cp = ts["shared"], ts["copied"]
    step = {"prompt_tokens": len(long_ids), "generated_tokens_per_row": 10,
            "seconds": {"copied_3x10": t_cp, "shared_30": t_sh},
            "median_seconds": {"copied_3x10": statistics.median(t_cp),
                               "shared_30": statistics.median(t_sh)},
            "speedup": statistics.median(t_cp) / statistics.median(t_sh)}
    report["decode_step_30_rows"] = step
    save()
    print(f"one decode step, 500-token prompt: 3 x 10 rows with copies "
          f"{step['median_seconds']['copied_3x10'] * 1000:.0f} ms, 30 rows over one shared prompt "
          f"{step['median_seconds']['shared_30'] * 1000:.0f} ms: {step['speedup']:.2f}x")

    # 3. KV-cache bytes against k and prompt length (arithmetic from the shapes)
    gen = int(round(u_eval["mean_generated_tokens"]))
    layers, kv_heads, head_dim = _model_kv_shape(new.model)
    width = torch.finfo(new.model.dtype).bits // 8
    shapes = {name: kv_bytes_per_token(layers, kv_heads, head_dim, width),
              "llama-2-7b (bf16)": kv_bytes_per_token(32, 32, 128, 2)}
    mem = {"method": "arithmetic from the model's shapes: KV-cache tensors only (no activations), "
                     f"{gen} generated tokens per row (this run's mean)",
           "bytes_per_token": shapes, "rows": []}
    for model_name, per in shapes.items():
        for k in (5, 10, 20):
            for P in (512, 1024, 2048):
                a = kv_cache_bytes(per, k, P, gen, shared=False)
                b = kv_cache_bytes(per, k, P, gen, shared=True)
                mem["rows"].append({"model": model_name, "k": k, "prompt_tokens": P,
                                    "reference_MiB": round(a / 2**20, 1),
                                    "shared_prefix_MiB": round(b / 2**20, 1),
                                    "ratio": round(a / b, 2)})
    report["kv_cache_memory"] = mem
    save()
    print(f"KV-cache MiB (arithmetic), {mem['method']}:")
    print(f"{'model':<22}{'k':>4}{'prompt':>8}{'today':>10}{'shared':>10}{'ratio':>8}")
    for r in mem["rows"]:
        print(f"{r['model']:<22}{r['k']:>4}{r['prompt_tokens']:>8}{r['reference_MiB']:>10.1f}"
              f"{r['shared_prefix_MiB']:>10.1f}{r['ratio']:>8.2f}")


