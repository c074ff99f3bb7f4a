"""The re-ranking mechanism experiment on a scripted searcher and scorer."""

import pytest

from seakr_repro import mechanisms
from seakr_repro.data.records import QuestionRecord
from seakr_repro.errors import UserError
from seakr_repro.retrieval.base import Hit


class Searcher:
    def __init__(self, ranking):
        self.ranking = ranking          # question -> ordered passage ids
        self.docs = {pid: Hit(pid, 1.0, pid, f"text of {pid}")
                     for ids in ranking.values() for pid in ids}
        self.docs["gold-unretrieved"] = Hit("gold-unretrieved", 0.0, "g", "text of gold")

    def search(self, query, k=3):
        return [self.docs[p] for p in self.ranking[query][:k]]

    def doc(self, pid):
        return self.docs.get(pid)


def _rec(qid, question, gold):
    return QuestionRecord(qid, question, ["a"], supporting=[gold])


def test_lowest_u_picks_gold_even_when_bm25_ranks_it_low(tmp_path):
    s = Searcher({"q1": ["x", "y", "g1"], "q2": ["g2", "z", "w"]})
    recs = [_rec("1", "q1", "g1"), _rec("2", "q2", "g2")]
    pairs = mechanisms.gold_passages(recs, s)
    # U low for gold passages, high otherwise; the non-gold "y" gives an empty answer (U = inf)
    answer_u = lambda q, text: ("" if "of y" in text else "ans", -6.5 if "of g" in text else -3.0)
    df = mechanisms.run_rerank(pairs, s, answer_u, 3, tmp_path / "rerank.jsonl", progress=False)
    assert list(df["u_picks_gold"]) == [1, 1]
    assert list(df["bm25_picks_gold"]) == [0, 1]
    assert list(df["gold_bm25_rank"]) == [3, 1]
    summary = mechanisms.rerank_summary(df, n_boot=50)
    assert summary.iloc[0]["picks gold"] == 1.0 and summary.iloc[1]["picks gold"] == 0.5


def test_ties_follow_bm25_order_and_unretrieved_gold_goes_last(tmp_path):
    s = Searcher({"q": ["x", "y", "z"]})
    rec = _rec("1", "q", "gold-unretrieved")
    row = mechanisms.rerank_trial(rec, s.doc("gold-unretrieved"), s, lambda q, t: ("a", -6.0), 3)
    assert [c["id"] for c in row["candidates"]] == ["x", "y", "gold-unretrieved"]
    assert row["u_picks_gold"] == 0 and row["gold_bm25_rank"] is None


def test_resume_skips_finished_questions(tmp_path):
    s = Searcher({"q1": ["g1", "x", "y"], "q2": ["g2", "x", "y"]})
    pairs = mechanisms.gold_passages([_rec("1", "q1", "g1"), _rec("2", "q2", "g2")], s)
    calls = []

    def answer_u(q, text):
        calls.append(q)
        return "a", -6.0

    mechanisms.run_rerank(pairs[:1], s, answer_u, 3, tmp_path / "r.jsonl", progress=False)
    df = mechanisms.run_rerank(pairs, s, answer_u, 3, tmp_path / "r.jsonl", progress=False)
    assert calls.count("q1") == 3 and calls.count("q2") == 3 and len(df) == 2


def test_no_gold_passage_in_the_index_is_an_error():
    with pytest.raises(UserError):
        mechanisms.gold_passages([_rec("1", "q", "nowhere")], Searcher({"q": ["x"]}))
