"""Benchmark one SeaKR uncertainty evaluation: k samples of a 10-shot prompt + forced-EOS vectors.

Compares, in the same run and on the same model, prompt and sampling settings:
  (a) shared pre-fill: `HFBackend.sample` (the prompt is pre-filled once, k rows decode as a batch,
      one batched pass over "completion + EOS" on the prompt cache);
  (b) the straightforward baseline: `model.generate(num_return_sequences=k, do_sample=True)` with
      the same stop strings (it pre-fills the prompt k times), then one batched forward pass over
      prompt + completion + EOS for the vectors.
Both take the vector with the same early-exit hook, so the ratio measures the pre-fill sharing.
A check feeds (b)'s completions through (a)'s vector pass: the vectors must agree.

    python -m seakr_repro.tools.bench [--profile default] [--repeats 3] [--threads N]

`--ray` measures the Ray engine instead (`tools/bench_ray.py`: questions per minute with 1 and 2
workers against the local engine, and the arithmetic for 8 GPUs).

`--shared` (what `make bench` runs second) measures shared-prefix decoding against today's path
(`model.shared_prefix: false`: the prompt's KV cache copied into every row), all in one run:
  - one k = 20 uncertainty evaluation of the 10-shot prompt (same tokens, vectors compared);
  - the same U-evaluation on the default decode path (`HFBackend(decode=...)`, issue 39's levers)
    against the shared-prefix decode loop as first written (`decode="python"`), alternating (same
    tokens required, vectors compared): the CPU default must be no slower;
  - one decode step of 30 rows over one shared 500-token prompt against 3 x 10 rows with copies;
  - KV-cache bytes against k (5, 10, 20) and prompt length (0.5k, 1k, 2k tokens): ARITHMETIC from
    the model's shapes (no CPU memory counter sees torch tensors reliably), for this model and
    for LLaMA-2-7B in bf16;
  - SeaKR seconds per question on the profile (transformers backend, call cache off, one question
    at a time, the two paths alternating question by question so machine load hits both alike).
Written to results/<profile>/bench/shared_prefix.json.

`--dtypes float32,bfloat16` (what `make bench` runs third) gives SeaKR seconds, LLM calls and
generated tokens per question with the profile's model in each dtype, the dtypes alternating
question by question on the same questions, each one's ratio to the first, and on how many
questions every dtype gave the same answer. Written to results/<profile>/bench/dtypes.json.
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

from ..llm import defaults

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
    from ..llm.hooks import capture, run_until_captured
    model, eos = backend.model, backend.eos_token_id
    ids = backend.encode(prompt)
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
    from ..llm.hf.prefix_cache import repeat_cache as _repeat
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
                c = _repeat(prompt_cache, rows)
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


def _alternate(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of each function, called in turn (after one warm-up each), so that the load of a
    shared machine falls on all of them alike."""
    for f in fns.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            times[k].append(f())
    return times


def _profile_hf(profile: str):
    """(config, the profile's model on the transformers backend, uncached: every call is timed)."""
    from ..core.config import load_config
    from ..core.errors import UserError, report_and_exit
    from ..llm import load_backend

    try:
        cfg = load_config(profile, {"model.backend": "hf"})
        return cfg, load_backend(cfg, cache=False)
    except UserError as e:
        report_and_exit(e)


def _decode_twin(new, decode: str):
    """The same model and settings with another shared-prefix decode path."""
    return type(new)(new.model, new.tokenizer, new.name, new.fingerprint, new.max_batch_rows,
                     new.prefix_cache_tokens, max_batch_contexts=new.max_batch_contexts, decode=decode)


def _reference_twin(new):
    """The same model and settings on today's path (the prompt cache copied into every row)."""
    return type(new)(new.model, new.tokenizer, new.name, new.fingerprint, new.max_batch_rows,
                     new.prefix_cache_tokens, shared_prefix=False, max_batch_contexts=new.max_batch_contexts,
                     decode=new.decode_path)


