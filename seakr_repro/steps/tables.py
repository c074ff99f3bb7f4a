"""Steps 04-07 and 09: one paper table's runs as declared in `artifacts` (`run_table`), Table 4's
per-backbone calibration and Table 7's timing with the call cache off."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from ..artifacts import RunSpec, table
from ..core.config import Config
from ..core.errors import DataMissingError, UserError
from ..core.paths import results_dir
from ..runs.grid import deltas_for, method_settings, model_dtype, run_grid, select_questions
from ..runs.plan import table_datasets
from ..runs.pool import BackendPool


def measure_efficiency(cfg: Config, searcher, methods: Sequence[str], datasets: Sequence[str],
                       n_questions: int, progress: bool = True) -> pd.DataFrame:
    """Table 7: wall time, LLM calls, tokens and retrievals per question, measured with the LLM
    call cache OFF (a cached re-run would time nothing), on `n_questions` of each set."""
    from ..runs.engine import close_backend, open_backend

    deltas = deltas_for(cfg)
    out_dir = results_dir(cfg.profile) / table("table7").step / "runs"
    # each method on the model as it runs in the tables (the faithful baselines' float32 model,
    # `Method.model_dtype`), one load per dtype; the call cache off, its counters on (on Ray: each
    # worker's)
    dtypes = {name: model_dtype(name, method_settings(cfg, name, deltas)) for name in methods}
    rows = []
    for dtype in sorted(set(dtypes.values()), key=lambda d: d is not None):
        backend = open_backend(cfg, cached=False, dtype=dtype)
        try:
            rows += _timed_runs(cfg, backend, searcher, [m for m in methods if dtypes[m] == dtype],
                                datasets, n_questions, deltas, out_dir, progress)
        finally:
            close_backend(backend)
    return pd.DataFrame(rows)


def _timed_runs(cfg, backend, searcher, methods, datasets, n_questions, deltas, out_dir, progress):
    from ..evaluation import Interval, bootstrap_ci
    from ..runs.engine import method_on
    from ..runs.runner import config_hash, run_method, summarise

    rows = []
    for name in methods:
        for dataset in datasets:
            records = select_questions(cfg, dataset, n_questions)
            method = method_on(backend, name, searcher, dataset, method_settings(cfg, name, deltas))
            path = out_dir / dataset / f"{name}-{config_hash(method.config)}.jsonl"
            done = run_method(method, records, path, backend=backend, progress=progress,
                              desc=f"timing {name} on {dataset}")
            costs = summarise(done)
            # a bootstrap interval of the mean seconds, as the EM/F1 tables give theirs
            ci = bootstrap_ci([r["seconds"] for r in done], n_boot=cfg["evaluation.bootstrap_samples"],
                              confidence=cfg["evaluation.confidence"], seed=cfg["seed"]) \
                if done else Interval(float("nan"), float("nan"), float("nan"))
            rows.append({"table": "table7", "method": name, "dataset": dataset,
                         "metric": "seconds_per_question", "value": costs["seconds_per_q"],
                         "low": ci.low, "high": ci.high,
                         "llm_calls_per_q": costs["llm_calls_per_q"], "tokens_per_q": costs["tokens_per_q"],
                         "retrievals_per_q": costs["retrievals_per_q"], "n": costs["questions"],
                         "run_file": str(path.relative_to(results_dir(cfg.profile)))})
    return rows


def calibrate_backbone(cfg: Config, backend, records, n_shot: int, progress: bool = True) -> dict:
    """Per-model delta for a Table-4 backbone: the step 02/03 procedure on its own calibration run
    (U's scale depends on the model, so the profile's delta does not transfer)."""
    from . import extraction, estimators
    from ..uncertainty import calibrate_delta

    tag = backend.name
    extraction.run_extraction(backend, records, cfg, n_shot, progress=progress, tag=tag)
    rows, vectors = extraction.load_extraction(cfg, [r.id for r in records], tag=tag)
    # the U that gates SeaKR's retrieval: the profile's hook, layer and variant
    layer = estimators.u_layer(cfg, backend.n_layers)
    scores = estimators.estimator_scores(rows, vectors.layer(cfg["uncertainty.hook"], layer),
                                          estimators.u_params(cfg), names=["eigen"])
    correct = [int(r["correct"]) for r in rows]
    cal = calibrate_delta(scores["eigen"], correct)
    return {"model": tag, "delta": float(cal.delta), "rule_used": cal.rule_used,
            "retrieval_rate": float(cal.retrieval_rate), "closed_book_accuracy": sum(correct) / len(correct),
            "n_calibration": len(rows)}


def run_backbones(cfg: Config, pool: BackendPool, searcher, models: Sequence[str], datasets: Sequence[str],
                  n_questions: int | None, calibration_records, n_shot: int,
                  progress: bool = True) -> tuple[pd.DataFrame, dict[str, str], pd.DataFrame]:
    """Table 4: SeaKR on each backbone, each with its own calibrated delta. Returns (results,
    {model: why it has no numbers}, calibration summary)."""
    frames, skipped, calib = [], {}, []
    primary = cfg["model.name"]
    for model in sorted(models, key=lambda m: m != primary):   # the loaded profile model first
        try:
            backend = pool.get(model)
        except DataMissingError as err:
            skipped[model] = err.paragraph()   # the setting to set and how to get it
            continue
        if model == cfg["model.name"]:
            delta = deltas_for(cfg)["eigen"]
            calib.append({"model": model, "delta": delta, "rule_used": "step 03"})
        else:
            info = calibrate_backbone(cfg, backend, calibration_records, n_shot, progress)
            delta = info["delta"]
            calib.append(info)
        spec = RunSpec(model, "seakr", {"delta": {"eigen": delta}}, model=model)
        res, skip = run_grid(cfg, pool, searcher, [spec], datasets, n_questions, table="table4",
                             progress=progress)
        skipped.update(skip)
        frames.append(res)
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return results, skipped, pd.DataFrame(calib)


@dataclass
class TableRun:
    results: pd.DataFrame                 # tidy rows, as saved to <step>/results.csv
    skipped: dict[str, str]               # {row: why it has no numbers}
    extra: pd.DataFrame | None = None     # Table 4: per-backbone calibration; Table 7: None


def run_table(key: str, cfg: Config, n_questions: int | None = None, *,
              methods: Sequence[str] | None = None, pool: BackendPool | None = None, searcher=None,
              progress: bool = True, **step_args) -> TableRun:
    """Run one paper table's step as declared in artifacts.TABLES and save what its notebook shows
    (results.csv with provenance, skipped.json; Table 4 also calibration.csv). n_questions: per data
    set (None: the declaration's `sample` setting, e.g. analysis.n_questions, else the whole prepared
    set). methods: a subset of the declared rows (Table 7's METHODS). step_args: Table 4's
    calibration set (cal_fanout, cal_bundled, n_shot). SeaKR runs first, so a days-long run gives
    the headline number first."""
    from ..runs.inputs import open_profile_searcher
    from ..core.provenance import save_dataframe, save_json

    spec = table(key)
    wanted = {"cal_fanout", "cal_bundled", "n_shot"} if spec.kind == "backbones" else set()
    if set(step_args) != wanted:       # checked before any model is loaded
        raise UserError(f"{key} takes {', '.join(sorted(wanted)) or 'no step arguments'}; got "
                        f"{', '.join(sorted(step_args)) or 'none'}", setting="run_table",
                        fix="pass cal_fanout=, cal_bundled= and n_shot= for table4 (notebook 07's "
                            "parameters), nothing else for the other tables")
    if n_questions is None and spec.sample:
        n_questions = cfg[spec.sample]
    runs = list(spec.runs)
    if methods is not None:
        unknown = [m for m in methods if m not in spec.methods]
        if unknown:
            raise UserError(f"{key} has no row {', '.join(unknown)}", setting="METHODS",
                            fix=f"choose among {', '.join(spec.methods)}")
        runs = [r for r in runs if r.label in methods]
    runs.sort(key=lambda r: r.label != "seakr")
    datasets = table_datasets(cfg, key)
    out = results_dir(cfg.profile) / spec.step
    searcher = searcher if searcher is not None else open_profile_searcher(cfg)
    if spec.kind == "timing":     # timed with the call cache off, on its own uncached backend
        results = measure_efficiency(cfg, searcher, [r.label for r in runs], datasets, n_questions,
                                     progress=progress)
        save_dataframe(results, out / "results.csv", cfg, n_questions=n_questions, cache="off")
        return TableRun(results, {})
    own_pool = pool is None
    if own_pool:
        from ..runs.engine import open_pool
        pool = open_pool(cfg)        # the profile's model here, or Ray workers (runner.engine)
    try:
        extra = None
        if spec.kind == "backbones":
            from .extraction import calibration_records
            records = calibration_records(step_args["cal_fanout"], step_args["cal_bundled"],
                                          seed=cfg["seed"])
            results, skipped, extra = run_backbones(
                cfg, pool, searcher, cfg["backbones.models"], datasets, n_questions, records,
                step_args["n_shot"], progress=progress)
            save_dataframe(extra, out / "calibration.csv", cfg)
        else:
            results, skipped = run_grid(cfg, pool, searcher, runs, datasets, n_questions, table=key,
                                        progress=progress)
    finally:
        if own_pool:
            pool.close()          # the GPU is free for the next step
    save_dataframe(results, out / "results.csv", cfg, n_questions=n_questions)
    save_json(skipped, out / "skipped.json", cfg)
    return TableRun(results, skipped, extra)
