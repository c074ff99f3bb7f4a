"""The run grid under steps 04-07, 09 and 10: method settings from the profile, the backend pool,
the question samples, and `run_grid`, which runs (method, data set) pairs resumably into tidy
results (method, dataset, metric, value, low, high) for the render step.

Settings flow from the profile into each method (`method_settings`), thresholds from step 03's
calibration (`estimators.read_deltas`). Each (method, dataset) run is a resumable JSONL file keyed by
the method's config hash, so a re-run after a crash, or a render after a change elsewhere, recomputes
nothing that is already done, and SeaKR's ablations share LLM calls through the call cache.
"""
from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from ..artifacts import CALIBRATED, REASONING_ABLATIONS, RunSpec
from ..core.config import Config
from ..core.errors import DataMissingError, UserError
from ..core.paths import results_dir


def run_order(methods: Sequence[str]) -> list[str]:
    """SeaKR first, then the rest in the paper's order: a days-long run gives the headline number
    first. The rendered tables keep the paper's row order (`side_by_side`)."""
    return sorted(methods, key=lambda m: m != "seakr")


def method_settings(cfg: Config, method: str, deltas: dict[str, float]) -> dict[str, Any]:
    """The profile's settings for one method: the config keys the method declares (its CONFIG),
    and SeaKR's thresholds."""
    from ..methods import METHODS

    out = METHODS[method].settings_from(cfg) if method in METHODS else {}
    if method == "seakr":
        out["delta"] = dict(deltas)
    return out


def model_dtype(method: str, settings: dict[str, Any]) -> str | None:
    """The dtype a method's model is loaded in (None: the profile's model.dtype)."""
    from ..methods import METHODS

    return METHODS[method].model_dtype(settings) if method in METHODS else None


def row_overrides(cfg: Config, overrides: dict[str, Any]) -> dict[str, Any]:
    """A row's switches with `delta: CALIBRATED` replaced by step 03's thresholds
    (DataMissingError, i.e. a skipped row with the reason, before step 03 ran)."""
    out = dict(overrides)
    if out.get("delta") == CALIBRATED:
        from .estimators import calibrated_deltas
        out["delta"] = calibrated_deltas(cfg)
    return out


def deltas_for(cfg: Config) -> dict[str, float]:
    from .estimators import read_deltas

    return read_deltas(cfg)


class BackendPool:
    """The ONE loaded backend (the profile's model first): asking for another model closes the
    current one before loading it, so Self-RAG or a Table 4 backbone never shares the GPU with
    LLaMA-2-chat; asking for the profile's model again reloads it. `loader(cfg, name)` builds a
    backend (default: `llm.load_backend`); model directories come from `model.path` for the
    profile's model and `model.paths.<name>` for the others (`llm.registry.model_dir`). A dtype
    other than model.dtype (the faithful baselines' float32, `Method.model_dtype`) is another
    load, `loader(cfg, name, dtype)`."""

    def __init__(self, cfg: Config, primary=None, loader=None):
        self.cfg = cfg
        self._loader = loader or _load_backend
        self._name, self._backend = (self._key(None, None), primary) if primary is not None else (None, None)
        self.loads = 0                       # backends loaded by the pool (a primary given is not)

    def _key(self, name: str | None, dtype: str | None) -> tuple[str, str]:
        return name or self.cfg["model.name"], dtype or self.cfg.get("model.dtype", "float32")

    def get(self, name: str | None = None, dtype: str | None = None):
        key = self._key(name, dtype)
        if key != self._name:
            self.close()
            own_dtype = key[1] == self._key(None, None)[1]
            self._backend = (self._loader(self.cfg, key[0]) if own_dtype
                             else self._loader(self.cfg, key[0], key[1]))
            self._name = key
            self.loads += 1
        return self._backend

    def close(self) -> None:
        """Free the loaded backend's model (and its GPU memory) now."""
        backend, self._backend, self._name = self._backend, None, None
        if backend is None:
            return
        close = getattr(backend, "close", None)   # CachedBackend passes it to the backend it wraps
        if callable(close):
            close()
        del backend, close
        free_accelerator_memory()


