"""Benchmark one SeaKR uncertainty evaluation: k samples of a 10-shot prompt + forced-EOS vectors.

Compares, in the same run and on the same model, prompt and sampling settings:
  (a) shared pre-fill: `HFBackend.sample` (the prompt is pre-filled once, k rows decode as a batch,
      one batched pass over "completion + EOS" on the prompt cache);
  (b) the straightforward baseline: `model.generate(num_return_sequences=k, do_sample=True)` with
      the same stop strings (it pre-fills the prompt k times), then one batched forward pass over
      prompt + completion + EOS for the vectors.
Both take the vector with the same early-exit hook, so the ratio measures the pre-fill sharing.
A check feeds (b)'s completions through (a)'s vector pass: the vectors must agree.
Written to results/<profile>/bench/uncertainty_eval.json.

    python -m seakr_repro bench u-evaluation [--profile default] [--repeats 3] [--threads N]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
from datetime import datetime, timezone

import numpy as np

from .profile_model import profile_hf
from .seakr_prompt import build_prompt, sample_settings
from .timing import timed


def baseline(backend, prompt: str, *, k, max_new_tokens, stop, temperature, top_k, top_p, seed,
             layer, hook):
    """Plain `generate(num_return_sequences=k)` + a batched forward for the forced-EOS vectors."""
    import torch
    from ..llm.hooks import capture, run_until_captured
    model, eos = backend.model, backend.eos_token_id
    ids = backend.encode(prompt)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids], device=backend.device), do_sample=True,
                             num_return_sequences=k, temperature=temperature, top_k=top_k,
                             top_p=top_p, max_new_tokens=max_new_tokens, stop_strings=list(stop),
                             tokenizer=backend.tokenizer, pad_token_id=eos)
    def plain(row):          # the text of the ids alone, as the backend's stop search sees it
        return backend.tokenizer.decode(row, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    completions = []
    for row in out[:, len(ids):].tolist():
        row = row[: row.index(eos)] if eos in row else row
        text = plain(row)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            text = text[: min(hits)]
            while row and not text.startswith(plain(row)):
                row = row[:-1]
        completions.append(row)
    width = len(ids) + max(len(c) for c in completions) + 1
    inp = torch.full((k, width), eos, dtype=torch.long)
    for i, c in enumerate(completions):
        inp[i, : len(ids) + len(c)] = torch.tensor(ids + c)
    with torch.inference_mode(), capture(model, layer, hook, stop_after=True) as box:
        run_until_captured(model.model, input_ids=inp.to(backend.device), use_cache=False)
    pos = torch.tensor([len(ids) + len(c) for c in completions])
    vectors = box["out"][torch.arange(k), pos.to(box["out"].device)].float().cpu().numpy()
    return completions, vectors


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench u-evaluation",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-shot", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return ap


def main(argv=None) -> dict:
    args = parser().parse_args(argv)

    import torch
    import transformers
    from .. import __version__
    from ..core.io import write_json
    from ..core.paths import results_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg, backend = profile_hf(args.profile)
    name = backend.name
    params = sample_settings(cfg, backend.n_layers, int(cfg["uncertainty.k"]))
    prompt = build_prompt(args.n_shot)
    n_prompt = backend.count_tokens(prompt)
    print(f"model {name} on {backend.device}, {torch.get_num_threads()} torch threads; "
          f"{args.n_shot}-shot prompt of {n_prompt} tokens; k={params['k']}, "
          f"max_new_tokens={params['max_new_tokens']}, layer {params['layer']} {params['hook']}")

    t_shared, shared = timed(lambda: backend.sample(prompt, params), args.repeats)
    t_base, (base_compl, base_vec) = timed(lambda: baseline(backend, prompt, **params), args.repeats)
    check = backend.eos_vectors(backend.prefill(backend.encode(prompt))[0], base_compl,
                                 params["layer"], params["hook"])
    max_diff = float(np.abs(check - base_vec).max())

    rows = {"shared_prefill": t_shared, "hf_generate_baseline": t_base}
    ratio = statistics.median(t_base) / statistics.median(t_shared)
    print(f"\n{'implementation':<24}{'median s':>10}{'min s':>9}{'mean gen tokens':>17}")
    lens = {"shared_prefill": np.mean([len(g.token_ids) for g in shared.samples]),
            "hf_generate_baseline": np.mean([len(c) for c in base_compl])}
    for key, ts in rows.items():
        print(f"{key:<24}{statistics.median(ts):>10.2f}{min(ts):>9.2f}{lens[key]:>17.1f}")
    print(f"speed-up (median baseline / median shared): {ratio:.2f}x")
    print(f"vectors of the same completions, max |diff| between the two paths: {max_diff:.2e}")

    report = {
        "what": "seconds per SeaKR uncertainty evaluation (k samples + forced-EOS vectors)",
        "profile": args.profile, "model": name, "device": str(backend.device),
        "dtype": str(cfg.get("model.dtype", "float32")), "n_shot": args.n_shot,
        "prompt_tokens": n_prompt, "params": params, "repeats": args.repeats,
        "seconds": rows, "median_seconds": {k: statistics.median(v) for k, v in rows.items()},
        "speedup": ratio, "mean_generated_tokens": lens, "vector_check_max_abs_diff": max_diff,
        "provenance": {
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seakr_repro": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "weights_fingerprint": backend.fingerprint,
        },
    }
    out = results_dir(args.profile) / "bench" / "uncertainty_eval.json"
    write_json(out, report)
    print(f"saved {out}")
    return report
