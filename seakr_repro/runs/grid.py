"""The run grid under steps 04-07, 09 and 10: `run_grid` runs (method, data set) pairs, each
`runner`'s resumable file keyed by the method's config hash, into tidy results (method, dataset,
metric, value, low, high); settings come from the profile (`method_settings`), thresholds from
step 03's calibration, and SeaKR's ablations share calls through the cache.
"""
from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from ..artifacts import CALIBRATED, RunSpec
from ..core.config import Config
from ..core.errors import DataMissingError, UserError
from ..core.paths import results_dir
from ..uncertainty.thresholds import calibrated_deltas, read_deltas
from . import inputs
from .plan import runs_on
from .pool import BackendPool


def method_settings(cfg: Config, method: str, deltas: dict[str, float]) -> dict[str, Any]:
    """The profile's settings for one method (its declared CONFIG keys), and SeaKR's thresholds."""
    from ..methods import method_class

    cls = method_class(method)
    out = cls.settings_from(cfg) if cls is not None else {}
    if method == "seakr":
        out["delta"] = dict(deltas)
    return out


def model_dtype(method: str, settings: dict[str, Any]) -> str | None:
    """The dtype a method's model is loaded in (None: the profile's model.dtype)."""
    from ..methods import method_class

    cls = method_class(method)
    return cls.model_dtype(settings) if cls is not None else None


def row_overrides(cfg: Config, overrides: dict[str, Any]) -> dict[str, Any]:
    """A row's switches with `delta: CALIBRATED` as step 03's thresholds (DataMissingError before)."""
    out = dict(overrides)
    if out.get("delta") == CALIBRATED:
        out["delta"] = calibrated_deltas(cfg)
    return out


def deltas_for(cfg: Config) -> dict[str, float]:
    return read_deltas(cfg)


def model_order(specs: Sequence["RunSpec"], primary: str) -> list["RunSpec"]:
    """The specs grouped by model, the profile's model first, order kept: one load per model."""
    models = list(dict.fromkeys([primary] + [s.model or primary for s in specs]))
    return sorted(specs, key=lambda s: models.index(s.model or primary))


def select_questions(cfg: Config, dataset: str, n: int | None) -> list:
    """The questions a run evaluates: the prepared set (step 00), or a seeded random sample of `n`
    of it (seed datasets.sample_seed; a smaller sample is part of a larger one). Asking for more
    than were prepared is an error that says how to prepare more, never a silently smaller run."""
    from ..data.records import sample

    records = inputs.load_prepared(cfg, dataset)
    if n is None:
        return records
    if n > len(records):
        cap = cfg["datasets.n_questions"]
        if cap is not None and cap < n:
            more = (f"prepare more: add --set datasets.n_questions={n} (or null for the whole set) "
                    "and run step 00 or `prepare` again (`run` prepares by itself)")
        else:
            more = f"{dataset} holds {len(records)} questions in all: ask for {len(records)} or fewer"
        raise UserError(f"{n} questions of {dataset} were asked for, but profile '{cfg.profile}' "
                        f"prepared {len(records)}", setting="datasets.n_questions", fix=more)
    return sample(records, n, cfg["datasets.sample_seed"])


def run_grid(cfg: Config, pool: BackendPool, searcher, specs: Sequence[RunSpec],
             datasets: Sequence[str], n_questions: int | None = None, table: str = "",
             progress: bool = True) -> tuple[pd.DataFrame, dict[str, str]]:
    """Run every spec on every data set; return (tidy results, {label: why it has no numbers}).
    `pool`: a `BackendPool` or, on Ray, a `FleetPool` (`engine.open_pool` gives the profile's)."""
    from ..evaluation import score_predictions
    from .engine import method_on
    from .derived import derive
    from .disk_needs import require_for_runs
    from .runner import mark_current, run_method, run_path, summarise

    require_for_runs(cfg)          # a full disk stops the grid before it starts, not at hour 30
    deltas = deltas_for(cfg)
    rows, skipped = [], {}
    for spec in model_order(specs, cfg["model.name"]):   # one model load per model, not per spec
        for dataset in datasets:
            if not runs_on(spec.label, dataset):
                continue
            records = select_questions(cfg, dataset, n_questions)
            try:
                settings = {**method_settings(cfg, spec.method, deltas),
                            **row_overrides(cfg, spec.overrides)}
                dtype = _dtype_on_card(cfg, pool, spec, settings)
                backend = pool.get(spec.model, dtype)
                method = method_on(backend, spec.method, searcher, dataset, settings)
            except DataMissingError as err:      # the whole paragraph: the path and how to get it
                skipped[spec.label] = err.paragraph()
                break
            path = run_path(cfg.profile, dataset, spec.label, method.config)
            mark_current(path)
            if cfg.get("runner.derive_rows", True):
                derive(method, path, records)       # answers another run's file already holds
            done = run_method(method, records, path, backend=backend, progress=progress,
                              desc=f"{spec.label} on {dataset}",
                              concurrency=_concurrency(cfg, backend, method))
            wanted = {x.id for x in records}        # the file may hold more (a larger earlier run)
            done = [r for r in done if r["id"] in wanted]
            score = score_predictions([r["answer"] for r in done], [r["golds"] for r in done],
                                      n_boot=cfg["evaluation.bootstrap_samples"], seed=cfg["seed"])
            costs = summarise(done)
            for metric in ("em", "f1"):
                rows.append({"table": table, "method": spec.label, "model": spec.model or cfg["model.name"],
                             "dataset": dataset, "metric": metric, "value": score[metric],
                             "low": score[f"{metric}_low"], "high": score[f"{metric}_high"],
                             "n": score["n"], **{k: costs[k] for k in (
                                 "retrievals_per_q", "llm_calls_per_q", "tokens_per_q", "seconds_per_q",
                                 "failed")},
                             "run_file": str(path.relative_to(results_dir(cfg.profile)))})
    return pd.DataFrame(rows), skipped


def _dtype_on_card(cfg: Config, pool, spec: RunSpec, settings: dict[str, Any]) -> str | None:
    """The dtype the spec's model loads in: the method's own, unless it does not fit the pool's GPU
    (`llm.gpu_fit.dtype_that_fits`). A departure is printed, warned, kept in `pool.departures` and
    written into the settings, so the run's key and file name the dtype the model really has. Ray
    pools have no card_bytes: the workers' GPUs are not this machine's."""
    import warnings

    from ..llm.gpu_fit import dtype_that_fits

    want = model_dtype(spec.method, settings)
    card = getattr(pool, "card_bytes", lambda: None)()
    dtype, departure = dtype_that_fits(cfg, want, card, spec.model)
    if departure:
        settings["dtype"] = dtype
        getattr(pool, "departures", {})[spec.label] = departure
        print(f"[grid] WARNING {spec.label}: {departure}", flush=True)
        warnings.warn(f"{spec.label}: {departure}", stacklevel=3)
    return dtype


def _concurrency(cfg: Config, backend, method) -> int:
    """runner.concurrency where backend and method allow it, else 1 with a warning that says why."""
    import warnings

    from .runner import one_at_a_time
    n = int(cfg.get("runner.concurrency", 1) or 1)
    why_not = one_at_a_time(method, backend) if n > 1 else None
    if why_not:
        warnings.warn(f"runner.concurrency {n}: {why_not}; running one question at a time", stacklevel=2)
        return 1
    return n
