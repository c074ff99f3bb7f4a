"""Question sets (records, format loaders, the registry by name) and corpora (`.corpus`)."""
from .loaders import (
    HOW_TO_GET,
    answer_leaves,
    fanoutqa_path,
    load_2wiki,
    load_dpr_qa,
    load_fanoutqa,
    load_hotpotqa,
    load_iirc,
    render_answer,
)
from .records import QuestionRecord, sample
from .registry import DATASETS, DatasetSpec, dataset_available, describe_missing, get_spec, load_dataset

__all__ = [
    "QuestionRecord", "sample",
    "load_2wiki", "load_hotpotqa", "load_iirc", "load_dpr_qa", "load_fanoutqa", "fanoutqa_path",
    "render_answer", "answer_leaves", "HOW_TO_GET",
    "DATASETS", "DatasetSpec", "get_spec", "load_dataset", "dataset_available", "describe_missing",
]
