"""`python -m seakr_repro check-card`: before downloading a model and a corpus and starting a run
of weeks, whether the profile fits this GPU, how fast it goes here and what it would cost.

Random weights of the profile's model shape (the model's own config.json where it is on disk,
else LLaMA-2-7B's), in the profile's dtype, under the profile's card (`--memory-cap-gib`, 24 for
`paper`), on stand-in data; the parts of parts.py in their order, in ONE process of their own
(the package's folders point into the check's folder, and a part that crashes the process or
runs out of the limit leaves what the parts before it measured). Time: plan.py. On a CPU the
check runs over a simulated card (doubles/simulated_card.py) at the `narrow` shape by default,
LLaMA-2-7B's layers and vocabulary at narrow widths, which predicts each method's peak at 7B.

It ends in one paragraph (each method's peak against the cap, seconds per question and ms per
step per path, the profile's hours at this pace from `cost`'s arithmetic, what did not run and
why), writes OUT/report.json, and appends its seconds per question to the measured paces
(price/paces.py's format, with the decode path; `--paces`, on a GPU data/measured/gpu_pace.csv).
Exit status 1 when SeaKR did not answer a question on every set.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.io import write_json
from ..core.paths import REPO_ROOT
from .plan import H100_7B, LIMIT_S, PAPER_SETS, PARTS, estimate, may_start

GiB, MiB = 2**30, 2**20
OWN = "own:"            # the shape of a model's own config.json (registered in the check's process)
DIMS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda where torch sees a GPU, else cpu over a simulated card")
    p.add_argument("--shape", default=None, help="a shape of doubles.random_llama.SHAPES (default: the model's "
                   "config.json where on disk, else llama-2-7b; on a cpu narrow)")
    p.add_argument("--limit", type=float, default=None,
                   help=f"seconds for the check (default {LIMIT_S} on a GPU, none on a CPU)")
    p.add_argument("--memory-cap-gib", type=float, default=24.0, help="the card the profile is for (default 24)")
    p.add_argument("--out", type=Path, default=None, help="its folder: report.json (default: a new one in /tmp)")
    p.add_argument("--paces", type=Path, default=None,
                   help="append the measured paces here (default on a GPU: data/measured/gpu_pace.csv)")
    p.add_argument("--passages", type=int, default=2000, help="stand-in corpus size")


def own_shape(model: str) -> dict | None:
    """The model's own config.json dimensions where the model is on disk, else None."""
    from ..llm.registry import model_dir

    try:
        doc = json.loads((model_dir(model) / "config.json").read_text())
    except Exception:                   # noqa: BLE001  (not on disk, or no config: 7B's shape)
        return None
    return {k: doc[k] for k in DIMS if k in doc} if all(k in doc for k in DIMS[:4]) else None


