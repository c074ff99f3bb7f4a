"""`cost`'s dry run: the profile's own steps 02-11 with `make reproduce`'s notebook parameters, on
the synthetic model (`llm/synthetic.py`) behind the real call cache, so the code that makes each
call counts it and a shared call is computed once (docs/paper-profile.md, "Where the counts come
from"). A child process with its own temporary results and cache (the corpus and index linked
in), on the prepared question sets or a nested sample of them that `cost` scales up. KBAE's LoRA
training is not run: its examples are counted and a synthetic model answers its row.
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

import pandas as pd

from ..artifacts import CALIBRATION, EXTRACTION, MECHANISMS, SEED_STEP, STEPS, table
from ..core.config import Config
from ..llm.replay import REPLAY_ENV
from ..llm.synthetic import DECISIONS_ENV, SEED_ENV
from ..runs.plan import notebook_parameter
from .work import mechanisms_set, recorded_work


def sample_overrides(cfg: Config, sample: int | None) -> dict:
    """The settings that cap every step's questions at `sample` (none without a sample): the
    prepared sets, Tables 3/4's sample, and each notebook's sizes (a 0 stays 0)."""
    if sample is None:
        return {}
    capped = lambda v: sample if v is None else min(int(v), sample)   # noqa: E731
    out = {"datasets.n_questions": capped(cfg.get("datasets.n_questions")),
           "analysis.n_questions": capped(cfg.get("analysis.n_questions"))}
    for step in STEPS.values():
        for name in step.dry_run or ():
            out[f"notebooks.{step.name}.{name}"] = capped(notebook_parameter(cfg, step.name, name))
    return out


# the bundled look-alike sets a profile's data sets are answered on where they are not here
STAND_INS = {"complex": ("bundled-2wiki", "bundled-hotpotqa"), "simple": ("bundled-single",)}


def runs_here(cfg: Config) -> bool:
    """Whether the profile's data sets, top-10 files, corpus and demonstrations are on this
    machine (else the dry run answers look-alikes of them: `stand_ins`)."""
    from ..core.paths import setting_path
    from ..runs.inputs import corpus_path, profile_datasets
    from ..steps.prepare import missing_inputs

    if missing_inputs(cfg, profile_datasets(cfg)):
        return False
    if cfg["corpus.name"] != "wiki-excerpt" and not (corpus_path(cfg).is_file() or
                                                    setting_path(cfg["corpus.tsv_path"]).is_file()):
        return False
    return cfg.get("prompts.demos", "paper") != "official" or setting_path(cfg["prompts.official_repo"]).is_dir()


def stand_ins(cfg: Config) -> dict[str, str]:
    """{each data set of the profile (and step 11's): the bundled set answered in its place}: a
    multi-hop set by bundled-hotpotqa when it is HotpotQA, else bundled-2wiki; a single-hop set
    by bundled-single."""
    from ..data.registry import DATASETS
    from ..runs.inputs import profile_datasets

    names = profile_datasets(cfg) + [mechanisms_set(cfg)]
    out = {}
    for name in dict.fromkeys(names):
        kind = DATASETS[name].kind if name in DATASETS else "simple"
        out[name] = STAND_INS[kind][1] if kind == "complex" and "hotpot" in name else STAND_INS[kind][0]
    return out


def stand_in_overrides(cfg: Config) -> dict:
    """The settings that run the profile's steps on the look-alikes (`stand_ins`) over the gensim
    excerpt, with the profile's own method settings; simple QA scores BM25's top passages where
    the profile reads DPR's precomputed ones (the same number of calls)."""
    mapping = stand_ins(cfg)
    pick = lambda names: list(dict.fromkeys(mapping[n] for n in names))   # noqa: E731
    out = {"datasets.complex": pick(cfg["datasets.complex"]), "datasets.simple": pick(cfg["datasets.simple"]),
           "corpus.name": "wiki-excerpt", "retrieval.backend": "pyserini", "retrieval.scheme": "single_field",
           "seakr.simple_qa_passages": "bm25", "skr.train_results": {}}
    if cfg.get("analysis.datasets"):
        out["analysis.datasets"] = pick(cfg["analysis.datasets"])
    out[f"notebooks.{MECHANISMS}.DATASET"] = mapping[mechanisms_set(cfg)]
    return out


def _link_built_inputs(cache: Path) -> None:
    """Link the real cache's corpus files and index folders into the dry run's cache (read only
    by it): a profile's index need not be built again."""
    from ..core.paths import CACHE_DIR

    for part in ("corpus", "indexes"):
        src = CACHE_DIR / part
        if src.is_dir():
            (cache / part).mkdir(parents=True, exist_ok=True)
            for entry in src.iterdir():
                if not entry.name.startswith("."):
                    (cache / part / entry.name).symlink_to(entry.resolve())


def run(cfg: Config, overrides: dict, sample: int | None = None, replay: Path | None = None,
        quiet: bool = True, decisions: dict | None = None, seeds: int = 1) -> dict:
    """The dry run of `cfg.profile` with `overrides` (--set), replaying the call cache `replay`
    (`llm.replay`; None: none), the synthetic model deciding at `decisions` ({model: rates}; a model
    without: its own), on look-alikes where the profile's inputs are not here; with `seeds` > 1,
    the mean work of that many draws of the synthetic model (one question's decisions move a
    small step by a tenth): {"work", "seconds", "replay", "sample", "stand_ins", "seeds"}."""
    draws = [_run_once(cfg, overrides, sample, replay, quiet, decisions, seed) for seed in range(seeds)]
    work = pd.concat([pd.DataFrame(d["work"]) for d in draws])
    keys = [c for c in work.columns if not pd.api.types.is_numeric_dtype(work[c])]
    work = work.groupby(keys, sort=False, dropna=False).mean().reset_index()
    return {**draws[0], "work": json.loads(work.to_json(orient="records")), "seeds": seeds}


def _run_once(cfg: Config, overrides: dict, sample: int | None, replay: Path | None, quiet: bool,
              decisions: dict | None, seed: int) -> dict:
    from ..doubles.standins import write_standins

    here = runs_here(cfg)
    with tempfile.TemporaryDirectory(prefix="seakr-dry-run-") as tmp:
        work = Path(tmp)
        _link_built_inputs(work / "cache")
        env = {**os.environ, "SEAKR_RESULTS_DIR": str(work / "results"), "SEAKR_CACHE_DIR": str(work / "cache"),
               "SEAKR_TABLES_DIR": str(work / "tables"), "SEAKR_FIGURES_DIR": str(work / "figures"),
               "MPLBACKEND": "Agg"}
        if not here:                       # the official files' stand-ins, in the official formats
            write_standins(work / "raw", sample or 10)
            env["SEAKR_RAW_DIR"] = str(work / "raw")
            overrides = {**overrides, **stand_in_overrides(cfg)}
        env.pop(REPLAY_ENV, None)
        if replay is not None:
            env[REPLAY_ENV] = str(Path(replay).resolve())
        env[DECISIONS_ENV] = json.dumps(decisions or {})
        env[SEED_ENV] = str(seed or "")
        from ..core.paths import kernel_environment
        env.update(kernel_environment())          # this package, whichever clone runs it
        out = work / "dry_run.json"
        args = [sys.executable, "-m", "seakr_repro.price.dry_run", "--profile", cfg.profile,
                "--overrides", json.dumps({**overrides, **sample_overrides(cfg, sample)}), "--out", str(out)]
        got = subprocess.run(args, env=env, capture_output=quiet, text=True)
        if got.returncode != 0:
            from ..core.errors import UserError
            raise UserError(f"cost's dry run of profile '{cfg.profile}' failed (exit {got.returncode})"
                            + (f": {got.stderr.strip()[-2000:]}" if quiet and got.stderr else ""),
                            setting="cost", fix="run it again with --verbose to see its steps, and report it")
        result = json.loads(out.read_text(encoding="utf-8"))
    return {**result, "sample": sample, "stand_ins": None if here else stand_ins(cfg)}


# ------------------------------------------------------------------------------ the child
def _extract(cfg: Config) -> None:
    from ..runs.engine import close_backend, open_backend
    from ..steps import extraction

    step = EXTRACTION
    records = extraction.calibration_records(notebook_parameter(cfg, step, "N_FANOUT"),
                                             notebook_parameter(cfg, step, "N_BUNDLED"),
                                             seed=cfg["seed"])
    backend = open_backend(cfg)
    try:
        extraction.run_extraction(backend, records, cfg, notebook_parameter(cfg, step, "N_SHOT"), progress=False)
    finally:
        close_backend(backend)


def _calibrate(cfg: Config) -> None:
    import numpy as np

    from ..steps import estimators, extraction

    step = CALIBRATION
    rows, vectors = extraction.load_extraction(cfg)
    layer = estimators.u_layer(cfg, vectors.n_layers)
    scores = estimators.estimator_scores(rows, vectors.layer(cfg["uncertainty.hook"], layer), estimators.u_params(cfg))
    correct = np.array([bool(r["correct"]) for r in rows], dtype=int)
    estimators.calibrate_thresholds(cfg, scores, correct, notebook_parameter(cfg, step, "CALIBRATION_RULE"),
                                    notebook_parameter(cfg, step, "CALIBRATION_TARGET"))


def _step_calls(cfg: Config) -> dict:
    """{step: what its notebook calls}, with its notebook's parameters."""
    from ..steps import mechanisms, seed_methods, tables

    def p(step, name):
        return notebook_parameter(cfg, step, name)

    seeds, mech = SEED_STEP, MECHANISMS
    t1, t2, t3, t4, t7 = (table(key).step for key in ("table1", "table2", "table3", "table4", "table7"))
    kbae = {"r": 16, "alpha": 32, "lr": p(seeds, "KBAE_LR"), "epochs": p(seeds, "KBAE_EPOCHS"), "batch_size": 16}
    return {
        EXTRACTION: lambda: _extract(cfg),
        CALIBRATION: lambda: _calibrate(cfg),
        t1: lambda: tables.run_table("table1", cfg, p(t1, "N_QUESTIONS"), progress=False),
        t2: lambda: tables.run_table("table2", cfg, p(t2, "N_QUESTIONS"), progress=False),
        t3: lambda: tables.run_table("table3", cfg, progress=False),
        t4: lambda: tables.run_table(
            "table4", cfg, cal_fanout=p(t4, "N_CAL_FANOUT"),
            cal_bundled=p(t4, "N_CAL_BUNDLED"), n_shot=p(t4, "N_SHOT"), progress=False),
        t7: lambda: tables.run_table("table7", cfg, p(t7, "N_QUESTIONS"), methods=p(t7, "METHODS"), progress=False),
        seeds: lambda: seed_methods.run_step(cfg, p(seeds, "N_QUESTIONS"), p(seeds, "N_TRAIN"),
                                             p(seeds, "N_KBAE"), kbae, progress=False),
        mech: lambda: mechanisms.run_step(cfg, p(mech, "DATASET"), p(mech, "N_QUESTIONS"),
                                          p(mech, "N_CANDIDATES"), p(mech, "N_SHOT"), p(mech, "KS"),
                                          progress=False),
    }


def child(profile: str, overrides: dict, out: Path) -> None:
    """In the dry run's process: steps 00-01 where needed, then every step with calls."""
    from ..core.config import load_config
    from ..core.io import write_json
    from ..core.paths import RESULTS_ROOT
    from ..llm.replay import replay_counts
    from ..runs.plan import with_parameters
    from ..steps import prepare

    notebooks = {k: v for k, v in overrides.items() if k.startswith("notebooks.")}
    settings = {k: v for k, v in overrides.items() if not k.startswith("notebooks.")}
    cfg = load_config(profile, overrides={**settings, "model.backend": "synthetic"})
    params: dict[str, dict] = {}
    for key, value in notebooks.items():
        _, step, name = key.split(".", 2)
        params.setdefault(step, {})[name] = value
    cfg = with_parameters(cfg, params)
    seconds = {}
    t0 = time.perf_counter()
    prepare.prepare_datasets(cfg)
    prepare.ensure_index(cfg, progress=False)
    seconds["inputs"] = round(time.perf_counter() - t0, 1)
    calls = _step_calls(cfg)
    for step in (name for name, s in STEPS.items() if s.dry_run is not None):
        t0 = time.perf_counter()
        calls[step]()
        seconds[step] = round(time.perf_counter() - t0, 1)
        print(f"[dry run] {step}: {seconds[step]} s", flush=True)
    work = recorded_work(cfg, RESULTS_ROOT / cfg.profile)
    write_json(out, {"work": json.loads(work.to_json(orient="records")), "seconds": seconds,
                     "replay": replay_counts()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro.price.dry_run", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--overrides", default="{}", help="JSON {setting: value}; notebooks.<step>.<NAME> too")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    child(a.profile, json.loads(a.overrides), Path(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
