"""Make the committed prediction of each method's peak at LLaMA-2-7B's shape
(peak_prediction.PREDICTIONS): the card check's methods part run on a CPU under a simulated card
(doubles/simulated_card.py) at a narrow shape with 7B's 32 layers and 32,000-token vocabulary
(`random_llama.SHAPES["narrow"]`), each tensor's bytes scaled to 7B's widths and the most they take
over the run kept (llm/peak_memory.py says why that is the same run's peak at 7B).

`python -m seakr_repro.card_check.predict_peaks --out FILE` runs the methods part, a process of its
own per profile and variant:
  float16             model.dtype float16: SeaKR and Self-RAG in float16, the faithful baselines
                      in float32, as the paper profile asks (baselines.dtype)
  baselines-float16   baselines.dtype float16 too (only the methods that loaded another dtype):
                      what a 24 GiB card loads them in (baselines.dtype_when_too_large)
`--check-shapes` also runs the first profile at other 32-layer widths, each run predicting the
others' peaks: how far the scaling is off on the methods' own runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from ..core.io import write_json
from ..core.paths import REPO_ROOT
from ..doubles import SIMULATED_CARD_ENV
from .peak_prediction import TARGET

SHAPE = "narrow"
VARIANTS = {"float16": {"model.dtype": "float16"},
            "baselines-float16": {"model.dtype": "float16", "baselines.dtype": "float16"}}


def _child(opt_file: Path) -> int:
    """One methods part run on the simulated card (this process's, from the environment)."""
    from ..doubles.simulated_card import activate_from_env
    from .parts import Run, methods

    opt = argparse.Namespace(**json.loads(opt_file.read_text()))
    activate_from_env()
    got = methods(Run(opt, Path(opt.work)))
    write_json(Path(opt.work) / "methods.json", json.loads(json.dumps(got, default=str)), indent=1)
    return 0


def run_variant(profile: str, variant: str, shape: str, work: Path, methods: str | None,
                predict: tuple[str, ...] = (TARGET,), settings: dict | None = None) -> dict:
    """The methods part of `profile` under `variant`'s settings (and `settings`) at `shape`, in a
    process of its own, predicting the peaks at the shapes `predict`."""
    work.mkdir(parents=True, exist_ok=True)
    from ..artifacts import methods as table_methods

    opt = {"device": "cpu", "shape": shape, "work": str(work), "profile": profile, "passages": 300,
           "methods": methods.split(",") if methods else table_methods("table1"),
           "overrides": {**VARIANTS[variant], **(settings or {})}}
    (work / "options.json").write_text(json.dumps(opt))
    env = {**os.environ, "SEAKR_RAW_DIR": str(work / "raw"), "SEAKR_CACHE_DIR": str(work / "cache"),
           "SEAKR_RESULTS_DIR": str(work / "results"), "SEAKR_OVERRIDES": "", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", SIMULATED_CARD_ENV: "predict=" + "+".join(predict),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    subprocess.run([sys.executable, "-m", "seakr_repro.card_check.predict_peaks", "--child",
                    str(work / "options.json")], env=env, cwd=REPO_ROOT, check=True)
    return json.loads((work / "methods.json").read_text())