def cmd_check_card(args) -> int:
    from ..core.config import load_config
    from ..core.device import cuda_available
    from ..doubles import SIMULATED_CARD_ENV

    cfg = load_config(args.profile)
    device = args.device or ("cuda" if cuda_available() else "cpu")
    dims = own_shape(cfg["model.name"]) if args.shape is None else None
    shape = args.shape or (OWN + cfg["model.name"] if dims else "llama-2-7b" if device == "cuda" else "narrow")
    limit = args.limit if args.limit is not None else LIMIT_S if device == "cuda" else None
    out = (args.out or Path(tempfile.mkdtemp(prefix="seakr-check-card-"))).resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    opt = {"device": device, "shape": shape, "dims": dims, "profile": args.profile, "limit": limit,
           "memory_cap_gib": args.memory_cap_gib, "passages": args.passages, "work": str(work),
           "out": str(out), "started": started}
    write_json(work / "options.json", opt, indent=1)
    env = {**os.environ, "SEAKR_RAW_DIR": str(work / "raw"), "SEAKR_CACHE_DIR": str(work / "cache"),
           "SEAKR_RESULTS_DIR": str(work / "results"), "SEAKR_OVERRIDES": "", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    if device == "cpu":             # a 32-layer narrow shape predicts each peak at 7B
        env[SIMULATED_CARD_ENV] = "predict=llama-2-7b" if shape.startswith("narrow") else "1"
    print(f"[check-card] {args.profile} on {device}, shape {shape}, cap {args.memory_cap_gib} GiB, "
          f"limit {limit or 'none'} s, in {out}", flush=True)
    proc = subprocess.Popen([sys.executable, "-m", "seakr_repro.card_check.check", str(work / "options.json")],
                            env=env, cwd=REPO_ROOT, process_group=0)
    stopped = None
    try:
        proc.wait(timeout=None if limit is None else max(1.0, started + limit - time.monotonic()))
    except subprocess.TimeoutExpired:
        stopped = f"stopped at the {limit:.0f} s limit"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    if stopped or proc.returncode:
        stopped = stopped or f"the check's process ended with {proc.returncode}"
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    path = out / "report.json"
    report = json.loads(path.read_text()) if path.is_file() else {"parts": {}, "not_run": {}}
    report.update(seconds=round(time.monotonic() - started, 1), **({"stopped": stopped} if stopped else {}))
    if stopped:
        for part in PARTS:
            if part not in report["parts"] and part not in report["not_run"]:
                report["not_run"][part] = stopped
    report["paragraph"] = paragraph(report, opt)
    from ..price.paces import MEASURED_PACE

    paces = args.paces or (MEASURED_PACE if device == "cuda" else None)
    if paces is not None:
        report["pace_rows"] = append_paces(paces, pace_rows(report, opt))
    write_json(path, report, indent=1)
    print(report["paragraph"], flush=True)
    done = (report["parts"].get("seakr") or {}).get("questions") or {}
    return 0 if all(d in done and not done[d]["failed"] for d in PAPER_SETS) else 1


# ------------------------------------------------------------------ the check's own process
def child(options: Path) -> int:
    from ..doubles import random_llama
    from . import card
    from .parts import PARTS as RUN, Run

    opt = argparse.Namespace(**json.loads(Path(options).read_text()))
    if opt.dims:
        random_llama.SHAPES[opt.shape] = opt.dims
    if opt.device == "cpu":
        from ..doubles.simulated_card import activate_from_env
        from ..doubles.simulated_graph import simulate_graph

        activate_from_env()
        simulate_graph()
    report: dict = {"device": opt.device, "shape": opt.shape, "profile": opt.profile, "limit_s": opt.limit,
                    "card": _card_name(opt.device), "parts": {}, "not_run": {}}
    report["cap"] = card.apply_cap(opt.device, opt.memory_cap_gib)
    save = lambda: write_json(Path(opt.out) / "report.json", json.loads(json.dumps(report, default=str)),  # noqa: E731
                              indent=1)
    est = H100_7B if opt.shape == "llama-2-7b" and opt.device == "cuda" else None
    for part in PARTS:
        used = time.monotonic() - opt.started
        ok, why = may_start(estimate(part, est) if est and part != "seakr" else None, used, opt.limit)
        if not ok:
            report["not_run"][part] = why
            save()
            continue
        print(f"[check-card] {part} ({used:.0f} s in) ...", flush=True)
        t0 = time.monotonic()

        def keep(doc, part=part):
            report["parts"][part] = {**doc, "running": True}
            save()
        run = Run(opt, Path(opt.work), report["cap"].get("torch_bytes"), keep)
        try:
            got = RUN[part](run)
        except Exception as e:          # noqa: BLE001  (the part says what broke; the next runs)
            got = {**{k: v for k, v in report["parts"].get(part, {}).items() if k != "running"},
                   "error": f"{type(e).__name__}: {e}"[:1000]}
        report["parts"][part] = {**got, "seconds": round(time.monotonic() - t0, 1)}
        save()
    return 0


def _card_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return "cpu, simulated card"


# ------------------------------------------------------------------ what it says
def _gib(n) -> str:
    return "?" if n is None else f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / MiB:.1f} MiB"


def peaks(report: dict) -> dict[str, dict]:
    """{method: {peak_bytes, predicted_7b, dtype, error}} of the parts that ran."""
    parts = report["parts"]
    out = {}
    if "seakr" in parts and "peak_bytes" in parts["seakr"]:
        out["seakr"] = {k: parts["seakr"].get(k) for k in ("peak_bytes", "predicted_7b", "dtype")}
    for m, e in ((parts.get("methods") or {}).get("methods") or {}).items():
        out[m] = {k: e.get(k) for k in ("peak_bytes", "predicted_7b", "dtype", "error", "dtype_departure")}
    return out


def measured_pace(report: dict) -> dict[tuple[str, str], float]:
    """{(method, data set): seconds per question} this check measured."""
    parts = report["parts"]
    pace = {("seakr", d): q["seconds"] for d, q in ((parts.get("seakr") or {}).get("questions") or {}).items()}
    methods = parts.get("methods") or {}
    pace.update({(m, methods["dataset"]): e["seconds"] for m, e in (methods.get("methods") or {}).items()
                 if "seconds" in e})
    return pace


def profile_hours(profile: str, pace: dict) -> tuple[float, list[str]]:
    """(hours of the profile's question-runs priced at `pace`, the methods left unpriced): cost's
    arithmetic (runs.preflight.with_hours over runs.plan.question_runs)."""
    from ..core.config import load_config
    from ..runs.preflight import with_hours
    from ..runs.plan import question_runs

    runs = with_hours(question_runs(load_config(profile)), pace)
    priced = runs.dropna(subset=["hours"])
    return float(priced["hours"].sum()), sorted(set(runs["method"]) - set(priced["method"]))