def _load_backend(cfg: Config, name: str, dtype: str | None = None):
    from ..llm import load_backend

    return load_backend(cfg, name=name, dtype=dtype)


def free_accelerator_memory() -> None:
    """Collect what was dropped and hand the CUDA caching allocator's free blocks back."""
    import gc

    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def model_order(specs: Sequence["RunSpec"], primary: str) -> list["RunSpec"]:
    """The specs grouped by model, the profile's model first, order kept within each group:
    every data set of one model runs before the next model is loaded (one load per model)."""
    models = list(dict.fromkeys([primary] + [s.model or primary for s in specs]))
    return sorted(specs, key=lambda s: models.index(s.model or primary))


def select_questions(cfg: Config, dataset: str, n: int | None) -> list:
    """The questions a run evaluates: the prepared set (step 00), or a seeded random sample of `n`
    of it (seed datasets.sample_seed; a smaller sample is part of a larger one). Asking for more
    than were prepared is an error that says how to prepare more, never a silently smaller run."""
    from ..data.records import sample
    from .prepare import load_prepared

    records = load_prepared(cfg, dataset)
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


def runs_on(label: str, dataset: str) -> bool:
    """Whether a table row runs on a data set: the self-aware reasoning ablations apply to
    complex QA only (paper, Table 3)."""
    from ..data.registry import DATASETS

    return not (label in REASONING_ABLATIONS and DATASETS[dataset].kind == "simple")


def analysis_datasets(cfg: Config) -> list[str]:
    """The data sets of Tables 3/4 (notebooks 06, 07): `analysis.datasets`, null = the profile's."""
    from .prepare import profile_datasets

    own = profile_datasets(cfg)
    chosen = cfg.get("analysis.datasets") or own
    missing = [d for d in chosen if d not in own]
    if missing:
        raise UserError(f"analysis.datasets names {', '.join(missing)}, which profile "
                        f"'{cfg.profile}' does not prepare", setting="analysis.datasets",
                        fix="add them to datasets.complex / datasets.simple, or remove them")
    return list(chosen)


def run_grid(cfg: Config, pool: BackendPool, searcher, specs: Sequence[RunSpec],
             datasets: Sequence[str], n_questions: int | None = None, table: str = "",
             progress: bool = True) -> tuple[pd.DataFrame, dict[str, str]]:
    """Run every spec on every data set; return (tidy results, {label: why it has no numbers}).
    `pool` is a `BackendPool`, or `engine.FleetPool` (runner.engine: ray: Ray workers answer,
    this process writes; `engine.open_pool` gives the profile's)."""
    from ..evaluation import score_predictions
    from .engine import method_on
    from .runner import mark_current, run_method, run_path, summarise

    from .disk_needs import require_for_runs

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
                backend = pool.get(spec.model, model_dtype(spec.method, settings))
                method = method_on(backend, spec.method, searcher, dataset, settings)
            except DataMissingError as err:      # the whole paragraph: the path and how to get it
                skipped[spec.label] = err.paragraph()
                break
            path = run_path(cfg.profile, dataset, spec.label, method.config)
            mark_current(path)
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


def _concurrency(cfg: Config, backend, method) -> int:
    """runner.concurrency where the backend batches concurrent calls (vLLM; the transformers
    backend through `llm.batching.ThreadBatcher`) and the method answers questions side by side;
    1 otherwise (`runner.one_at_a_time` says why), with a warning (shown once) that says so."""
    import warnings

    from .runner import one_at_a_time
    n = int(cfg.get("runner.concurrency", 1) or 1)
    why_not = one_at_a_time(method, backend) if n > 1 else None
    if why_not:
        warnings.warn(f"runner.concurrency {n}: {why_not}; running one question at a time", stacklevel=2)
        return 1
    return n
