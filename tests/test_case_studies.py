"""Case-study rendering: re-ranking ranks by the key SeaKR used (empty steps count as +inf)."""
import math

from seakr_repro.steps.case_studies import pick_cases, render_case

ROW = {
    "question": "Which is larger, A or B?", "golds": ["A"], "answer": "A", "f1": 1.0,
    "extra": {"choice": "knowledge", "rationale_answer": "B", "rationale_u": -3.0,
              "knowledge_answer": "A", "knowledge_u": -5.0},
    "trace": [
        {"kind": "pseudo_step", "output": "A is\nlarger", "u": 2.0, "delta": -1.0, "retrieve": True},
        {"kind": "rerank", "query": "A B larger", "chosen": "d2", "output": "A.",
         "candidates": [{"id": "d1", "title": "A", "u": 1.0, "key": math.inf, "output": ""},
                        {"id": "d2", "title": "B", "u": 3.0, "key": 3.0, "output": "A | B\nx"}]},
    ],
}


def test_rerank_table_ranks_by_key_and_escapes_cells():
    text = render_case(ROW)
    assert "| 1 | 2 | 1.00 (empty step: +inf) | A (d1) |" in text
    assert "| 2 | 1 | 3.00 ✓ | B (d2) | A \\| B ⏎ x |" in text
    assert "“A is ⏎ larger”" in text and "kept the knowledge path" in text


def test_pick_cases_finds_each_decision():
    cases = pick_cases([ROW])
    assert cases["retrieval triggered"] == [ROW] and cases["re-ranking overruled BM25"] == [ROW]
    assert cases["reasoning chose the knowledge path"] == [ROW] and cases["retrieval skipped"] == []
