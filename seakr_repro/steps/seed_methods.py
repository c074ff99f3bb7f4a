"""Step 10: the related methods that learn from training questions (SKR's four variants, TAIKC
and TAIKC with KBAE), their training split and their runs."""
from __future__ import annotations

from functools import partial
from typing import Sequence

import pandas as pd

from ..artifacts import SEED_STEP, RunSpec
from ..core.config import Config
from ..core.errors import DataMissingError
from ..core.paths import results_dir
from ..runs.grid import run_grid
from ..runs.pool import BackendPool


# The model calls of step 10's training work (KBAE's data, SKR's labels per data set), one record
# each with its questions and counts as a run's rows give theirs; `price.work` reads it.
TRAINING_CALLS = "training_calls.json"


def training_questions(cfg: Config, dataset: str, n_train: int | None) -> tuple[list, str]:
    """Training questions for the methods that learn (SKR's labels, TAIKC's KBAE) and where they
    came from. The data set's official training split when it is on disk (a seeded sample of
    `n_train`); else the questions of its evaluation file that are NOT in the profile's evaluation
    sample (same seeded permutation), so training and evaluation never share a question. When the
    evaluation uses every question and there is no training file, DataMissingError says where to
    put one."""
    from ..data.records import sample
    from ..data.registry import TRAIN_SPLITS, dataset_available, get_spec, load_dataset
    from ..runs.inputs import load_prepared

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


def skr_labels(cfg: Config, backend, searcher, dataset: str, n_train: int | None) -> tuple[list, str, int]:
    """SKR's labelled training questions of `dataset`, where they came from and how many questions:
    from SKR's own results files when `skr.train_results` names a directory for it (all of their
    questions, as skr.py labels them), else from the profile's model answering `training_questions`
    closed-book and with retrieval. `skr.ties` and `skr.label_answer` score both alike, and the
    answers are extracted as the SKR variants extract theirs (`evaluation.answer_extraction`)."""
    from ..methods.skr.labels import answer_settings_from, build_skr_labels
    from ..methods.skr.results_files import labels_from_results, results_paths

    how = {"ties": cfg["skr.ties"], "label_answer": cfg["skr.label_answer"]}
    answer = answer_settings_from(cfg)
    given = (cfg.get("skr.train_results") or {}).get(dataset)
    if given:
        labels = labels_from_results(given, **how, **answer)
        return labels, "SKR results files " + " + ".join(str(p) for p in results_paths(given)), len(labels)
    train, source = training_questions(cfg, dataset, n_train)
    return build_skr_labels(backend, searcher, train, dataset, **how, **answer), source, len(train)


def skr_settings(cfg: Config, variant: str) -> dict:
    """The profile's settings of one SKR variant: its answer extraction
    (`evaluation.answer_extraction`) and its `skr.*` settings (knn_k, knn_rule, pooling)."""
    from ..methods.skr.method import SKR_METHODS

    return SKR_METHODS[variant].settings_from(cfg)


