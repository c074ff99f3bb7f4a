"""Corpus builders: the real Wikipedia excerpt and DPR's TSV, with clear errors on bad input."""
import json

import pytest

from seakr_repro.data import corpus
from seakr_repro.core.errors import DataMissingError, UserError

DPR_LINES = [
    "id\ttext\ttitle",
    '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses."\tAaron',
    "2\tGod at Sinai granted Aaron the priesthood for himself and his male descendants.\tAaron",
    "3\tThe Apollo 11 mission landed on the Moon in July 1969.\tApollo 11",
]


def test_wiki_excerpt_passages_are_clean_and_about_100_words():
    passages = list(corpus.iter_wiki_excerpt())
    assert 4000 < len(passages) < 6000
    ids = [p["id"] for p in passages]
    assert len(ids) == len(set(ids))
    lengths = [len(p["text"].split()) for p in passages]
    assert max(lengths) == 100 and sum(lengths) / len(lengths) > 90
    first = passages[0]
    assert first["title"] == "Anarchism" and first["contents"].startswith("Anarchism\n")
    text = " ".join(p["text"] for p in passages[:200])
    assert "'''" not in text and "[[" not in text and "{{" not in text
    titles = {p["title"] for p in passages}
    assert {"Abraham Lincoln", "Apollo 11", "Aristotle"} <= titles


def test_clean_wikitext_strips_markup():
    raw = "'''Aristotle''' (;  , ''Aristotélēs'') was a [[Greek]] philosopher.\n== Life ==\nBorn in Stagira."
    text = corpus.clean_wikitext(raw)
    # (passage ids and texts are frozen: the bundled questions quote them, so the cleaning stays as is)
    assert text.startswith("Aristotle (, Aristotélēs) was a Greek philosopher.")
    assert "Life." in text and "'" not in text


def test_dpr_tsv_conversion_streams_every_line(tmp_path):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("\n".join(DPR_LINES) + "\n")
    out = tmp_path / "corpus.jsonl"
    assert corpus.convert_dpr_tsv(tsv, out, progress=False) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["id"] == "1" and rows[0]["title"] == "Aaron"
    assert set(rows[0]) == {"id", "title", "contents"}          # the text is stored once
    assert corpus.passage_text(rows[0]).startswith('Aaron Aaron ( or ; "Ahärôn")')
    assert corpus.load_corpus(out)["1"]["text"] == corpus.passage_text(rows[0])
    assert rows[2]["contents"] == "Apollo 11\nThe Apollo 11 mission landed on the Moon in July 1969."
    assert corpus.corpus_summary(out)["passages"] == 3


@pytest.mark.parametrize("lines, line_no, words", [
    (["id\ttitle\ttext", "1\tx\ty"], 1, "header"),                 # wrong column order
    (DPR_LINES[:2] + ["2\tonly two columns"], 3, "3 tab-separated"),  # malformed line
])
def test_dpr_tsv_errors_name_file_line_and_fix(tmp_path, lines, line_no, words):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("\n".join(lines) + "\n")
    out = tmp_path / "corpus.jsonl"
    out.write_text("previous corpus\n")
    with pytest.raises(UserError) as err:
        corpus.convert_dpr_tsv(tsv, out, progress=False)
    msg = str(err.value)
    assert str(tsv) in msg and f"line {line_no}" in msg and words in msg and "Fix:" in msg
    assert out.read_text() == "previous corpus\n", "a failed conversion must not touch the old output"
    assert not list(tmp_path.glob(".corpus.jsonl.*")), "no temporary file may be left behind"


def test_empty_tsv_is_an_error(tmp_path):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n")
    with pytest.raises(UserError, match="empty"):
        corpus.convert_dpr_tsv(tsv, tmp_path / "c.jsonl", progress=False)
    assert not (tmp_path / "c.jsonl").exists()


def test_missing_tsv_says_how_to_get_it(tmp_path):
    with pytest.raises(DataMissingError) as err:
        corpus.convert_dpr_tsv(tmp_path / "nope.tsv", tmp_path / "c.jsonl", progress=False)
    assert "psgs_w100" in str(err.value) and "download" in str(err.value)


def test_load_corpus_checks_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "contents": "a"}\n{"id": "2"}\n')
    with pytest.raises(UserError) as err:
        corpus.load_corpus(path)
    assert "line 2" in str(err.value) and "contents" in str(err.value)
