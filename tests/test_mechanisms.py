"""The mechanism experiments (re-ranking, retrieval) on a scripted searcher and scripted
measurements: U and answers per context are given, so the bookkeeping is what is tested."""

import numpy as np
import pytest

from seakr_repro.steps import estimators, extraction, mechanisms
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import UserError
from seakr_repro.retrieval.base import Hit

CFG = {"uncertainty.hook": "mlp_out"}


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


@pytest.fixture
def scripted(monkeypatch):
    """extract_contexts/score_columns replaced: U -6.5 with a gold passage, -3 with another, 0
    closed-book; passage "y" gives an empty greedy output; right answers only with gold."""
    calls = []

    def extract(backend, record, cfg, n_shot, contexts, all_layers):
        calls.append((record.question, len(contexts), list(all_layers)))
        out = []
        for docs, full in zip(contexts, all_layers):
            text = docs[0] if docs else ""
            gold = "of g" in text
            u = -6.5 if gold else (0.0 if not docs else backend.get(text, -3.0))
            row = {"id": record.id, "u": u, "greedy": "" if "of y" in text else "ans",
                   "answer": "a" if gold else "b", "f1": 1.0 if gold else 0.0, "correct": gold}
            out.append((row, {"mlp_out": np.zeros((2, 3, 4))} if full else None))
        return out

    def columns(row, layers, cfg, ks):
        assert layers.shape == (2, 3, 4)
        return {"id": row["id"], "incorrect": int(not row["correct"]), "eigen": row["u"]}

    monkeypatch.setattr(extraction, "extract_contexts", extract)
    monkeypatch.setattr(estimators, "score_columns", columns)
    return calls


def test_lowest_u_picks_gold_even_when_bm25_ranks_it_low(tmp_path, scripted):
    s = Searcher({"q1": ["x", "y", "g1"], "q2": ["g2", "z", "w"]})
    pairs = mechanisms.gold_passages([_rec("1", "q1", "g1"), _rec("2", "q2", "g2")], s)
    rerank, retrieval = mechanisms.run_mechanisms(pairs, s, {}, CFG, tmp_path, 3, 1, [2],
                                                  progress=False)
    assert list(rerank["u_picks_gold"]) == [1, 1]
    assert list(rerank["bm25_picks_gold"]) == [0, 1]
    assert list(rerank["gold_bm25_rank"]) == [3, 1]
    assert list(rerank["f1_lowest_u"]) == [1.0, 1.0] and list(rerank["f1_bm25_top"]) == [0.0, 1.0]
    # one batch per question: closed-book + 3 candidates, all layers for closed-book and gold only
    assert scripted[0] == ("q1", 4, [True, False, False, True])
    summary = mechanisms.rerank_summary(rerank, n_boot=50)
    assert summary.iloc[0]["picks gold"] == 1.0 and summary.iloc[1]["picks gold"] == 0.5
    # the retrieval table: each question closed-book and with its gold passage
    assert list(retrieval["condition"]) == ["closed-book", "gold passage"] * 2
    assert list(retrieval["incorrect"]) == [1, 0, 1, 0] and list(retrieval["u"]) == [0.0, -6.5] * 2


def test_an_empty_output_ranks_last_and_ties_follow_bm25_order(tmp_path, scripted):
    s = Searcher({"q": ["y", "x", "z"]})
    rec = _rec("1", "q", "gold-unretrieved")
    # every passage at the same U as the gold one: the first non-empty one in BM25 order wins
    backend = {"text of x": -6.5, "text of z": -6.5, "text of y": -9.0}
    row = mechanisms.trial(rec, s.doc("gold-unretrieved"), s, backend, CFG, 3, 1, [2])["rerank"]
    assert [c["id"] for c in row["candidates"]] == ["y", "x", "gold-unretrieved"]
    assert row["u_picks_gold"] == 0 and row["gold_bm25_rank"] is None
    assert row["f1_lowest_u"] == 0.0   # "x" won the tie; "y" had the lowest U but no output


def test_resume_skips_finished_questions(tmp_path, scripted):
    s = Searcher({"q1": ["g1", "x", "y"], "q2": ["g2", "x", "y"]})
    pairs = mechanisms.gold_passages([_rec("1", "q1", "g1"), _rec("2", "q2", "g2")], s)
    mechanisms.run_mechanisms(pairs[:1], s, {}, CFG, tmp_path, 3, 1, [2], progress=False)
    rerank, _ = mechanisms.run_mechanisms(pairs, s, {}, CFG, tmp_path, 3, 1, [2], progress=False)
    assert [q for q, _, _ in scripted] == ["q1", "q2"] and len(rerank) == 2


def test_no_gold_passage_in_the_index_is_an_error():
    with pytest.raises(UserError):
        mechanisms.gold_passages([_rec("1", "q", "nowhere")], Searcher({"q": ["x"]}))


def test_a_data_set_not_on_disk_skips_with_the_download_instructions(monkeypatch, tmp_path):
    from seakr_repro.data import registry

    monkeypatch.setattr(registry.DatasetSpec, "default_path", lambda self: tmp_path / "absent.json")
    pairs, why = mechanisms.load_pairs("nq-dev-gold", 10, 42, Searcher({"q": ["x"]}))
    assert pairs == [] and "biencoder-nq-dev.json" in why
