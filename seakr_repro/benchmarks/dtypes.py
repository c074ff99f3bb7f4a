"""SeaKR per question with the profile's model in each of two or more dtypes, alternating.

Seconds, LLM calls and generated tokens per question in each dtype (transformers backend, call
cache off), the dtypes alternating question by question on the same questions; each one's ratio to
the first, and on how many questions every dtype gave the same answer. Written to
results/<profile>/bench/dtypes.json.

    python -m seakr_repro bench dtypes --dtypes float32,bfloat16 [--profile default] [--seakr-questions 4]
"""
from __future__ import annotations

import argparse

from .seakr_questions import seakr_alternating


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench dtypes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--dtypes", default="float32,bfloat16",
                    help="two or more model.dtype values, the first the one the others are divided by "
                         "(default float32,bfloat16)")
    ap.add_argument("--seakr-questions", type=int, default=4, help="SeaKR questions per dtype")
    ap.add_argument("--dataset", default="bundled-2wiki", help="SeaKR's questions")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return ap


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    import torch

    from ..core.config import load_config
    from ..core.device import compute
    from ..core.errors import UserError, report_and_exit
    from ..core.io import write_json
    from ..core.paths import results_dir
    from ..core.provenance import provenance
    from ..llm import load_backend

    if args.threads:
        torch.set_num_threads(args.threads)
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
    sq = seakr_alternating(cfg, backends, args.dataset, args.seakr_questions)
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
