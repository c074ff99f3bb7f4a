"""gpu_check (optional: not in the one call): peak memory and seconds of one SeaKR uncertainty
evaluation at each `model.max_batch_rows` (20, 10, 5), and the forced-EOS vectors of `sample`
against an independent full forward pass, on a random model of LLaMA-2-7B's shape.

Why it is not in the one call: what it showed on a GPU is shown there by other parts. The paper
profile decodes all k = 20 rows in one pass (max_batch_rows null, shared prefix), and seakr_paper
and methods give that setting's peak under the 24 GiB cap; passes of fewer rows are what the
out-of-memory retry falls back to, and the oom part runs them and checks their tokens; the
vectors are checked against a reference by decode_bench (every decode path) and tests/test_gpu.py.
Its three evaluations and a model build (about 40 s on an H100) would cost seakr_paper a
question. Run it (`--parts gpu_check`) to choose max_batch_rows for a card where 20 rows do not
fit. ok (verdicts._gpu_check): every row count ran and the vectors agree (EOS_VECTOR_TOLERANCE).

`python -m seakr_repro.rehearsal.parts.gpu_check --tokenizer DIR` runs the same measurement alone
(k, prompt and new tokens, rows, device, dtype and shape as options) and prints its JSON.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ...doubles.random_llama import SHAPES
from ..device import is_cuda, model_dtype, peak_gib, reset_peak
from ..stand_ins import tokenizer_dir

ROWS = "20,10,5"


def measure(tokenizer: str | Path, k: int = 20, prompt_tokens: int = 1500, max_new_tokens: int = 100,
            rows: str = ROWS, device: str = "cuda", dtype: str = "bfloat16", shape: str = "llama-2-7b") -> dict:
    """Random weights produce random text, so the samples run to max_new_tokens: a worst case for memory."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from ...doubles.random_llama import LLAMA_2_VOCAB, random_llama
    from ...llm.hf.backend import HFBackend
    from ...llm.model_info import resolve_dtype
    from ...llm.sampling_settings import Sampling

    tok = AutoTokenizer.from_pretrained(tokenizer)
    torch_dtype = resolve_dtype(dtype)
    reset_peak(device)
    t0 = time.perf_counter()
    model = random_llama(shape, tok, device, torch_dtype, vocab_size=LLAMA_2_VOCAB)
    build_s = round(time.perf_counter() - t0, 2)
    words = ("Question: Who was born first? Answer: The director was born in 1901. So the answer is X. "
             * 200).split()
    prompt = tok.decode(tok(" ".join(words))["input_ids"][:prompt_tokens], skip_special_tokens=True)
    params = sum(p.numel() for p in model.parameters())
    report = {"device": torch.cuda.get_device_name() if is_cuda(device) else "cpu",
              "shape": shape, "dtype": dtype, "vocab": model.config.vocab_size, "params": params, "build_s": build_s,
              "weights_gb": round(params * torch_dtype.itemsize / 2**30, 2),
              "prompt_tokens": len(tok(prompt)["input_ids"]), "k": k,
              "max_new_tokens": max_new_tokens, "runs": []}
    layer = model.config.num_hidden_layers // 2 - 1
    for n in [int(r) for r in rows.split(",")]:
        backend = HFBackend(model, tok, f"{shape}-random", max_batch_rows=n, prefix_cache_tokens=4096)
        reset_peak(device)
        t0 = time.perf_counter()
        ss = backend.sample(prompt, Sampling(k=k, max_new_tokens=max_new_tokens, stop=[". "], seed=42, layer=layer,
                                             hook="mlp_out"))
        if is_cuda(device):
            torch.cuda.synchronize()
        report["runs"].append({"max_batch_rows": n, "seconds": round(time.perf_counter() - t0, 2),
                               "peak_gb": peak_gib(device),
                               "mean_tokens": sum(len(s.token_ids) for s in ss.samples) / len(ss.samples)})
    # the vectors equal an independent full forward pass of sample 0's forced-EOS sequence
    s0 = ss.samples[0]
    full = torch.tensor([tok(prompt)["input_ids"] + s0.token_ids + [backend.eos_token_id]], device=device)
    box = {}
    h = model.model.layers[layer].mlp.register_forward_hook(lambda m, a, o: box.__setitem__("o", o))
    with torch.inference_mode():
        model(input_ids=full)
    h.remove()
    ref = box["o"][0, -1].float().cpu().numpy()
    report["eos_vector_max_rel_err"] = round(float(np.abs(ss.vectors[0] - ref).max() / (np.abs(ref).max() + 1e-9)), 4)
    return report


def run(ctx) -> dict:
    args = dict(k=20, prompt_tokens=1500 if ctx.paper_shape else 300, max_new_tokens=100 if ctx.paper_shape else 20,
                rows=ROWS, device=ctx.device, dtype=model_dtype(ctx.device), shape=ctx.shape)
    ctx.watch.sample("gpu_check")
    return {"args": args, **measure(tokenizer_dir(ctx.work), **args)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro.rehearsal.parts.gpu_check", description=__doc__)
    ap.add_argument("--tokenizer", required=True, help="a tokenizer directory (its ids are a part of the model's "
                                                       "32,000-token vocabulary)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--rows", default=ROWS, help="max_batch_rows values to try")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", help="float16 (the paper profile's), bfloat16 or float32")
    ap.add_argument("--shape", default="llama-2-7b", choices=sorted(SHAPES))
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args(argv)
    report = measure(a.tokenizer, a.k, a.prompt_tokens, a.max_new_tokens, a.rows, a.device, a.dtype, a.shape)
    print(json.dumps(report, indent=1))
    if a.out:
        a.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
