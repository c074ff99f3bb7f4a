"""What every BM25 backend shares: the `Hit` it returns, the `Searcher` protocol it follows and the
`SearchBackend` record by which `index.BACKENDS` describes it. Imports no backend, so the backends
(lucene, bm25s_backend) and the index code can all import it without an import circle."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Hit:
    """One retrieved passage. `score` is the BM25 score (comparable within one backend only)."""
    id: str
    score: float
    title: str
    text: str


class Searcher(Protocol):
    backend: str
    num_docs: int

    def search(self, query: str, k: int = 3) -> list[Hit]: ...
    def batch_search(self, queries: Sequence[str], k: int = 3, threads: int = 2) -> list[list[Hit]]: ...
    def doc(self, doc_id: str) -> Hit | None: ...


@dataclass(frozen=True)
class SearchBackend:
    """One `retrieval.backend`. Its module (a sub-module of this package, imported only when an
    index is built or opened, since Lucene's pulls in Java) provides
    `build(corpus_path, data_dir, *, scheme, k1, b, threads, progress) -> (doc_count, counters)`,
    `open_index(data_dir, *, scheme, k1, b) -> Searcher` and `extra_versions() -> dict`."""

    name: str
    subdir: str                  # sub-directory of the index directory holding its files
    module: str
    schemes: tuple[str, ...]     # the retrieval.scheme values it can run
    params_at_build: bool        # k1 and b are baked into the index (else applied at search time)
    packages: tuple[str, ...]    # distributions whose versions the index's meta records
    analyzer: str                # how text is analysed, in words (recorded in the meta)

    def impl(self):
        return importlib.import_module(f"{__package__}.{self.module}")