def _seakr_alternating(cfg, backends: dict, dataset: str, n: int) -> dict:
    """SeaKR on the profile's first n questions of `dataset`, one question at a time with each
    backend in turn (the order swapped every question, so a shared machine's load falls on all
    alike; call cache off). Per backend: seconds, LLM calls, generated tokens, EM and answers per
    question; `answers_agree`: the questions on which every backend gave the same answer."""
    import tempfile
    from pathlib import Path

    from .bench_backends import _run
    from ..core.paths import results_dir
    from ..runs.grid import deltas_for
    from ..steps.prepare import ensure_index, prepare_datasets
    from ..runs.inputs import load_prepared, open_profile_searcher
    from ..runs.runner import read_results

    if not (results_dir(cfg.profile) / "data" / f"{dataset}.jsonl").is_file():
        prepare_datasets(cfg, [dataset])
    ensure_index(cfg)
    searcher = open_profile_searcher(cfg)
    records = load_prepared(cfg, dataset)[:n]
    deltas = deltas_for(cfg)
    for be in backends.values():                 # warm-up: first-call allocations, kernels
        be.generate("Question: What is the capital of France?\nAnswer:", max_new_tokens=4)
    out: dict[str, list[dict]] = {label: [] for label in backends}
    answers: dict[str, list[str]] = {label: [] for label in backends}
    with tempfile.TemporaryDirectory(prefix="seakr-bench-") as tmp:
        for i, rec in enumerate(records):
            order = list(backends.items())
            for label, be in (order if i % 2 == 0 else order[::-1]):
                row = _run(cfg, be, searcher, dataset, [rec], deltas, 1, Path(tmp), f"{label}-{i}")
                out[label].append(row)
                answers[label] += [r["answer"] for r in read_results(Path(tmp) / f"{label}-{i}.jsonl")]
    summary: dict = {}
    for label, rows in out.items():
        secs = [r["seconds_per_question"] for r in rows]
        summary[label] = {
            "seconds_per_question": round(statistics.mean(secs), 2), "per_question": secs,
            "llm_calls_per_question": round(statistics.mean(r["llm_calls_per_question"] for r in rows), 2),
            "generated_tokens_per_question": round(statistics.mean(
                r["generated_tokens_per_question"] for r in rows), 1),
            "em": round(statistics.mean(r["em"] for r in rows), 1), "answers": answers[label]}
    summary["answers_agree"] = sum(len(set(a)) == 1 for a in zip(*answers.values()))
    summary["questions"] = [r.id for r in records]
    summary["dataset"] = dataset
    return summary


def _seakr_per_question(cfg_profile: str, dataset: str, n: int) -> dict:
    """SeaKR seconds per question, today's path against shared prefix, alternating by question."""
    from ..core.config import load_config
    from ..llm import load_backend

    cfg = load_config(cfg_profile)
    new = load_backend(cfg, cache=False)
    summary = _seakr_alternating(cfg, {"reference": _reference_twin(new), "shared_prefix": new},
                                 dataset, n)
    summary["speedup"] = round(summary["reference"]["seconds_per_question"]
                               / summary["shared_prefix"]["seconds_per_question"], 2)
    return summary


def dtype_main(args) -> dict:
    """`--dtypes a,b`: SeaKR per question with the profile's model in each dtype (transformers
    backend), alternating question by question; the ratio of each to the first. Written to
    results/<profile>/bench/dtypes.json."""
    import torch

    from ..core.config import load_config
    from ..core.device import compute
    from ..core.errors import UserError, report_and_exit
    from ..core.io import write_json
    from ..core.paths import results_dir
    from ..core.provenance import provenance
    from ..llm import load_backend

    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if len(dtypes) < 2 or len(set(dtypes)) != len(dtypes):
        raise SystemExit(f"--dtypes needs two or more different dtypes, e.g. float32,bfloat16 (got {args.dtypes})")
    try:
        cfgs = {d: load_config(args.profile, {"model.backend": "hf", "model.dtype": d}) for d in dtypes}
        backends = {d: load_backend(cfgs[d], cache=False) for d in dtypes}
    except UserError as e:
        report_and_exit(e)
    base = dtypes[0]
    cfg = cfgs[base]
    sq = _seakr_alternating(cfg, backends, args.dataset, args.seakr_questions)
    for d in dtypes:
        sq[d]["ratio_to_" + base] = {
            key: round(sq[d][key] / sq[base][key], 3) if sq[base][key] else None
            for key in ("seconds_per_question", "llm_calls_per_question", "generated_tokens_per_question")}
    report = {"what": "SeaKR per question by model.dtype (transformers backend, call cache off, one "
                      "question at a time, the dtypes alternating question by question)",
              "profile": args.profile, "model": cfg["model.name"], "dtypes": dtypes,
              "torch_threads": torch.get_num_threads(), "seakr_per_question": sq,
              "compute": {d: compute(cfgs[d]) for d in dtypes},
              "provenance": provenance(cfg)}
    out = results_dir(args.profile) / "bench" / "dtypes.json"
    write_json(out, report)
    n = len(sq["questions"])
    print(f"SeaKR on {sq['dataset']}, {n} questions, one at a time, dtypes alternating:")
    print(f"{'dtype':<10}{'s/question':>11}{'calls/q':>9}{'tokens/q':>10}{'EM':>7}{'s ratio':>9}")
    for d in dtypes:
        r = sq[d]
        print(f"{d:<10}{r['seconds_per_question']:>11.2f}{r['llm_calls_per_question']:>9.2f}"
              f"{r['generated_tokens_per_question']:>10.1f}{r['em']:>7.1f}"
              f"{r['ratio_to_' + base]['seconds_per_question']:>9.3f}")
    print(f"same answer in every dtype on {sq['answers_agree']} of {n} questions; saved {out}")
    return report


