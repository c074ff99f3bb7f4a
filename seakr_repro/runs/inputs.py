"""What the runs read that steps 00 and 01 (`steps.prepare`) made: the prepared data sets, the
corpus file, the searcher, so the run layer never reaches up into a notebook step; and the top-10
passages file a simple-QA set's questions come from (step 00 reads it, preflight checks it)."""
from __future__ import annotations

from pathlib import Path

from ..core.config import Config
from ..core.paths import CACHE_DIR, results_dir, setting_path


def with_text_field(cfg: Config) -> bool:
    """The two-field BM25 needs the passage text under a key of its own (corpus.WITH_TEXT_FIELDS)."""
    return cfg.get("retrieval.scheme", "single_field") == "es_best_fields"


def corpus_path(cfg: Config) -> Path:
    suffix = "-fields" if with_text_field(cfg) else ""
    return CACHE_DIR / "corpus" / f"{cfg['corpus.name']}{suffix}.jsonl"


def profile_datasets(cfg: Config) -> list[str]:
    return list(cfg["datasets.complex"]) + list(cfg["datasets.simple"])


def top10_file(cfg: Config, name: str) -> Path | None:
    """The top-10 passages file a simple-QA set's questions come from (as in main_simpleqa.py), or None."""
    from ..data.registry import DATASETS, TOP_PASSAGES, top_passages_path

    if cfg.get("seakr.simple_qa_passages") != "official" or DATASETS[name].kind != "simple":
        return None
    given = cfg.get("seakr.simple_qa_passages_path")
    if given:
        return setting_path(given)
    return top_passages_path(name) if name in TOP_PASSAGES else None


def load_prepared(cfg: Config, name: str):
    """The question set that step 00 saved for this profile."""
    from ..core.io import iter_jsonl
    from ..data.records import QuestionRecord

    return [QuestionRecord.from_dict(obj) for _, obj in
            iter_jsonl(results_dir(cfg.profile) / "data" / f"{name}.jsonl", f"prepared data set '{name}'",
                       f"run notebook 00-prepare-data (or `python -m seakr_repro prepare --profile {cfg.profile}`)")]


def open_profile_searcher(cfg: Config):
    from ..retrieval.index import searcher_for

    return searcher_for(cfg)
