"""Steps 04-07 and 09: run method grids over the profile's question sets, resumably, and collect
tidy results (method, dataset, metric, value, low, high) for the render step.

Settings flow from the profile into each method (`method_settings`), thresholds from step 03's
calibration (`calibration.read_deltas`). Each (method, dataset) run is a resumable JSONL file keyed by
the method's config hash, so a re-run after a crash, or a render after a change elsewhere, recomputes
nothing that is already done, and SeaKR's ablations share LLM calls through the call cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

# the tables' runs are declared in artifacts.py; ABLATIONS and RunSpec keep their names here
from .artifacts import ABLATIONS, CALIBRATED, REASONING_ABLATIONS, RunSpec, table  # noqa: F401
from .config import Config
from .errors import DataMissingError, UserError
from .paths import results_dir


def run_order(methods: Sequence[str]) -> list[str]:
    """SeaKR first, then the rest in the paper's order: a days-long run gives the headline number
    first. The rendered tables keep the paper's row order (`side_by_side`)."""
    return sorted(methods, key=lambda m: m != "seakr")


def method_settings(cfg: Config, method: str, deltas: dict[str, float]) -> dict[str, Any]:
    """The profile's settings for one method: the config keys the method declares (its CONFIG),
    and SeaKR's thresholds."""
    from .methods import METHODS

    out = METHODS[method].settings_from(cfg) if method in METHODS else {}
    if method == "seakr":
        out["delta"] = dict(deltas)
    return out


def row_overrides(cfg: Config, overrides: dict[str, Any]) -> dict[str, Any]:
    """A row's switches with `delta: CALIBRATED` replaced by step 03's thresholds
    (DataMissingError, i.e. a skipped row with the reason, before step 03 ran)."""
    out = dict(overrides)
    if out.get("delta") == CALIBRATED:
        from .calibration import calibrated_deltas
        out["delta"] = calibrated_deltas(cfg)
    return out


def _deltas_for(cfg: Config) -> dict[str, float]:
    from .calibration import read_deltas

    return read_deltas(cfg)


class BackendPool:
    """The ONE loaded backend (the profile's model first): asking for another model closes the
    current one before loading it, so Self-RAG or a Table 4 backbone never shares the GPU with
    LLaMA-2-chat; asking for the profile's model again reloads it. `loader(cfg, name)` builds a
    backend (default: `llm.load_backend`); model directories come from `model.path` for the
    profile's model and `model.paths.<name>` for the others (`llm.registry.model_dir`)."""

    def __init__(self, cfg: Config, primary=None, loader=None):
        self.cfg = cfg
        self._loader = loader or _load_backend
        self._name, self._backend = (cfg["model.name"], primary) if primary is not None else (None, None)
        self.loads = 0                       # backends loaded by the pool (a primary given is not)

    def get(self, name: str | None = None):
        name = name or self.cfg["model.name"]
        if name != self._name:
            self.close()
            self._backend = self._loader(self.cfg, name)
            self._name = name
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


def _load_backend(cfg: Config, name: str):
    from .llm import load_backend

    return load_backend(cfg, name=name)


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
    from .data.records import sample
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
    """Run every spec on every data set; return (tidy results, {label: why it has no numbers})."""
    from .data.registry import DATASETS
    from .evaluation import score_predictions
    from .methods import build_method
    from .runner import run_method, run_path, summarise

    from .disk import require_for_runs

    require_for_runs(cfg)          # a full disk stops the grid before it starts, not at hour 30
    deltas = _deltas_for(cfg)
    rows, skipped = [], {}
    for spec in model_order(specs, cfg["model.name"]):   # one model load per model, not per spec
        for dataset in datasets:
            if spec.label in REASONING_ABLATIONS and DATASETS[dataset].kind == "simple":
                continue   # self-aware reasoning applies to complex QA only (paper, Table 3)
            records = select_questions(cfg, dataset, n_questions)
            try:
                backend = pool.get(spec.model)
                settings = {**method_settings(cfg, spec.method, deltas),
                            **row_overrides(cfg, spec.overrides)}
                method = build_method(spec.method, backend, searcher, dataset, **settings)
            except DataMissingError as err:
                skipped[spec.label] = err.what
                break
            path = run_path(cfg.profile, dataset, spec.label, method.config)
            done = run_method(method, records, path, backend=backend, progress=progress,
                              desc=f"{spec.label} on {dataset}",
                              concurrency=_concurrency(cfg, backend))
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
                                 "retrievals_per_q", "llm_calls_per_q", "tokens_per_q", "seconds_per_q")},
                             "run_file": str(path.relative_to(results_dir(cfg.profile)))})
    return pd.DataFrame(rows), skipped


def _concurrency(cfg: Config, backend) -> int:
    """runner.concurrency where the backend batches concurrent calls; 1 on the transformers
    backend (which decodes one call at a time), with a warning (shown once) that says so."""
    import warnings

    from .concurrency import supports_concurrency
    n = int(cfg.get("runner.concurrency", 1) or 1)
    if n > 1 and not supports_concurrency(backend):
        warnings.warn(f"runner.concurrency {n} applies to model.backend: vllm; the transformers "
                      "backend runs one question at a time", stacklevel=2)
        return 1
    return n