def paragraph(report: dict, opt: dict) -> str:
    parts, cap = report["parts"], opt["memory_cap_gib"] * GiB
    s = [f"check-card, {opt['profile']} on {report.get('card', opt['device'])} at the {opt['shape']} shape "
         f"under a {opt['memory_cap_gib']:g} GiB cap ({report.get('seconds', '?')} s):"]
    said = []
    for m, e in peaks(report).items():
        if e.get("error"):
            said.append(f"{m} failed ({e['error'][:120]})")
            continue
        pred = (e.get("predicted_7b") or {}).get("peak_bytes")
        here = e.get("peak_bytes") or 0
        at = pred if pred and opt["shape"] != "llama-2-7b" else here
        said.append(f"{m} ({e.get('dtype')}) peaks at {_gib(here)} here"
                    + (f", {_gib(pred)} predicted at LLaMA-2-7B" if pred else "")
                    + f": {'within' if at <= cap else 'OVER'} the cap"
                    + (" (loaded in another dtype on this card)" if e.get("dtype_departure") else ""))
    if said:
        s.append("each method's peak against the cap: " + "; ".join(said) + ".")
    sk = parts.get("seakr") or {}
    if sk.get("questions"):
        s.append(f"SeaKR at the profile's settings ({sk.get('settings')}) took "
                 + ", ".join(f"{q['seconds']} s for its {d} question ({q['llm_calls']} calls)"
                             for d, q in sk["questions"].items())
                 + f" on the {sk['decode_path']} decode path.")
    bad = {p: c.get("why") for p, c in (sk.get("path_checks") or {}).items() if not c.get("ok")}
    if bad:
        s.append("Decode paths not used: " + "; ".join(f"{p}: {w}" for p, w in bad.items()) + ".")
    others = [f"{m} {e['seconds']} s" for m, e in ((parts.get("methods") or {}).get("methods") or {}).items()
              if "seconds" in e]
    if others:
        s.append("Seconds per question of the other methods: " + ", ".join(others) + ".")
    dec = parts.get("decode") or {}
    if dec.get("paths"):
        s.append("Ms per decode step: " + ", ".join(
            f"{p} {r['ms_per_step']:.1f} ({r['x_floor']:.1f} x the floor)" if "ms_per_step" in r else f"{p} failed"
            for p, r in dec["paths"].items()) + f", against a bandwidth floor of {dec['floor_ms']:.2f} ms.")
    om = parts.get("oom") or {}
    if om.get("runs"):
        r = om["runs"][-1]
        s.append(f"The out-of-memory retry {'ran' if om.get('retry_ran') else 'did NOT prove itself'}: under a "
                 f"cap of {_gib(r['cap_bytes'])} (uncapped peak {_gib(om['uncapped_peak_bytes'])}) "
                 + (f"it failed: {r.get('error')}" if not r.get("ok") else
                    "the call finished without running out of memory" if not r["oom_retries"] else
                    f"it retried {r['oom_retries']} time(s) to {r['rows_per_forward']} rows per pass, "
                    f"{'the same' if r.get('same_tokens') else 'OTHER'} tokens as an uncapped run at that width")
                 + ".")
    elif om.get("why"):
        s.append(f"The out-of-memory retry could not run: {om['why']}.")
    pace = measured_pace(report)
    if pace:
        hours, unpriced = profile_hours(opt["profile"], pace)
        s.append(f"At this pace the {opt['profile']} profile's question-runs would take about {hours:,.1f} hours "
                 f"on this card (cost's arithmetic)" + (f", {', '.join(unpriced)} not priced (not measured)"
                                                        if unpriced else "") + ".")
    failed = {p: e["error"] for p, e in parts.items() if e.get("error")}
    gone = {**report.get("not_run", {}), **failed}
    s.append("Did not run or failed: " + "; ".join(f"{p} ({w})" for p, w in gone.items()) + "." if gone
             else "Every part ran.")
    return " ".join(s)


def pace_rows(report: dict, opt: dict) -> list[dict]:
    """The check's seconds per question as rows of the measured paces (price/paces.py's columns)."""
    import datetime

    import torch

    from ..core.provenance import git_revision

    parts, rev = report["parts"], git_revision()["revision"]
    calls = {("seakr", d): q["llm_calls"] for d, q in ((parts.get("seakr") or {}).get("questions") or {}).items()}
    methods = parts.get("methods") or {}
    calls.update({(m, methods["dataset"]): e["llm_calls"] for m, e in (methods.get("methods") or {}).items()
                  if "seconds" in e})
    dtype = {m: e.get("dtype") for m, e in peaks(report).items()}
    path = (parts.get("seakr") or {}).get("decode_path")
    return [{"card": report.get("card"), "commit_date": datetime.date.today().isoformat(), "commit": rev[:7],
             "torch": torch.__version__.split("+")[0], "dtype": dtype.get(m), "weights": "random",
             "what_ran": f"check-card at the {opt['shape']} shape (one question)", "settings": opt["profile"],
             "method": m, "dataset": d, "seconds_per_question": s,
             "note": "upper bound: random weights run every generation to its token limit",
             "llm_calls_per_question": calls[(m, d)], "decode_path": path if m == "seakr" else ""}
            for (m, d), s in measured_pace(report).items()]


def append_paces(path: Path, rows: list[dict]) -> str:
    import pandas as pd

    old = pd.read_csv(path, dtype={"commit": str}) if Path(path).is_file() else pd.DataFrame()
    pd.concat([old, pd.DataFrame(rows)], ignore_index=True).to_csv(path, index=False)
    return f"{len(rows)} rows appended to {path}"


if __name__ == "__main__":
    sys.exit(child(Path(sys.argv[1])))
