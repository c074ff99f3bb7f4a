"""Checks of the bundled multi-hop question sets written for seakr-repro.

data/bundled/2wiki/dev.json (+ id_aliases.json) and data/bundled/hotpotqa/hotpot_dev_distractor_v1.json
are in the file formats of 2WikiMultihopQA's and HotpotQA's dev sets and are grounded in the
embedded default corpus (gensim 4.4.0's real Wikipedia excerpt, split into ~100-word passages).
These tests prove that each question's supporting passages exist in the corpus, that the gold
answer (or an alias) is stated in them, and that the files keep the real formats.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from seakr_repro.evaluation import normalize_answer

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "data" / "bundled"
TWOWIKI_PATH = BUNDLED / "2wiki" / "dev.json"
TWOWIKI_ALIASES = BUNDLED / "2wiki" / "id_aliases.json"
HOTPOT_PATH = BUNDLED / "hotpotqa" / "hotpot_dev_distractor_v1.json"

TWOWIKI_TYPES = ("compositional", "comparison", "bridge_comparison", "inference")
TWOWIKI_KEYS = {"_id", "type", "question", "context", "supporting_facts", "evidences",
                "answer", "answer_id", "supporting_passage_ids"}
HOTPOT_KEYS = {"_id", "question", "answer", "type", "level", "supporting_facts", "context",
               "supporting_passage_ids"}
MIN_TOTAL = 80
MIN_PER_2WIKI_TYPE = 12
MIN_HOTPOT_COMPARISON = 20

normalize = normalize_answer   # SQuAD normalisation, as the evaluation uses it


@pytest.fixture(scope="module")
def corpus(wiki_corpus) -> dict[str, dict]:
    return wiki_corpus


@pytest.fixture(scope="module")
def twowiki() -> list[dict]:
    return json.loads(TWOWIKI_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def twowiki_aliases() -> dict[str, dict]:
    rows = [json.loads(line) for line in TWOWIKI_ALIASES.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return {r["Q_id"]: r for r in rows}


@pytest.fixture(scope="module")
def hotpot() -> list[dict]:
    return json.loads(HOTPOT_PATH.read_text(encoding="utf-8"))


def _check_context(q: dict) -> None:
    ctx = q["context"]
    assert isinstance(ctx, list) and ctx, q["_id"]
    titles = [c[0] for c in ctx]
    assert len(titles) == len(set(titles)), f"{q['_id']}: duplicate context titles"
    for entry in ctx:
        assert isinstance(entry, list) and len(entry) == 2, q["_id"]
        title, sents = entry
        assert isinstance(title, str) and title
        assert isinstance(sents, list) and sents and all(isinstance(s, str) and s for s in sents)
    by_title = dict((t, s) for t, s in ctx)
    assert q["supporting_facts"], q["_id"]
    for fact in q["supporting_facts"]:
        assert isinstance(fact, list) and len(fact) == 2, q["_id"]
        title, idx = fact
        assert title in by_title, f"{q['_id']}: supporting fact title {title!r} not in context"
        assert isinstance(idx, int) and 0 <= idx < len(by_title[title]), \
            f"{q['_id']}: sentence {idx} out of range for {title!r}"


def _check_grounding(q: dict, corpus: dict, golds: list[str]) -> None:
    pids = q["supporting_passage_ids"]
    assert isinstance(pids, list) and len(pids) >= 2, f"{q['_id']}: needs >= 2 supporting passages"
    assert len(set(pids)) == len(pids), f"{q['_id']}: repeated passage id"
    missing = [p for p in pids if p not in corpus]
    assert not missing, f"{q['_id']}: passages not in corpus: {missing}"
    text = normalize(" ".join(corpus[p]["contents"] for p in pids))
    assert any(normalize(g) and normalize(g) in text for g in golds), \
        f"{q['_id']}: answer {golds!r} not stated in its supporting passages"
    # every supporting title is the title of a supporting passage, and each passage is cited
    ctx_titles = {c[0] for c in q["context"]}
    for p in pids:
        assert corpus[p]["title"] in ctx_titles, f"{q['_id']}: passage {p} missing from context"
    fact_titles = {t for t, _ in q["supporting_facts"]}
    assert fact_titles == {corpus[p]["title"] for p in pids}, q["_id"]
    # sentences of supporting facts come from the supporting passages
    ctx = dict((t, s) for t, s in q["context"])
    passage_text = " ".join(corpus[p]["text"] for p in pids)
    for title, idx in q["supporting_facts"]:
        assert ctx[title][idx] in passage_text, f"{q['_id']}: sentence not from a supporting passage"


# ---------------------------------------------------------------- 2WikiMultihopQA

def test_2wiki_format_and_counts(twowiki):
    assert isinstance(twowiki, list) and len(twowiki) >= MIN_TOTAL
    ids = [q["_id"] for q in twowiki]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("seakr-bundled-2wiki-") for i in ids)
    answer_ids = [q["answer_id"] for q in twowiki]
    assert len(answer_ids) == len(set(answer_ids))
    assert all(re.fullmatch(r"seakr-bundled-2wiki-ans-\d{4}", a) for a in answer_ids)
    counts = Counter(q["type"] for q in twowiki)
    assert set(counts) <= set(TWOWIKI_TYPES), counts
    for t in TWOWIKI_TYPES:
        assert counts[t] >= MIN_PER_2WIKI_TYPE, counts
    questions = [q["question"].strip().lower() for q in twowiki]
    assert len(questions) == len(set(questions)), "duplicate questions"
    for q in twowiki:
        assert set(q) == TWOWIKI_KEYS, (q["_id"], set(q) ^ TWOWIKI_KEYS)
        assert isinstance(q["question"], str) and q["question"].endswith("?")
        assert isinstance(q["answer"], str) and q["answer"].strip()
        assert normalize(q["answer"]) not in {"yes", "no"}, q["_id"]
        assert q["evidences"] and all(isinstance(e, list) and len(e) == 3
                                      and all(isinstance(x, str) and x for x in e)
                                      for e in q["evidences"]), q["_id"]
        _check_context(q)


def test_2wiki_comparisons_answer_one_of_the_two(twowiki):
    comparisons = [q for q in twowiki if q["type"] == "comparison"]
    assert comparisons
    for q in comparisons:
        assert normalize(q["answer"]) in normalize(q["question"]), q["_id"]


def test_2wiki_aliases_file(twowiki, twowiki_aliases):
    lines = [line for line in TWOWIKI_ALIASES.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) == len(twowiki_aliases), "repeated Q_id in id_aliases.json"
    for row in twowiki_aliases.values():
        assert set(row) == {"Q_id", "aliases", "demonyms"}
        assert isinstance(row["aliases"], list) and isinstance(row["demonyms"], list)
        assert all(isinstance(a, str) and a for a in row["aliases"] + row["demonyms"])
    assert {q["answer_id"] for q in twowiki} == set(twowiki_aliases)


def test_2wiki_grounded_in_corpus(twowiki, twowiki_aliases, corpus):
    for q in twowiki:
        row = twowiki_aliases[q["answer_id"]]
        _check_grounding(q, corpus, [q["answer"]] + row["aliases"] + row["demonyms"])


# ---------------------------------------------------------------- HotpotQA (distractor)

def test_hotpot_format_and_counts(hotpot):
    assert isinstance(hotpot, list) and len(hotpot) >= MIN_TOTAL
    ids = [q["_id"] for q in hotpot]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("seakr-bundled-hotpotqa-") for i in ids)
    counts = Counter(q["type"] for q in hotpot)
    assert set(counts) <= {"bridge", "comparison"}, counts
    assert counts["comparison"] >= MIN_HOTPOT_COMPARISON, counts
    assert counts["bridge"] >= 1, counts
    assert {q["level"] for q in hotpot} <= {"easy", "medium", "hard"}
    questions = [q["question"].strip().lower() for q in hotpot]
    assert len(questions) == len(set(questions)), "duplicate questions"
    for q in hotpot:
        assert set(q) == HOTPOT_KEYS, (q["_id"], set(q) ^ HOTPOT_KEYS)
        assert isinstance(q["question"], str) and q["question"].endswith("?")
        assert isinstance(q["answer"], str) and q["answer"].strip()
        assert normalize(q["answer"]) not in {"yes", "no"}, q["_id"]
        _check_context(q)


def test_hotpot_comparisons_answer_one_of_the_two(hotpot):
    comparisons = [q for q in hotpot if q["type"] == "comparison"]
    assert comparisons
    for q in comparisons:
        assert normalize(q["answer"]) in normalize(q["question"]), q["_id"]


def test_hotpot_grounded_in_corpus(hotpot, corpus):
    for q in hotpot:
        _check_grounding(q, corpus, [q["answer"]])


def test_sets_are_distinct(twowiki, hotpot):
    a = {normalize(q["question"]) for q in twowiki}
    b = {normalize(q["question"]) for q in hotpot}
    assert not a & b
