"""The data sets by name: where each lives, how to read it, how big the paper says it is.

`load_dataset("2wiki", n=500)` is the one call the runner and the notebooks make; a missing file
raises DataMissingError with the download instructions, so nothing fails half-way through a run."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core import paths
from ..core.errors import DataMissingError, UserError
from .loaders import (HOW_TO_GET, fanoutqa_path, load_2wiki, load_2wiki_train, load_dpr_qa, load_fanoutqa,
                      load_hotpotqa, load_iirc)
from .records import QuestionRecord, sample

_BUNDLED_FIX = ("it ships with the repository; restore it from version control "
                "(git checkout -- {rel}) or re-clone the repository")


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    loader: Callable[..., list[QuestionRecord]]  # called as loader(path, source=name)
    root: str            # "raw" (user downloads), "bundled" (in the repository) or "package"
    rel: str             # path under the root; a folder when `files` is set
    kind: str            # "complex" (multi-hop, iterative retrieval) or "simple" (one round)
    paper_size: int | None  # questions in the paper's Table 6 (None: not in the paper)
    how_to_get: str
    description: str
    files: tuple[str, ...] = ()  # files the folder must hold
    # other accepted places of `rel` under the root: the layouts the official instructions leave
    # (DRAGIN's download lines, SeaKR's multihop_data.zip); the first complete one is read
    alt: tuple[str, ...] = field(default=(), kw_only=True)
    # the one data-set family map: which few-shot prompts a set takes ("2wiki", "hotpotqa", "iirc",
    # "simple") and the paper's table column its rows sit under (None: not a column of the paper)
    family: str = field(kw_only=True)
    column: str | None = field(kw_only=True)

    def layouts(self) -> list[Path]:
        """Every accepted place of the data set, the canonical one first."""
        if self.root == "package":
            return [fanoutqa_path("dev")]
        base = paths.RAW_DIR if self.root == "raw" else paths.BUNDLED_DIR
        return [base / rel for rel in (self.rel, *self.alt)]

    def _files(self, place: Path) -> list[Path]:
        return [place / f for f in self.files] if self.files else [place]

    def default_path(self) -> Path:
        """The first accepted place that holds every file, else the canonical one."""
        places = self.layouts()
        return next((p for p in places if all(f.is_file() for f in self._files(p))), places[0])

    def required_files(self) -> list[Path]:
        return self._files(self.default_path())

    def expected_at(self) -> str:
        """Where the files are looked for, each accepted layout named."""
        places = [", ".join(str(f) for f in self._files(p)) for p in self.layouts()]
        return places[0] + "".join(f" (or {p})" for p in places[1:])


def _bundled(name: str, loader, rel: str, kind: str, description: str, files=(), **family) -> DatasetSpec:
    return DatasetSpec(name, loader, "bundled", rel, kind, None,
                       _BUNDLED_FIX.format(rel=f"data/bundled/{rel}"), description, files, **family)


_2WIKI_FILES = ("dev.json", "id_aliases.json")

DATASETS: dict[str, DatasetSpec] = {s.name: s for s in (
    DatasetSpec("2wiki", load_2wiki, "raw", "2wikimultihopqa", "complex", 12576, HOW_TO_GET["2wiki"],
                "2WikiMultihopQA dev (DRAGIN's preparation)", _2WIKI_FILES,
             family="2wiki", column="2wiki"),
    DatasetSpec("hotpotqa", load_hotpotqa, "raw", "hotpotqa/hotpot_dev_distractor_v1.json", "complex",
                7405, HOW_TO_GET["hotpotqa"], "HotpotQA distractor dev",
                alt=("hotpotqa/hotpotqa-dev.json",),          # DRAGIN's wget -O, SeaKR's zip
                family="hotpotqa", column="hotpotqa"),
    DatasetSpec("iirc", load_iirc, "raw", "iirc/dev.json", "complex", 954, HOW_TO_GET["iirc"],
                "IIRC dev set (answerable questions)",
                alt=("iirc/iirc_train_dev/dev.json",),        # SeaKR's multihop_data.zip
                family="iirc", column="iirc"),
    DatasetSpec("nq", load_dpr_qa, "raw", "dpr/nq-test.qa.csv", "simple", 3610, HOW_TO_GET["dpr"],
                "Natural Questions test (DPR's split)",
             family="simple", column="nq"),
    DatasetSpec("triviaqa", load_dpr_qa, "raw", "dpr/trivia-test.qa.csv", "simple", 11313,
                HOW_TO_GET["dpr"], "TriviaQA test (DPR's split)",
                family="simple", column="triviaqa"),
    DatasetSpec("squad", load_dpr_qa, "raw", "dpr/squad1-test.qa.csv", "simple", 7357,
                HOW_TO_GET["dpr"], "SQuAD v1.1 test (DPR's split)",
                family="simple", column="squad"),
    # DPR's retriever dev file: NQ dev questions WITH their gold passages (positive_ctxs), for the
    # mechanism experiments of notebook 11 on the paper's corpus; never a table's evaluation set
    DatasetSpec("nq-dev-gold", load_dpr_qa, "raw", "dpr/biencoder-nq-dev.json", "simple", None,
                HOW_TO_GET["dpr-dev"], "Natural Questions dev with gold passages (DPR's retriever JSON)",
                family="simple", column=None),
    # official training splits (notebook 10: SKR's labels, TAIKC's KBAE adapter); never evaluated
    DatasetSpec("2wiki-train", load_2wiki_train, "raw", "2wikimultihopqa", "complex", None,
                HOW_TO_GET["2wiki-train"], "2WikiMultihopQA train (DRAGIN's preparation)",
                ("train.json", "id_aliases.json"),
                family="2wiki", column=None),
    DatasetSpec("hotpotqa-train", load_hotpotqa, "raw", "hotpotqa/hotpot_train_v1.1.json", "complex",
                None, HOW_TO_GET["hotpotqa-train"], "HotpotQA train v1.1",
                family="hotpotqa", column=None),
    DatasetSpec("iirc-train", load_iirc, "raw", "iirc/train.json", "complex", None,
                HOW_TO_GET["iirc-train"], "IIRC train set (answerable questions)",
                alt=("iirc/iirc_train_dev/train.json",),
                family="iirc", column=None),
    DatasetSpec("nq-train", load_dpr_qa, "raw", "dpr/nq-train.qa.csv", "simple", None,
                HOW_TO_GET["dpr-train"], "Natural Questions train (DPR's split)",
                family="simple", column=None),
    DatasetSpec("triviaqa-train", load_dpr_qa, "raw", "dpr/trivia-train.qa.csv", "simple", None,
                HOW_TO_GET["dpr-train"], "TriviaQA train (DPR's split)",
                family="simple", column=None),
    DatasetSpec("squad-train", load_dpr_qa, "raw", "dpr/biencoder-squad1-train.json", "simple", None,
                HOW_TO_GET["dpr-train"], "SQuAD v1.1 train (DPR's retriever JSON)",
                family="simple", column=None),
    DatasetSpec("fanoutqa", functools.partial(load_fanoutqa, "dev", "top"), "package",
                "fanoutqa/data/fanout-final-dev.json", "complex", None, HOW_TO_GET["fanoutqa"],
                "FanOutQA dev, 310 multi-hop questions (shipped in the fanoutqa wheel; closed-book here)",
                family="simple", column=None),
    DatasetSpec("fanoutqa-sub", functools.partial(load_fanoutqa, "dev", "sub"), "package",
                "fanoutqa/data/fanout-final-dev.json", "simple", None, HOW_TO_GET["fanoutqa"],
                "FanOutQA dev sub-questions, 2,193 single-hop questions",
                family="simple", column=None),
    _bundled("bundled-2wiki", load_2wiki, "2wiki", "complex",
             "the bundled 2WikiMultihopQA-format set", _2WIKI_FILES,
             family="2wiki", column="2wiki"),
    _bundled("bundled-hotpotqa", load_hotpotqa, "hotpotqa/hotpot_dev_distractor_v1.json", "complex",
             "the bundled HotpotQA-format set",
             family="hotpotqa", column="hotpotqa"),
    _bundled("bundled-single", load_dpr_qa, "single/single-dev.json", "simple",
             "the bundled single-hop set (DPR retriever JSON format)",
             family="simple", column="nq"),
)}


# evaluation set -> its official training split (questions SKR and TAIKC may learn from)
TRAIN_SPLITS = {"2wiki": "2wiki-train", "hotpotqa": "hotpotqa-train", "iirc": "iirc-train",
                "nq": "nq-train", "triviaqa": "triviaqa-train", "squad": "squad-train"}


def paper_column(name: str) -> str:
    """The paper's table column a data set's rows sit under (bundled-2wiki -> 2wiki,
    bundled-single -> nq); a set that is not a column of the paper keeps its own name."""
    spec = DATASETS.get(name)
    return spec.column if spec is not None and spec.column else name


def get_spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise UserError(f"unknown data set {name!r}", setting="dataset",
                        fix=f"use one of {', '.join(DATASETS)}")
    return DATASETS[name]


def dataset_available(name: str) -> bool:
    """True when every file the data set needs is at its default place."""
    spec = get_spec(name)
    try:
        return all(p.is_file() for p in spec.required_files())
    except DataMissingError:  # fanoutqa not installed
        return False


# Simple QA with seakr.simple_qa_passages: official -- the authors' packed DPR top-10 files
TOP_PASSAGES = {"nq": "nq_top10.json", "triviaqa": "tq_top10.json", "squad": "sq_top10.json"}


def top_passages_path(name: str) -> Path:
    """Where the official top-10 passages of a simple-QA set are expected."""
    if name not in TOP_PASSAGES:
        raise UserError(f"there are no official precomputed passages for data set {name!r}",
                        setting="seakr.simple_qa_passages",
                        fix=f"they exist for {', '.join(TOP_PASSAGES)}; for other sets use "
                            "seakr.simple_qa_passages: bm25 or give seakr.simple_qa_passages_path")
    return paths.RAW_DIR / "singlehop_data" / TOP_PASSAGES[name]


def describe_missing(name: str) -> str:
    """Where the data set is expected and how to get it (one paragraph)."""
    spec = get_spec(name)
    try:
        where = spec.expected_at()
    except DataMissingError:
        where = "the installed fanoutqa package"
    text = f"{spec.description} is expected at {where}. To get it: {spec.how_to_get}."
    if name in TOP_PASSAGES:
        text += (f" With seakr.simple_qa_passages: official, its DPR top-10 passages are expected "
                 f"at {top_passages_path(name)}. To get them: {HOW_TO_GET['top10']}.")
    return text


def top10_questions(name: str, passages: str | Path | None = None) -> tuple[list[QuestionRecord], dict]:
    """Simple QA as main_simpleqa.py evaluates it: the questions of the top-10 file (`passages`,
    default `top_passages_path(name)`), in its order, each with the golds and id of the dev file's
    record of the same (stripped) text. Returns (records, note): the note counts the file's
    questions, those the dev file lacks (no golds: not evaluated) and repeats (evaluated once)."""
    from .loaders import iter_top_questions

    path = paths.setting_path(passages) if passages else top_passages_path(name)
    by_text: dict[str, QuestionRecord] = {}
    for record in load_dataset(name):
        by_text.setdefault(record.question, record)
    records, seen, unmatched, repeated, total = [], set(), 0, 0, 0
    for question in iter_top_questions(path):
        total += 1
        record = by_text.get(question)
        if record is None:
            unmatched += 1
        elif record.id in seen:
            repeated += 1
        else:
            seen.add(record.id)
            records.append(record)
    note = {"questions_from": str(path), "golds_from": str(get_spec(name).default_path()),
            "in_file": total, "matched": len(records), "unmatched": unmatched, "repeated": repeated}
    return records, note


def load_dataset(name: str, path: str | Path | None = None, n: int | None = None,
                 seed: int = 42) -> list[QuestionRecord]:
    """Load a data set by name (from `path` if given), then keep `n` questions sampled with `seed`
    (None keeps all, in file order)."""
    spec = get_spec(name)
    if path is None and not dataset_available(name):
        try:
            missing = next(p for p in spec.required_files() if not p.is_file())
        except DataMissingError:  # the fanoutqa package itself is missing
            missing = None
        raise DataMissingError(f"{spec.description} ('{name}') was not found", path=missing,
                               fix=spec.how_to_get)
    records = spec.loader(Path(path) if path is not None else spec.default_path(), source=name)
    return sample(records, n, seed)
