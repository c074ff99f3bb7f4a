"""Passages as official scripts take them, read from files rather than searched.

SeaKR's `main_simpleqa.py` does not search: it scores the 10 passages DPR's dense retriever returned for
each question (the authors' packed <set>_top10.json). `PrecomputedPassages` serves them with the
searcher's `search(question, k)` signature, looking the question up by its exact text; a question
the file lacks is that question's failure (`QuestionError`), recorded by the runner.

Self-RAG's run_short_form.py does not search either: it reads each question's passages (`ctxs`)
from its input file; `InputPassages` serves those alike (`self_rag.passages: input`)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..core import paths
from ..core.errors import QuestionError, UserError
from .base import Hit


@lru_cache(maxsize=4)
def _table(path: str, mtime_ns: int, top: int) -> dict:
    from ..data.loaders import load_dpr_top_passages
    return load_dpr_top_passages(path, top)


class PrecomputedPassages:
    backend = "precomputed"

    def __init__(self, path: str | Path, top: int = 10):
        self.path, self.top = paths.setting_path(path), int(top)

    @property
    def table(self) -> dict:
        from ..data.loaders import HOW_TO_GET
        from ..core.io import require_file
        path = require_file(self.path, "the precomputed top passages", HOW_TO_GET["top10"])
        return _table(str(path.resolve()), path.stat().st_mtime_ns, self.top)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        if k > self.top:
            raise UserError(f"{k} passages per question were asked for but only the top {self.top} "
                            "are read from the file", setting="seakr.simple_qa_top",
                            fix=f"set seakr.simple_qa_top to at most {self.top}")
        found = self.table.get(query.strip())
        if found is None:
            raise QuestionError(f"the question {query[:80]!r} is not in the precomputed passages",
                            path=self.path, setting="seakr.simple_qa_passages",
                            fix="use the passages file of the same data set as the questions "
                                "(nq_top10.json for nq, tq_top10.json for triviaqa, sq_top10.json "
                                "for squad), or set seakr.simple_qa_passages: bm25")
        return [Hit(p["id"], 0.0, p["title"], p["text"]) for p in found[:k]]


@lru_cache(maxsize=4)
def _input_table(path: str, mtime_ns: int, setting: str) -> dict:
    from ..data.loaders import load_self_rag_input
    return load_self_rag_input(path, setting)


class InputPassages:
    """Self-RAG's passages as run_short_form.py takes them: each question's `ctxs` from its input
    file (retrieved beforehand, by Contriever in the authors' files), the first k in file order,
    looked up by the question's exact text. `setting` names the file's setting in errors."""

    backend = "self-rag-input"

    def __init__(self, path: str | Path, setting: str = "self_rag.input_files"):
        self.path, self.setting = paths.setting_path(path), setting
        _ = self.table            # a missing or malformed file fails now, not at the first question

    @property
    def table(self) -> dict:
        # a missing file: the loader's error (the file, the setting, how to get it); never cached
        mtime = self.path.stat().st_mtime_ns if self.path.is_file() else 0
        return _input_table(str(self.path), mtime, self.setting)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        found = self.table.get(query.strip())
        if found is None:
            raise QuestionError(f"the question {query[:80]!r} is not in the Self-RAG input file",
                                path=self.path, setting=self.setting,
                                fix="give the input file of the same data set as the questions, or set "
                                    "self_rag.passages: index")
        return [Hit(p["id"], 0.0, p["title"], p["text"]) for p in found[:k]]