def shared_main(args) -> dict:
    """The shared-prefix benchmark (see the module docstring)."""
    import torch
    import transformers
    from .. import __version__
    from ..core.io import write_json
    from ..core.paths import results_dir

    cfg, new = _profile_hf(args.profile)
    name = new.name
    if not new.shared_prefix:
        raise SystemExit(f"shared-prefix decoding is not supported for {name}: "
                         f"{new.shared_prefix_unsupported}")
    ref = _reference_twin(new)
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
    old = _decode_twin(new, "python")
    ts = _alternate({"python": lambda: cold("python", old),
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

    from ..llm.model_info import middle_layer
    name = new.name
    # 1. one k = 20 uncertainty evaluation of the 10-shot prompt, cold prefix cache each time
    layer_cfg = cfg.get("uncertainty.layer", "middle")
    params = dict(k=defaults.K, max_new_tokens=int(cfg["uncertainty.max_tokens"]), stop=STOP,
                  temperature=float(cfg["uncertainty.temperature"]),
                  top_k=int(cfg["uncertainty.top_k"]), top_p=float(cfg["uncertainty.top_p"]),
                  seed=int(cfg.get("seed", defaults.SEED)),
                  layer=middle_layer(new.n_layers) if layer_cfg == "middle" else int(layer_cfg),
                  hook=cfg.get("uncertainty.hook", "mlp_out"))
    prompt = build_prompt(args.n_shot)

    results = {}

    def cold(label, be):
        be.reset_prefix_cache()
        t0 = time.perf_counter()
        results[label] = be.sample(prompt, **params)
        return time.perf_counter() - t0
    ts = _alternate({"reference": lambda: cold("reference", ref),
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
    ts = _alternate({"copied": _decode_step(new, long_ids, 10, 3, False, 10),
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



def _time(fn, repeats: int) -> tuple[list[float], object]:
    fn()                                   # warm-up: allocator, kernels, tokenizer caches
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def main(argv=None) -> dict:
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ray" in argv:       # the Ray engine against the local one (tools/bench_ray.py)
        from .bench_ray import main as ray_main
        return ray_main([a for a in argv if a != "--ray"])
    ap = argparse.ArgumentParser(prog="python -m seakr_repro.tools.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-shot", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--shared", action="store_true",
                    help="shared-prefix decoding against today's path (see above)")
    ap.add_argument("--dtypes", default=None,
                    help="e.g. float32,bfloat16: SeaKR per question in each model.dtype, alternating; "
                         "ratios to the first (results/<profile>/bench/dtypes.json)")
    ap.add_argument("--seakr-questions", type=int, default=4,
                    help="with --shared or --dtypes: SeaKR questions per path (0 = skip with --shared)")
    ap.add_argument("--dataset", default="bundled-2wiki", help="with --shared or --dtypes: SeaKR's questions")
    ap.add_argument("--parts", choices=("all", "micro", "seakr"), default="all",
                    help="with --shared: micro = U-evaluation, decode step and memory; seakr = "
                         "SeaKR per question only (written to shared_prefix_seakr.json)")
    args = ap.parse_args(argv)
    if args.shared or args.dtypes:
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        return dtype_main(args) if args.dtypes else shared_main(args)

    import torch
    import transformers
    from .. import __version__
    from ..core.io import write_json
    from ..llm.model_info import middle_layer
    from ..core.paths import results_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg, backend = _profile_hf(args.profile)
    name = backend.name
    layer_cfg = cfg.get("uncertainty.layer", "middle")
    params = dict(k=int(cfg["uncertainty.k"]), max_new_tokens=int(cfg["uncertainty.max_tokens"]),
                  stop=STOP, temperature=float(cfg["uncertainty.temperature"]),
                  top_k=int(cfg["uncertainty.top_k"]), top_p=float(cfg["uncertainty.top_p"]),
                  seed=int(cfg.get("seed", defaults.SEED)),
                  layer=middle_layer(backend.n_layers) if layer_cfg == "middle" else int(layer_cfg),
                  hook=cfg.get("uncertainty.hook", "mlp_out"))
    prompt = build_prompt(args.n_shot)
    n_prompt = backend.count_tokens(prompt)
    print(f"model {name} on {backend.device}, {torch.get_num_threads()} torch threads; "
          f"{args.n_shot}-shot prompt of {n_prompt} tokens; k={params['k']}, "
          f"max_new_tokens={params['max_new_tokens']}, layer {params['layer']} {params['hook']}")

    t_shared, shared = _time(lambda: backend.sample(prompt, **params), args.repeats)
    t_base, (base_compl, base_vec) = _time(lambda: baseline(backend, prompt, **params), args.repeats)
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


if __name__ == "__main__":
    main()
