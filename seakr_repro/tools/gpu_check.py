"""GPU check with a randomly initialised model of a real shape (no weights can travel).

`python -m seakr_repro.tools.gpu_check --tokenizer DIR` builds LLaMA-2-7B's architecture (32 layers,
hidden 4096, 32 heads, MLP 11008; the vocabulary is the tokenizer's) in `--dtype` on `--device`,
then for one SeaKR uncertainty evaluation (k samples of a ~1,500-token 10-shot prompt) reports
peak GPU memory and seconds for several `model.max_batch_rows` values, and checks that the
forced-EOS vectors of `sample` equal those of an independent full forward pass. Random weights
produce random text, so the samples run to max_new_tokens: a worst case for memory. Prints one
JSON object (and writes it to `--out`). `--shape tiny --device cpu` runs the same code in seconds
(the GPU rehearsal's CPU run, scripts/gpu_rehearsal.sh).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

def _peak_gb(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def main(argv=None) -> dict:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from ..doubles.random_llama import SHAPES, random_llama
    from ..llm.hf.backend import HFBackend
    from ..llm.model_info import resolve_dtype

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokenizer", required=True, help="a tokenizer directory (its vocab sets the model's)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--rows", default="20,10,5", help="max_batch_rows values to try")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", help="float16 (the paper profile's), bfloat16 or float32")
    ap.add_argument("--shape", default="llama-2-7b", choices=sorted(SHAPES))
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    dtype = resolve_dtype(args.dtype)
    _sync(args.device)
    model = random_llama(args.shape, tok, args.device, dtype)
    words = ("Question: Who was born first? Answer: The director was born in 1901. So the answer is X. "
             * 200).split()
    ids = tok(" ".join(words))["input_ids"][: args.prompt_tokens]
    prompt = tok.decode(ids, skip_special_tokens=True)
    params = sum(p.numel() for p in model.parameters())
    report = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "shape": args.shape, "dtype": args.dtype, "vocab": len(tok), "params": params,
              "weights_gb": round(params * dtype.itemsize / 2**30, 2),
              "prompt_tokens": len(tok(prompt)["input_ids"]), "k": args.k,
              "max_new_tokens": args.max_new_tokens, "runs": []}
    for rows in [int(r) for r in args.rows.split(",")]:
        backend = HFBackend(model, tok, f"{args.shape}-random", max_batch_rows=rows, prefix_cache_tokens=4096)
        _sync(args.device)
        t0 = time.perf_counter()
        ss = backend.sample(prompt, k=args.k, max_new_tokens=args.max_new_tokens, stop=[". "],
                            seed=42, layer=model.config.num_hidden_layers // 2 - 1, hook="mlp_out")
        if args.device == "cuda":
            torch.cuda.synchronize()
        report["runs"].append({"max_batch_rows": rows, "seconds": round(time.perf_counter() - t0, 2),
                               "peak_gb": _peak_gb(args.device),
                               "mean_tokens": sum(len(s.token_ids) for s in ss.samples) / len(ss.samples)})
    # the vectors equal an independent full forward pass of sample 0's forced-EOS sequence
    layer = model.config.num_hidden_layers // 2 - 1
    s0 = ss.samples[0]
    full = torch.tensor([tok(prompt)["input_ids"] + s0.token_ids + [backend.eos_token_id]], device=args.device)
    box = {}
    h = model.model.layers[layer].mlp.register_forward_hook(lambda m, a, o: box.__setitem__("o", o))
    with torch.inference_mode():
        model(input_ids=full)
    h.remove()
    ref = box["o"][0, -1].float().cpu().numpy()
    err = float(np.abs(ss.vectors[0] - ref).max() / (np.abs(ref).max() + 1e-9))
    report["eos_vector_max_rel_err"] = round(err, 4)
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