def paper_dataset_name(dataset: str) -> str:
    """bundled-2wiki -> 2wiki etc., so our rows sit beside the paper's columns."""
    return dataset.removeprefix("bundled-").replace("single", "nq")


def measure_efficiency(cfg: Config, searcher, methods: Sequence[str], datasets: Sequence[str],
                       n_questions: int, progress: bool = True) -> pd.DataFrame:
    """Table 7: wall time, LLM calls, tokens and retrievals per question, measured with the LLM
    call cache OFF (a cached re-run would time nothing), on `n_questions` of each set."""
    from .llm import CachedBackend, load_backend
    from .methods import build_method
    from .runner import config_hash, run_method, summarise

    backend = CachedBackend(load_backend(cfg, cache=False), enabled=False)  # counts, never caches
    deltas = _deltas_for(cfg)
    out_dir = results_dir(cfg.profile) / "09-efficiency" / "runs"
    rows = []
    for name in methods:
        for dataset in datasets:
            records = select_questions(cfg, dataset, n_questions)
            method = build_method(name, backend, searcher, dataset, **method_settings(cfg, name, deltas))
            path = out_dir / dataset / f"{name}-{config_hash(method.config)}.jsonl"
            costs = summarise(run_method(method, records, path, backend=backend, progress=progress,
                                         desc=f"timing {name} on {dataset}"))
            rows.append({"table": "table7", "method": name, "dataset": dataset,
                         "metric": "seconds_per_question", "value": costs["seconds_per_q"],
                         "llm_calls_per_q": costs["llm_calls_per_q"], "tokens_per_q": costs["tokens_per_q"],
                         "retrievals_per_q": costs["retrievals_per_q"], "n": costs["questions"],
                         "run_file": str(path.relative_to(results_dir(cfg.profile)))})
    return pd.DataFrame(rows)


def calibrate_backbone(cfg: Config, backend, records, n_shot: int, progress: bool = True) -> dict:
    """Per-model delta for a Table-4 backbone: the step 02/03 procedure on its own calibration run
    (U's scale depends on the model, so the profile's delta does not transfer)."""
    from . import calibration
    from .uncertainty import calibrate_delta

    tag = backend.name
    calibration.run_extraction(backend, records, cfg, n_shot, progress=progress, tag=tag)
    rows, vectors = calibration.load_extraction(cfg, [r.id for r in records], tag=tag)
    # the U that gates SeaKR's retrieval: the profile's hook, layer and variant
    layer = calibration.u_layer(cfg, backend.n_layers)
    scores = calibration.estimator_scores(rows, vectors.layer(cfg["uncertainty.hook"], layer),
                                          calibration.u_params(cfg), names=["eigen"])
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
            skipped[model] = err.what
            continue
        if model == cfg["model.name"]:
            delta = _deltas_for(cfg)["eigen"]
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


def training_questions(cfg: Config, dataset: str, n_train: int | None) -> tuple[list, str]:
    """Training questions for the methods that learn (SKR's labels, TAIKC's KBAE) and where they
    came from. The data set's official training split when it is on disk (a seeded sample of
    `n_train`); else the questions of its evaluation file that are NOT in the profile's evaluation
    sample (same seeded permutation), so training and evaluation never share a question. When the
    evaluation uses every question and there is no training file, DataMissingError says where to
    put one."""
    from .data.records import sample
    from .data.registry import TRAIN_SPLITS, dataset_available, get_spec, load_dataset
    from .prepare import load_prepared

    seed = cfg["datasets.sample_seed"]
    official = TRAIN_SPLITS.get(dataset)
    if official and dataset_available(official):
        return load_dataset(official, n=n_train, seed=seed), f"{official} (official training split)"
    evaluated = {r.id for r in load_prepared(cfg, dataset)}
    everything = load_dataset(dataset)
    permuted = sample(everything, len(everything), seed)   # prefix = the evaluation sample
    rest = [r for r in permuted if r.id not in evaluated]
    if not rest:
        spec = get_spec(official) if official else None
        where = (" or ".join(str(p) for p in spec.required_files() if not p.is_file()) + " is missing"
                 if spec else "it has no known training split")
        raise DataMissingError(
            f"no training questions for {dataset}: the evaluation set uses all {len(everything)} "
            f"questions of its file, and {where}", setting="datasets.n_questions",
            fix=(f"{spec.how_to_get}; " if spec else "") +
                "or evaluate on a sample (e.g. PROFILE=paper-sample) so that the rest can train")
    return (rest[:n_train] if n_train is not None else rest), \
        f"{dataset} questions outside the evaluation sample"


def train_split(cfg: Config, dataset: str, n_train: int | None) -> list:
    """The records of `training_questions`."""
    return training_questions(cfg, dataset, n_train)[0]


SEED_METHODS = ("skr-prompt", "skr-icl", "skr-cls", "skr-knn", "taikc", "taikc-kbae")


