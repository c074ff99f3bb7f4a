"""GPU check with a randomly initialised model of a real shape (no weights can travel).

`python -m seakr_repro.tools.gpu_check --tokenizer DIR` builds LLaMA-2-7B's architecture (32 layers,
hidden 4096, 32 heads, MLP 11008) in bf16 on the GPU, then for one SeaKR uncertainty evaluation
(k samples of a ~1,500-token 10-shot prompt) reports peak GPU memory and seconds for several
`model.max_batch_rows` values, and checks that the forced-EOS vectors of `sample` equal those of an
independent full forward pass. Random weights produce random text, so the samples run to
max_new_tokens: a worst case for memory. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time


def main(argv=None) -> dict:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ..llm.hf.backend import HFBackend

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokenizer", required=True, help="a tokenizer directory (its vocab sets the model's)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--rows", default="20,10,5", help="max_batch_rows values to try")
    args = ap.parse_args(argv)

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=len(tok),
                      max_position_embeddings=4096, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config.pad_token_id = tok.eos_token_id
    weights_gb = torch.cuda.memory_allocated() / 2**30
    words = ("Question: Who was born first? Answer: The director was born in 1901. So the answer is X. "
             * 200).split()
    prompt = " ".join(words)
    ids = tok(prompt)["input_ids"][: args.prompt_tokens]
    prompt = tok.decode(ids)
    report = {"device": torch.cuda.get_device_name(), "weights_gb": round(weights_gb, 2),
              "prompt_tokens": len(tok(prompt)["input_ids"]), "k": args.k, "runs": []}
    for rows in [int(r) for r in args.rows.split(",")]:
        backend = HFBackend(model, tok, "llama-2-7b-shape-random", max_batch_rows=rows,
                            prefix_cache_tokens=4096)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        ss = backend.sample(prompt, k=args.k, max_new_tokens=args.max_new_tokens, stop=[". "],
                            seed=42, layer=15, hook="mlp_out")
        torch.cuda.synchronize()
        report["runs"].append({"max_batch_rows": rows, "seconds": round(time.perf_counter() - t0, 2),
                               "peak_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                               "mean_tokens": sum(len(s.token_ids) for s in ss.samples) / len(ss.samples)})
    # the vectors equal an independent full forward pass (bf16 tolerance)
    s0 = ss.samples[0]
    full = torch.tensor([tok(prompt)["input_ids"] + s0.token_ids + [backend.eos_token_id]], device="cuda")
    box = {}
    h = model.model.layers[15].mlp.register_forward_hook(lambda m, a, o: box.__setitem__("o", o))
    with torch.inference_mode():
        model(input_ids=full)
    h.remove()
    ref = box["o"][0, -1].float().cpu().numpy()
    import numpy as np
    err = float(np.abs(ss.vectors[0] - ref).max() / (np.abs(ref).max() + 1e-9))
    report["eos_vector_max_rel_err_bf16"] = round(err, 4)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
