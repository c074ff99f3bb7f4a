"""The official BM25 (Elasticsearch multi_match, best_fields over title and text, tie-breaker 0.5,
english analyzer, k1 1.2 / b 0.75) as a Lucene query, checked against BM25 computed by hand."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from seakr_repro.core.config import Config
from seakr_repro.core.errors import UserError
from seakr_repro.core.paths import CACHE_DIR
from seakr_repro.retrieval import build_index, open_searcher
from seakr_repro.retrieval import index as index_mod

DOCS = [  # short fields: Lucene stores their lengths exactly
    ("d1", "Zebra", "zebra lion lion grass"),
    ("d2", "Lion", "lion tiger savanna"),
    ("d3", "Tiger", "tiger tiger forest river mountain"),
    ("d4", "Savanna Zebra", "grass zebra giraffe"),
    ("d5", "River", "river forest"),
]


def write_corpus(path: Path, docs) -> Path:
    path.write_text("".join(json.dumps({"id": i, "title": t, "text": x, "contents": f"{t}\n{x}"}) + "\n"
                            for i, t, x in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def es_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("es")
    corpus = write_corpus(root / "corpus.jsonl", DOCS)
    return corpus, build_index(corpus, root / "idx", progress=False, scheme="es_best_fields")


def bm25_field(query: list[str], field: int, k1=1.2, b=0.75) -> dict[str, float]:
    """Lucene's BM25 (no (k1+1) factor since Lucene 8) over one field, by hand."""
    docs = {d[0]: d[field].lower().split() for d in DOCS}
    n_docs, avgdl = len(docs), sum(map(len, docs.values())) / len(docs)
    scores = {}
    for did, toks in docs.items():
        s = 0.0
        for term in query:
            df = sum(term in t for t in docs.values())
            tf = toks.count(term)
            if tf:
                idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
                s += idf * tf / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        scores[did] = s
    return scores


def test_best_fields_score_is_the_best_field_plus_half_the_other(es_index):
    _, info = es_index
    searcher = open_searcher(info.index_dir)
    assert type(searcher).__name__ == "EsBestFieldsSearcher" and (searcher.k1, searcher.b) == (1.2, 0.75)
    query = ["zebra", "lion"]
    title, text = bm25_field(query, 1), bm25_field(query, 2)
    expected = {d: max(title[d], text[d]) + 0.5 * min(title[d], text[d]) for d in title}
    hits = searcher.search("Zebra and the lion", k=5)
    got = {h.id: h.score for h in hits}
    want = {d: s for d, s in expected.items() if s > 0}
    assert got.keys() == want.keys()
    for d, s in want.items():
        assert got[d] == pytest.approx(s, rel=1e-5), d
    assert [h.id for h in hits] == sorted(want, key=lambda d: -want[d])
    assert hits[0].title == "Zebra" and hits[0].text == "zebra lion lion grass"
    assert searcher.doc("d3").title == "Tiger" and searcher.doc("nope") is None
    assert searcher.search("the of and", k=3) == [] and searcher.search("lion", k=0) == []


def test_single_field_index_keeps_its_scheme_and_rejects_es(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", DOCS)
    info = build_index(corpus, tmp_path / "sf", progress=False)
    assert info.meta["scheme"] == "single_field" and info.meta["params"]["k1"] == 0.9
    assert type(open_searcher(info.index_dir)).__name__ == "PyseriniSearcher"
    with pytest.raises(UserError, match="retrieval.scheme.*no separate title and text"):
        open_searcher(info.index_dir, scheme="es_best_fields")
    assert not index_mod.index_is_current(corpus, info.index_dir, scheme="es_best_fields")
    assert index_mod.index_is_current(corpus, info.index_dir, scheme="single_field")


def test_bm25s_supports_single_field_only(tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", DOCS)
    with pytest.raises(UserError, match="bm25s backend scores one field only"):
        build_index(corpus, tmp_path / "x", backend="bm25s", progress=False, scheme="es_best_fields")
    with pytest.raises(UserError, match="unknown retrieval scheme"):
        build_index(corpus, tmp_path / "x", progress=False, scheme="multi")
    cfg = Config("t", {"retrieval": {"backend": "bm25s", "scheme": "es_best_fields"},
                       "corpus": {"name": "x"}})
    with pytest.raises(UserError, match="es_best_fields"):
        index_mod.searcher_for(cfg)


def test_index_dirs_per_scheme():
    assert index_mod.index_dir_for("wiki", "pyserini").name == "wiki-pyserini"
    assert index_mod.index_dir_for("wiki", "pyserini", "es_best_fields").name == "wiki-pyserini-es-best-fields"


def test_indexed_fields_analysed_as_elasticsearch_english():
    """The index side (Anserini's DefaultEnglishAnalyzer) gives the tokens of Lucene's
    EnglishAnalyzer (ES's `english`) that analyses the queries, on real Wikipedia passages."""
    from seakr_repro.data.corpus import passage_text
    from seakr_repro.retrieval.java import ensure_java
    ensure_java()
    from pyserini.pyclass import autoclass
    utils = autoclass("io.anserini.analysis.AnalyzerUtils")
    ours = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    es = autoclass("org.apache.lucene.analysis.en.EnglishAnalyzer")()
    texts = ["John's dogs were running to the U.S.A. in the 1990s; O'Neil's café-bar, naïve e-mail"]
    cached = CACHE_DIR / "corpus" / "wiki-excerpt.jsonl"
    if cached.is_file():
        with open(cached, encoding="utf-8") as fh:
            for _, line in zip(range(300), fh):
                obj = json.loads(line)
                texts += [obj["title"], passage_text(obj)]   # the text is stored once, in contents
    for t in texts:
        assert list(utils.analyze(ours, t).toArray()) == list(utils.analyze(es, t).toArray()), t


def test_es_scheme_needs_title_and_text_keys_in_the_corpus(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "contents": f"{t}\n{x}"}) + "\n" for i, t, x in DOCS))
    with pytest.raises(UserError, match="need 'title' and 'text' keys"):
        build_index(corpus, tmp_path / "idx", progress=False, scheme="es_best_fields")
    assert not (tmp_path / "idx").exists()
