"""Question sets (records, format loaders, the registry by name) and corpora (`.corpus`)."""
from .loaders import load_2wiki, load_dpr_qa, load_fanoutqa, load_hotpotqa, load_iirc, render_answer
from .records import QuestionRecord, sample
from .registry import DATASETS, dataset_available, describe_missing, load_dataset

__all__ = ["QuestionRecord", "sample", "load_2wiki", "load_hotpotqa", "load_iirc", "load_dpr_qa", "load_fanoutqa",
           "render_answer", "DATASETS", "load_dataset", "dataset_available", "describe_missing"]
