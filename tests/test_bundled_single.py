"""Checks of the bundled single-hop question set (data/bundled/single), written for seakr-repro.

The set is grounded in the embedded default corpus (gensim 4.4.0's real Wikipedia excerpt, split
into ~100-word passages). These tests prove that every positive passage is a real corpus passage,
with identical text, and that the gold answer or an alias is stated in it.
"""
from __future__ import annotations

import ast
import csv
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from seakr_repro.evaluation import normalize_answer

ROOT = Path(__file__).resolve().parents[1]
SINGLE_DIR = ROOT / "data" / "bundled" / "single"
JSON_PATH = SINGLE_DIR / "single-dev.json"
CSV_PATH = SINGLE_DIR / "single-dev.qa.csv"

MIN_TOTAL = 160
MIN_PER_TYPE = {"famous": 50, "obscure": 90}
QID_RE = re.compile(r"^seakr-bundled-single-\d{4}$")

normalize = normalize_answer   # SQuAD normalisation, as the evaluation uses it


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    with open(JSON_PATH, encoding="utf-8") as fh:
        data = json.load(fh)
    assert isinstance(data, list) and data, "single-dev.json must be a non-empty JSON list"
    return data


@pytest.fixture(scope="module")
def corpus(wiki_corpus) -> dict[str, dict]:
    return wiki_corpus


def test_dpr_json_format(questions):
    for q in questions:
        assert q["dataset"] == "seakr_bundled_single"
        assert QID_RE.match(q["qid"]), q["qid"]
        assert q["type"] in MIN_PER_TYPE, q["qid"]
        assert isinstance(q["question"], str) and q["question"].strip() == q["question"] != ""
        assert "\t" not in q["question"] and "\n" not in q["question"] and '"' not in q["question"]
        answers = q["answers"]
        assert isinstance(answers, list) and answers, q["qid"]
        assert all(isinstance(a, str) and a.strip() for a in answers), q["qid"]
        assert len(set(answers)) == len(answers), f"duplicate answers in {q['qid']}"
        assert normalize(answers[0]) not in {"yes", "no"}, f"yes/no answer in {q['qid']}"
        assert q["negative_ctxs"] == [] and q["hard_negative_ctxs"] == []
        assert isinstance(q["positive_ctxs"], list) and q["positive_ctxs"], q["qid"]
        for ctx in q["positive_ctxs"]:
            assert set(ctx) == {"title", "text", "score", "title_score", "passage_id"}, q["qid"]
            assert ctx["score"] == 1000 and ctx["title_score"] == 1


def test_qids_and_questions_unique(questions):
    qids = [q["qid"] for q in questions]
    assert len(set(qids)) == len(qids)
    assert qids == [f"seakr-bundled-single-{i:04d}" for i in range(1, len(qids) + 1)]
    texts = [q["question"].lower() for q in questions]
    dupes = [t for t, n in Counter(texts).items() if n > 1]
    assert not dupes, dupes


def test_counts_per_type(questions):
    counts = Counter(q["type"] for q in questions)
    assert len(questions) >= MIN_TOTAL, counts
    for typ, minimum in MIN_PER_TYPE.items():
        assert counts[typ] >= minimum, counts


def test_positive_passages_are_exact_corpus_passages(questions, corpus):
    for q in questions:
        for ctx in q["positive_ctxs"]:
            pid = ctx["passage_id"]
            assert pid in corpus, f"{q['qid']}: passage {pid} is not in the corpus"
            assert ctx["text"] == corpus[pid]["text"], f"{q['qid']}: text differs from passage {pid}"
            assert ctx["title"] == corpus[pid]["title"], f"{q['qid']}: title differs for {pid}"


def test_answer_stated_in_positive_passage(questions):
    missing = []
    for q in questions:
        text = normalize(" ".join(ctx["text"] for ctx in q["positive_ctxs"]))
        if not any(normalize(a) and normalize(a) in text for a in q["answers"]):
            missing.append((q["qid"], q["question"], q["answers"]))
    assert not missing, missing


def test_normalize_is_squad_like():
    assert normalize("The  Sea of Tranquility!") == "sea of tranquility"
    assert normalize("An Apple, a day") == "apple day"
    assert normalize("1,023 metres") == "1023 metres"


def test_csv_matches_json(questions):
    with open(CSV_PATH, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))  # how DPR reads its *.qa.csv files
    assert len(rows) == len(questions)
    for row, q in zip(rows, questions):
        assert len(row) == 2, row
        question, answers = row[0], ast.literal_eval(row[1])
        assert question == q["question"]
        assert answers == q["answers"]