def run_seed_methods(cfg: Config, pool: BackendPool, searcher, datasets: Sequence[str],
                     n_questions: int | None, n_train: int, n_kbae: int, kbae_settings: dict,
                     progress: bool = True) -> tuple[pd.DataFrame, dict[str, str], pd.DataFrame]:
    """SKR's four variants and TAIKC (prompt-only and KBAE) beside SeaKR on the same questions.

    SKR's labels come from each data set's training questions (`training_questions`); KBAE's
    adapter from the first single-hop set's. A data set without training questions skips the rows
    that need them, with the reason, and the others run. SeaKR's rows reuse step 04/05's
    runs (same config, same results file). Returns (results, skipped, label/adapter summary).
    """
    from .data.registry import DATASETS
    from .methods.kbae import bootstrap_adapter, kbae_unavailable
    from .methods.skr_labels import build_skr_labels, labels_summary, save_labels, usable

    backend = pool.get()
    out = results_dir(cfg.profile) / "10-seed-methods"
    simple = [d for d in datasets if DATASETS[d].kind == "simple"] or list(datasets)
    skipped: dict[str, str] = {}

    def skip(label: str, why: str) -> None:       # one label may miss on several data sets
        if label not in skipped:
            skipped[label] = why
        elif why not in skipped[label]:
            skipped[label] += "; " + why

    # KBAE trains a LoRA adapter with peft on the transformers model; on the vLLM backend (which
    # holds the GPU) there is none to train, so its row is skipped with the reason
    adapter, no_kbae = None, kbae_unavailable(backend)
    if not no_kbae:
        try:
            kbae_train, _ = training_questions(cfg, simple[0], n_kbae)
            adapter = bootstrap_adapter(backend, kbae_train, out / "kbae_adapter", **kbae_settings)
        except DataMissingError as err:     # no training questions: the row says why, the rest runs
            no_kbae = err.what
    frames, notes = [], []
    for dataset in datasets:
        specs = [RunSpec("seakr", "seakr"), RunSpec("skr-prompt", "skr-prompt")]
        try:
            train, source = training_questions(cfg, dataset, n_train)
        except DataMissingError as err:
            for v in ("skr-icl", "skr-cls", "skr-knn"):
                skip(v, err.what)
            notes.append({"dataset": dataset, "train_source": None, "skipped": err.what})
        else:
            labels = build_skr_labels(backend, searcher, train, dataset)
            save_labels(out / "skr_labels" / f"{dataset}.jsonl", labels)
            notes.append({"dataset": dataset, "train_source": source, "train_questions": len(train),
                          **labels_summary(labels)})
            if usable(labels):
                specs += [RunSpec(v, v, {"labelled": labels}) for v in ("skr-icl", "skr-cls", "skr-knn")]
            else:   # every training question was discarded (wrong with and without retrieval)
                for v in ("skr-icl", "skr-cls", "skr-knn"):
                    skip(v, f"no usable SKR labels on {dataset}: the model answered all {len(labels)} "
                            "training questions wrongly with and without retrieval")
        specs += [RunSpec("taikc", "taikc")]
        if no_kbae:
            skip("taikc-kbae", no_kbae)
        else:
            specs += [RunSpec("taikc-kbae", "taikc-kbae", {"kbae_adapter": str(adapter)})]
        res, skip_grid = run_grid(cfg, pool, searcher, specs, [dataset], n_questions, table="seed",
                                  progress=progress)
        frames.append(res)
        for label, why in skip_grid.items():
            skip(label, why)
    return pd.concat(frames, ignore_index=True), skipped, pd.DataFrame(notes)


def table_datasets(cfg: Config, key: str) -> list[str]:
    """The data sets a paper table runs on in this profile (its declaration's `datasets`)."""
    kind = table(key).datasets
    return analysis_datasets(cfg) if kind == "analysis" else list(cfg[f"datasets.{kind}"])


@dataclass
class TableRun:
    results: pd.DataFrame                 # tidy rows, as saved to <step>/results.csv
    skipped: dict[str, str]               # {row: why it has no numbers}
    extra: pd.DataFrame | None = None     # Table 4: per-backbone calibration; Table 7: None


def run_table(key: str, cfg: Config, n_questions: int | None = None, *,
              methods: Sequence[str] | None = None, pool: BackendPool | None = None, searcher=None,
              progress: bool = True, **step_args) -> TableRun:
    """Run one paper table's step as declared in artifacts.TABLES and save what its notebook
    shows (results.csv with provenance, skipped.json; Table 4 also calibration.csv).

    n_questions: questions per data set (None: the declaration's `sample` setting, e.g.
    analysis.n_questions, else the whole prepared set). methods: a subset of the declared rows
    (Table 7's METHODS). step_args: Table 4's calibration set (cal_fanout, cal_bundled, n_shot).
    SeaKR runs first, so a days-long run gives the headline number first."""
    from .prepare import open_profile_searcher
    from .provenance import save_dataframe, save_json

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
        from .llm import load_backend
        pool = BackendPool(cfg, load_backend(cfg))
    try:
        extra = None
        if spec.kind == "backbones":
            from .calibration import calibration_records
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