def run_seed_methods(cfg: Config, pool: BackendPool, searcher, datasets: Sequence[str],
                     n_questions: int | None, n_train: int, n_kbae: int, kbae_settings: dict,
                     progress: bool = True) -> tuple[pd.DataFrame, dict[str, str], pd.DataFrame]:
    """SKR's four variants and TAIKC (prompt-only and KBAE) beside SeaKR on the same questions.
    SKR's labels come from each data set's training questions or SKR's results files (`skr_labels`),
    its variants take the profile's `skr.*` settings (`skr_settings`); KBAE's adapter from the first
    single-hop set's. A data set without training questions skips the rows that need them, with the
    reason, and the others run. SeaKR's rows reuse step 04/05's runs (same config, same results
    file). Returns (results, skipped, label/adapter summary)."""
    from ..core.io import write_json
    from ..data.registry import DATASETS
    from ..llm.cache import with_call_counts
    from ..methods.taikc.kbae import bootstrap_adapter, kbae_unavailable
    from ..methods.skr.labels import labels_summary, save_labels, usable

    backend = pool.get()
    out = results_dir(cfg.profile) / SEED_STEP
    simple = [d for d in datasets if DATASETS[d].kind == "simple"] or list(datasets)
    skipped: dict[str, str] = {}

    def skip(label: str, why: str) -> None:       # one label may miss on several data sets
        if label not in skipped:
            skipped[label] = why
        elif why not in skipped[label]:
            skipped[label] += "; " + why

    training: list[dict] = []                # the training work's model calls (`TRAINING_CALLS`)

    def counted(work: str, dataset: str, compute, questions):
        """compute(), its calls recorded with `questions(what it gave)` questions."""
        got, calls = with_call_counts(backend, compute)
        if calls is not None:
            training.append({"work": work, "dataset": dataset, "questions": questions(got), **calls})
            write_json(out / TRAINING_CALLS, training)
        return got

    # KBAE trains a LoRA adapter with peft on the transformers model; on the vLLM backend (which
    # holds the GPU) there is none to train, so its row is skipped with the reason
    adapter, no_kbae = None, kbae_unavailable(backend)
    if not no_kbae:
        try:
            kbae_train, _ = training_questions(cfg, simple[0], n_kbae)
            adapter = counted("kbae-data", simple[0], lambda: bootstrap_adapter(
                backend, kbae_train, out / "kbae_adapter", **kbae_settings), lambda _: len(kbae_train))
        except DataMissingError as err:     # no training questions: the row says why, the rest runs
            no_kbae = err.paragraph()
    frames, notes = [], []
    for dataset in datasets:
        specs = [RunSpec("seakr", "seakr"), RunSpec("skr-prompt", "skr-prompt", skr_settings(cfg, "skr-prompt"))]
        try:
            labels, source, n_labelled = counted("skr-labels", dataset, partial(
                skr_labels, cfg, backend, searcher, dataset, n_train), lambda got: got[2])
        except DataMissingError as err:
            for v in ("skr-icl", "skr-cls", "skr-knn"):
                skip(v, err.paragraph())
            notes.append({"dataset": dataset, "train_source": None, "skipped": err.paragraph()})
        else:
            save_labels(out / "skr_labels" / f"{dataset}.jsonl", labels)
            notes.append({"dataset": dataset, "train_source": source, "train_questions": n_labelled,
                          **labels_summary(labels)})
            if usable(labels):
                specs += [RunSpec(v, v, {"labelled": labels, **skr_settings(cfg, v)})
                          for v in ("skr-icl", "skr-cls", "skr-knn")]
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


def run_step(cfg: Config, n_questions: int | None, n_train: int, n_kbae: int, kbae_settings: dict,
             progress: bool = True) -> tuple[pd.DataFrame, dict[str, str], pd.DataFrame]:
    """Notebook 10: `run_seed_methods` on every data set of the profile with the profile's model
    and searcher, saving results.csv, skr_labels.csv and skipped.json (with provenance)."""
    from ..core.provenance import save_dataframe, save_json
    from ..llm import load_backend
    from ..runs.inputs import open_profile_searcher, profile_datasets

    out = results_dir(cfg.profile) / SEED_STEP
    if cfg.get("runner.engine", "local") == "ray":
        import warnings
        warnings.warn("runner.engine is ray, but notebook 10 runs on the local engine: SKR's labels "
                      "and KBAE's training use the model in this process", stacklevel=2)
    pool = BackendPool(cfg, load_backend(cfg))
    try:
        results, skipped, labels = run_seed_methods(cfg, pool, open_profile_searcher(cfg), profile_datasets(cfg),
                                                    n_questions, n_train, n_kbae, kbae_settings, progress)
    finally:
        pool.close()              # the GPU is free for the next step
    save_dataframe(results, out / "results.csv", cfg, n_questions=n_questions, n_train=n_train, n_kbae=n_kbae)
    save_dataframe(labels, out / "skr_labels.csv", cfg)
    save_json(skipped, out / "skipped.json", cfg)
    return results, skipped, labels
