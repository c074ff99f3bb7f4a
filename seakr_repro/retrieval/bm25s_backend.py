"""Pure-Python BM25 (bm25s + PyStemmer): the fallback when Java is unavailable, and a cross-check
of the Lucene backend in the tests.

Same `contents` field and k1 = 0.9, b = 0.4 (Lucene's BM25 variant); the analysis differs a little
from Lucene's (Snowball instead of Porter stemming, bm25s's longer English stopword list, tokens of
two or more characters), so scores are not comparable across backends but top passages mostly agree.
Everything is held in memory: fine for the excerpt corpus, heavy for DPR's 21M passages.
Only the `single_field` scheme: asking for `es_best_fields` (two fields, dis_max) is an error."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.errors import UserError
from ..core.io import iter_jsonl
from .base import Hit

STOPWORDS = "en"


def tokenize(texts: list[str], progress: bool = False, return_ids: bool = True):
    import bm25s
    import Stemmer

    return bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=Stemmer.Stemmer("english"), return_ids=return_ids,
                          show_progress=progress)


def build_bm25s_index(corpus_path: str | Path, out_dir: str | Path, k1: float = 0.9, b: float = 0.4,
                      progress: bool = True) -> int:
    """Tokenise `contents`, build the BM25 score matrix and save it with the passages; return the
    number of documents the saved index holds."""
    import bm25s
    from bm25s.utils.corpus import JsonlCorpus

    contents, docs = [], []
    for lineno, obj in iter_jsonl(corpus_path, "corpus JSONL", "build it with `python -m seakr_repro corpus`"):
        if "id" not in obj or not isinstance(obj.get("contents"), str):
            raise UserError("corpus line lacks an id or a contents string", path=corpus_path,
                            line=lineno, fix="each line needs id and contents (rebuild the corpus)")
        contents.append(obj["contents"])
        title, _, text = obj["contents"].partition("\n")
        docs.append({"id": str(obj["id"]), "title": obj.get("title", title), "text": obj.get("text", text)})
    if not docs:
        raise UserError("the corpus is empty, so there is nothing to index", path=corpus_path,
                        fix="rebuild the corpus (`python -m seakr_repro corpus`)")
    retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
    retriever.index(tokenize(contents, progress=progress), show_progress=progress)
    out_dir = Path(out_dir)
    retriever.save(out_dir, corpus=docs, show_progress=progress)
    JsonlCorpus(out_dir / "corpus.jsonl", show_progress=False)  # writes the line-offset index now
    return int(retriever.scores["num_docs"])


class BM25sSearcher:
    """BM25 over an index saved by `build_bm25s_index`; passages are read lazily (mmap)."""

    backend = "bm25s"
    scheme = "single_field"   # the only one: bm25s scores one field and has no dis_max

    def __init__(self, bm25s_dir: str | Path):
        import bm25s

        self.index_dir = Path(bm25s_dir)
        try:
            self._bm25 = bm25s.BM25.load(self.index_dir, load_corpus=True, mmap=True,
                                         show_progress=False)
        except (OSError, ValueError) as e:
            raise UserError(f"bm25s could not load the index ({e})", path=self.index_dir,
                            fix="delete the index directory and rebuild it") from None
        self.num_docs = int(self._bm25.scores["num_docs"])
        self._corpus = self._bm25.corpus
        self._row_of: dict[str, int] | None = None

    def _hit(self, row: int, score: float) -> Hit:
        d = self._corpus[int(row)]
        return Hit(d["id"], float(score), d["title"], d["text"])

    def search(self, query: str, k: int = 3) -> list[Hit]:
        if k <= 0 or not query.strip():
            return []
        ids = self._bm25.get_tokens_ids(tokenize([query], return_ids=False)[0])
        if not ids:
            return []  # no query term occurs in the corpus (Lucene returns nothing too)
        scores = self._bm25.get_scores_from_ids(ids)
        kth = np.partition(scores, -min(k, len(scores)))[-min(k, len(scores))]
        candidates = np.flatnonzero((scores >= kth) & (scores > 0))  # ties at the cut included
        top = sorted(candidates.tolist(), key=lambda i: (-scores[i], i))[:k]  # ties: corpus order
        return [self._hit(i, scores[i]) for i in top]

    def batch_search(self, queries: Sequence[str], k: int = 3, threads: int = 2) -> list[list[Hit]]:
        # Scoring one query is a few sparse-row sums; a process pool would cost more than it saves.
        return [self.search(q, k) for q in queries]

    def doc(self, doc_id: str) -> Hit | None:
        if self._row_of is None:
            self._row_of = {self._corpus[i]["id"]: i for i in range(self.num_docs)}
        row = self._row_of.get(str(doc_id))
        return None if row is None else self._hit(row, 0.0)


# --- the `base.SearchBackend` entry points (index.BACKENDS["bm25s"]) -----------------------------

def build(corpus_path: Path, data_dir: Path, *, scheme: str, k1: float, b: float, threads: int,
          progress: bool) -> tuple[int, dict]:
    """Index `contents` with k1 and b baked in (single_field only); (documents, no counters)."""
    return build_bm25s_index(corpus_path, data_dir, k1=k1, b=b, progress=progress), {}


def open_index(data_dir: Path, *, scheme: str, k1: float, b: float) -> BM25sSearcher:
    return BM25sSearcher(data_dir)   # k1 and b were fixed at build time (checked by the caller)


def extra_versions() -> dict:
    return {}