def main(argv=None) -> int:
    from ..core.provenance import git_revision

    ap = argparse.ArgumentParser(prog="python -m seakr_repro.card_check.predict_peaks",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="the predictions' JSON (committed: data/measured/predicted-peaks.json)")
    ap.add_argument("--profiles", default="paper-tiny", help="comma-separated: paper-tiny (the one call's), paper")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated of {', '.join(VARIANTS)}")
    ap.add_argument("--shape", default=SHAPE, help="a 32-layer shape of doubles.random_llama.SHAPES")
    ap.add_argument("--methods", default=None, help="comma-separated (default: every method of Table 1)")
    ap.add_argument("--work", type=Path, default=None, help="where the runs work (default: a new folder in /tmp)")
    ap.add_argument("--check-shapes", default="",
                    help="comma-separated 32-layer shapes: run the first profile's float16 variant at each and at "
                         "--shape, each run predicting the others' peaks (the check of the scaling)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a profile setting for every run, e.g. model.decode=static (YAML value)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _child(a.child)
    if a.out is None:
        ap.error("--out is required")
    settings = {}
    for item in a.set:
        key, eq, value = item.partition("=")
        if not eq:
            ap.error(f"--set {item}: give KEY=VALUE")
        settings[key] = yaml.safe_load(value)
    work = a.work or Path(tempfile.mkdtemp(prefix="seakr-peaks-"))
    rev = git_revision()
    doc: dict = {"what": "each method's peak at LLaMA-2-7B's shape, predicted from the methods part run on a "
                         "simulated card (python -m seakr_repro.card_check.predict_peaks)",
                 "commit": rev["revision"], "changed_from_commit": rev["changed"], "shape": a.shape,
                 "target": TARGET, "settings": settings, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                 "profiles": {}, "runs": {}}
    for profile in filter(None, a.profiles.split(",")):
        other_dtype = None            # the methods that load another dtype than model.dtype (the baselines)
        for variant in filter(None, a.variants.split(",")):
            methods = a.methods if variant == "float16" or other_dtype is None else ",".join(other_dtype)
            t0 = time.monotonic()
            got = run_variant(profile, variant, a.shape, work / f"{profile}-{variant}", methods, settings=settings)
            if variant == "float16":
                other_dtype = [m for m, e in got["methods"].items() if e.get("dtype") != "float16"]
            doc["runs"][f"{profile}/{variant}"] = {"seconds": round(time.monotonic() - t0, 1),
                                                   "overrides": VARIANTS[variant], "dtype": got.get("dtype")}
            for method, entry in got["methods"].items():
                if "error" in entry:
                    raise RuntimeError(f"{profile}/{variant}/{method}: {entry['error']}")
                pred = entry.get("predicted_7b") or {}
                if "peak_bytes" not in pred:
                    raise RuntimeError(f"{profile}/{variant}/{method}: no prediction: {pred}")
                doc["profiles"].setdefault(profile, {}).setdefault(method, {})[entry["dtype"]] = {
                    "predicted_peak_bytes": pred["peak_bytes"], "predicted_by_kind": pred["by_kind"],
                    "peak_bytes": entry["peak_bytes"], "variant": variant}
            write_json(a.out, doc, indent=1)
            took = doc["runs"][f"{profile}/{variant}"]["seconds"]
            print(f"[predict_peaks] {profile}/{variant}: {took} s", flush=True)
    checks = [s for s in a.check_shapes.split(",") if s]
    if checks:
        doc["check"] = check_scaling(a.profiles.split(",")[0], [a.shape, *checks], work, a.methods, settings)
        write_json(a.out, doc, indent=1)
    return 0


def check_scaling(profile: str, shapes: list[str], work: Path, methods: str | None, settings: dict) -> dict:
    """The same methods part at several 32-layer shapes, each run predicting the others' peaks:
    per method, each shape's measured peak and what each other run predicted for it."""
    runs = {s: run_variant(profile, "float16", s, work / f"check-{s}", methods, (TARGET, *shapes), settings)["methods"]
            for s in shapes}
    out: dict = {"profile": profile, "variant": "float16", "shapes": shapes, "methods": {}}
    for method in runs[shapes[0]]:
        measured = {s: runs[s][method]["peak_bytes"] for s in shapes}
        predicted = {s: {t: runs[s][method]["predicted_7b"]["predicted_at"][t] for t in shapes if t != s}
                     for s in shapes}
        err = max(abs(predicted[s][t] / measured[t] - 1) for s in shapes for t in shapes if t != s)
        out["methods"][method] = {"measured": measured, "predicted_from": predicted,
                                  "largest_relative_error": round(err, 5)}
    return out


if __name__ == "__main__":
    sys.exit(main())
