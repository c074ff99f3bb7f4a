"""Benchmark one SeaKR uncertainty evaluation: k samples of a 10-shot prompt + forced-EOS vectors.

Compares, in the same run and on the same model, prompt and sampling settings:
  (a) shared pre-fill: `HFBackend.sample` (the prompt is pre-filled once, k rows decode as a batch,
      one batched pass over "completion + EOS" on the prompt cache);
  (b) the straightforward baseline: `model.generate(num_return_sequences=k, do_sample=True)` with
      the same stop strings (it pre-fills the prompt k times), then one batched forward pass over
      prompt + completion + EOS for the vectors.
Both take the vector with the same early-exit hook, so the ratio measures the pre-fill sharing.
A check feeds (b)'s completions through (a)'s vector pass: the vectors must agree.

    python -m seakr_repro.bench [--profile default] [--repeats 3] [--threads N]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import datetime, timezone

import numpy as np

# Realistic multi-hop demonstrations in SeaKR's format ("... So the answer is X.").
DEMOS = [
    ("Who was born first, Albert Einstein or Niels Bohr?",
     "Albert Einstein was born on 14 March 1879. Niels Bohr was born on 7 October 1885. "
     "Thus, Albert Einstein was born first", "Albert Einstein"),
    ("What is the capital of the country where the Eiffel Tower is located?",
     "The Eiffel Tower is located in France. The capital of France is Paris", "Paris"),
    ("Which river flows through the city where Mozart was born?",
     "Mozart was born in Salzburg. The Salzach river flows through Salzburg", "Salzach"),
    ("Who directed the film in which Tom Hanks played Forrest Gump?",
     "Tom Hanks played Forrest Gump in the film Forrest Gump. Forrest Gump was directed by "
     "Robert Zemeckis", "Robert Zemeckis"),
    ("In what year did the author of Pride and Prejudice die?",
     "Pride and Prejudice was written by Jane Austen. Jane Austen died in 1817", "1817"),
    ("Are the Amazon and the Nile both in Africa?",
     "The Nile is in Africa. The Amazon is in South America. Thus, they are not both in "
     "Africa", "no"),
    ("What language is spoken in the country whose capital is Lisbon?",
     "Lisbon is the capital of Portugal. The language spoken in Portugal is Portuguese",
     "Portuguese"),
    ("Which university did the founder of Microsoft attend?",
     "Microsoft was founded by Bill Gates and Paul Allen. Bill Gates attended Harvard "
     "University", "Harvard University"),
    ("Who composed the national anthem of the country where the Danube ends?",
     "The Danube ends in the Black Sea at Romania. The national anthem of Romania was "
     "composed by Anton Pann", "Anton Pann"),
    ("How many moons does the planet named after the Roman god of war have?",
     "The planet named after the Roman god of war is Mars. Mars has two moons", "two"),
]
QUESTION = "What is the nationality of the director of the film Jaws?"
STOP = ["\n\n", "\nQuestion:", "\nContext", ". "]   # SeaKR's stops for a first, non-final step


def build_prompt(n_shot: int = 10, question: str = QUESTION) -> str:
    """SeaKR-style few-shot prompt: demos, then the question and an empty answer."""
    demos = "".join(f"Question: {q}\nAnswer: {s}. So the answer is {a}.\n\n"
                    for q, s, a in DEMOS[:n_shot])
    return demos + f"Answer in the same format as before. \nQuestion: {question}\nAnswer:"


def baseline(backend, prompt: str, *, k, max_new_tokens, stop, temperature, top_k, top_p, seed,
             layer, hook):
    """Plain `generate(num_return_sequences=k)` + a batched forward for the forced-EOS vectors."""
    import torch
    from .llm.hooks import capture, run_until_captured
    model, eos = backend.model, backend.eos_token_id
    ids = backend._encode(prompt)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids], device=backend.device), do_sample=True,
                             num_return_sequences=k, temperature=temperature, top_k=top_k,
                             top_p=top_p, max_new_tokens=max_new_tokens, stop_strings=list(stop),
                             tokenizer=backend.tokenizer, pad_token_id=eos)
    completions = []
    for row in out[:, len(ids):].tolist():
        row = row[: row.index(eos)] if eos in row else row
        text = backend._decode(row)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            text = text[: min(hits)]
            while row and not text.startswith(backend._decode(row)):
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


def _time(fn, repeats: int) -> tuple[list[float], object]:
    fn()                                   # warm-up: allocator, kernels, tokenizer caches
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-shot", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)

    import torch
    import transformers
    from . import __version__
    from .config import load_config
    from .errors import UserError, report_and_exit
    from .io import write_json
    from .llm.hf_backend import HFBackend
    from .llm.registry import middle_layer, model_dir, resolve_device, resolve_dtype
    from .paths import results_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        cfg = load_config(args.profile)
        name = cfg["model.name"]
        backend = HFBackend.from_dir(model_dir(name, cfg), name=name,
                                     device=resolve_device(cfg.get("model.device", "auto")),
                                     dtype=resolve_dtype(cfg.get("model.dtype", "float32")))
    except UserError as e:
        report_and_exit(e)
    layer_cfg = cfg.get("uncertainty.layer", "middle")
    params = dict(k=int(cfg["uncertainty.k"]), max_new_tokens=int(cfg["uncertainty.max_tokens"]),
                  stop=STOP, temperature=float(cfg["uncertainty.temperature"]),
                  top_k=int(cfg["uncertainty.top_k"]), top_p=float(cfg["uncertainty.top_p"]),
                  seed=int(cfg.get("seed", 42)),
                  layer=middle_layer(backend.n_layers) if layer_cfg == "middle" else int(layer_cfg),
                  hook=cfg.get("uncertainty.hook", "mlp_out"))
    prompt = build_prompt(args.n_shot)
    n_prompt = backend.count_tokens(prompt)
    print(f"model {name} on {backend.device}, {torch.get_num_threads()} torch threads; "
          f"{args.n_shot}-shot prompt of {n_prompt} tokens; k={params['k']}, "
          f"max_new_tokens={params['max_new_tokens']}, layer {params['layer']} {params['hook']}")

    t_shared, shared = _time(lambda: backend.sample(prompt, **params), args.repeats)
    t_base, (base_compl, base_vec) = _time(lambda: baseline(backend, prompt, **params), args.repeats)
    check = backend._eos_vectors(backend._prefill(backend._encode(prompt))[0], base_compl,
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


if __name__ == "__main__":
    main()
