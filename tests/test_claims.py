"""The claims ledger: verdict rules, the number that would decide, and measurement from saved runs."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from seakr_repro.steps import claims as C


def _m(diff, low, high, n=100, direction=1, margin=0.0):
    return C.Measurement(6, "x", "F1 points", diff, low, high, n, direction, margin)


def test_verdicts_follow_the_interval_and_the_claimed_direction():
    assert _m(3.0, 1.0, 5.0).verdict == C.HOLDS
    assert _m(-3.0, -5.0, -1.0).verdict == C.FAILS
    assert _m(1.0, -1.0, 3.0).verdict == C.OPEN
    # cost: the claim is that SeaKR is cheaper (diff < 0)
    assert _m(-2.0, -3.0, -1.0, direction=-1).verdict == C.HOLDS
    assert _m(2.0, 1.0, 3.0, direction=-1).verdict == C.FAILS
    # non-inferiority: within 2 points of always retrieving
    assert _m(-0.5, -1.5, 0.5, margin=2.0).verdict == C.HOLDS
    assert _m(-4.0, -6.0, -2.5, margin=2.0).verdict == C.FAILS
    assert _m(-1.5, -3.0, 0.0, margin=2.0).verdict == C.OPEN


def test_small_n_or_missing_interval_decides_nothing():
    assert _m(30.0, 20.0, 40.0, n=C.MIN_N - 1).verdict == C.OPEN
    assert _m(3.0, math.nan, math.nan).verdict == C.OPEN


def test_n_to_decide_scales_with_the_square_of_the_half_width():
    m = _m(1.0, -1.0, 3.0, n=100)          # half-width 2, effect 1 -> 4x the questions
    assert m.n_to_decide == 400
    assert _m(3.0, 1.0, 5.0).n_to_decide is None          # decided already
    assert _m(0.0, -1.0, 1.0).n_to_decide is None         # no effect to detect


def test_claim_verdict_needs_every_part():
    holds, fails, open_ = _m(3, 1, 5), _m(-3, -5, -1), _m(1, -1, 3)
    assert C.verdict_of([holds, holds]) == C.HOLDS
    assert C.verdict_of([holds, open_]) == C.OPEN
    assert C.verdict_of([holds, fails, open_]) == C.FAILS
    assert C.verdict_of([]) == C.OPEN


def test_paired_measurement_on_a_clear_effect():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.0, 200)
    m = C.paired("a - b", 6, a, a - 0.2, "F1 points", scale=100, n_boot=200)
    assert m.diff == pytest.approx(20.0)
    assert m.low == pytest.approx(20.0) and m.verdict == C.HOLDS


def test_auroc_difference_statistic():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1] * 5)
    perfect = y + np.linspace(0, 0.1, y.size)
    noise = np.random.default_rng(1).normal(size=y.size)
    stat = C.auroc_difference(perfect, noise, y)
    m = C.paired_statistic("auroc", 1, stat, y.size, "AUROC", n_boot=200)
    assert m.diff > 0.2 and m.low > 0 and m.verdict == C.HOLDS


def test_ledger_lists_every_claim_with_a_reason_when_unmeasured():
    df = C.ledger_frame([_m(3, 1, 5)], {7: "no timed runs"})
    assert sorted(df["claim"].unique()) == [c.id for c in C.CLAIMS]
    row7 = df[df.claim == 7].iloc[0]
    assert row7["measurement"] == "not measured" and row7["source"] == "no timed runs"
    md = C.ledger_markdown(df, "title")
    assert md.count("\n| ") >= len(C.CLAIMS) + 1 and "holds" in md
    tex = C.ledger_latex(df, "title")
    assert r"\begin{tabular}" in tex and r"\bottomrule" in tex


def _write_run(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(qid, f1, retr=1, seconds=1.0, extra=None):
    return {"id": qid, "question": "q", "golds": ["paris"], "answer": "x", "em": f1, "f1": f1,
            "n_retrievals": retr, "seconds": seconds, "extra": extra or {}}


def test_measure_claims_from_saved_runs(tmp_path, monkeypatch):
    from seakr_repro.core import paths
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)
    cfg = load_config("smoke")
    res = tmp_path / "smoke"
    n = 40
    # notebook 04: SeaKR right on every question, DRAGIN on none; SeaKR's paths recorded
    seakr = [_row(f"q{i}", 1.0, extra={"rationale_answer": "paris" if i % 2 else "rome",
                                       "knowledge_answer": "rome"}) for i in range(n)]
    _write_run(res / "runs/d/seakr.jsonl", seakr)
    _write_run(res / "runs/d/dragin.jsonl", [_row(f"q{i}", 0.0) for i in range(n)])
    pd.DataFrame([{"method": "seakr", "dataset": "d", "metric": "f1", "run_file": "runs/d/seakr.jsonl"},
                  {"method": "dragin", "dataset": "d", "metric": "f1", "run_file": "runs/d/dragin.jsonl"}]
                 ).to_csv((res / "04-complex-qa").mkdir(parents=True) or res / "04-complex-qa/results.csv",
                          index=False)
    # notebook 09: SeaKR slower than FLARE
    _write_run(res / "09/seakr.jsonl", [_row(f"q{i}", 1.0, seconds=5.0) for i in range(n)])
    _write_run(res / "09/flare.jsonl", [_row(f"q{i}", 1.0, seconds=2.0) for i in range(n)])
    pd.DataFrame([{"method": "seakr", "dataset": "d", "run_file": "09/seakr.jsonl"},
                  {"method": "flare", "dataset": "d", "run_file": "09/flare.jsonl"}]
                 ).to_csv((res / "09-efficiency").mkdir(parents=True) or res / "09-efficiency/results.csv",
                          index=False)
    measured, missing = C.measure_claims(cfg, n_boot=100)
    by_claim = {}
    for m in measured:
        by_claim.setdefault(m.claim, []).append(m)
    assert by_claim[6][0].verdict == C.HOLDS and by_claim[6][0].diff == pytest.approx(100.0)
    assert by_claim[7][0].verdict == C.FAILS        # SeaKR took longer: reported as not holding
    assert len(by_claim[5]) == 2                     # against each path alone
    assert {1, 2, 3, 4} <= set(missing)
    df = C.render_ledger(cfg, out_dir=tmp_path / "tables", n_boot=100)
    assert (tmp_path / "tables" / "claims.md").read_text().startswith("**The paper's claims")
    assert set(df["claim"]) == {c.id for c in C.CLAIMS}


def test_mechanism_tables_measure_claims_3_and_4(tmp_path, monkeypatch):
    """Notebook 11's tables: the lowest U picks gold more often than chance; U-gated retrieval
    keeps the closed-book answer where U <= delta and is no worse than always retrieving there."""
    from seakr_repro.core import paths
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)
    cfg = load_config("smoke", overrides={"uncertainty.use_calibrated_delta": False,
                                          "uncertainty.delta": -6.0})
    out = tmp_path / "smoke" / C.MECHANISMS
    out.mkdir(parents=True)
    n = 60
    pd.DataFrame({"id": range(n), "n_candidates": 3, "u_picks_gold": [1] * 50 + [0] * 10,
                  "bm25_picks_gold": [1] * 30 + [0] * 30, "f1_lowest_u": 1.0, "f1_bm25_top": 0.5}
                 ).to_csv(out / "rerank.csv", index=False)
    # closed-book right (and confident, U < delta) on the first 20 questions, wrong elsewhere
    closed = [{"id": i, "condition": "closed-book", "u": -7.0 if i < 20 else -3.0,
               "f1": 1.0 if i < 20 else 0.0, "incorrect": int(i >= 20), "eigen": 0.0} for i in range(n)]
    gold = [{"id": i, "condition": "gold passage", "u": -7.0, "f1": 1.0, "incorrect": 0, "eigen": 0.0}
            for i in range(n)]
    pd.DataFrame(closed + gold).to_csv(out / "retrieval_scores.csv", index=False)
    measured, _ = C.measure_claims(cfg, n_boot=200)
    three = {m.what.split(" - ")[1][:6]: m for m in measured if m.claim == 3}
    assert three["chance"].verdict == C.HOLDS and three["BM25's"].verdict == C.HOLDS
    four = [m for m in measured if m.claim == 4]
    assert "on 67% of the questions" in four[0].what and four[0].verdict == C.HOLDS   # same F1
    assert four[1].diff == pytest.approx(-20 / 60) and four[1].verdict == C.HOLDS     # fewer
