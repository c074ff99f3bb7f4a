import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from seakr_repro.core.errors import UserError
from seakr_repro.uncertainty import (
    auroc,
    auroc_ci,
    calibrate_delta,
    delta_sweep,
    estimator_aurocs,
    quality_vs_k,
    quality_vs_layer,
)
from seakr_repro.uncertainty.analysis import _auroc_rows
from scipy.stats import rankdata


def test_auroc_hand_values_ties_and_infinities():
    assert auroc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert auroc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    # pairs (pos, neg): (0.5 vs 0.5 tie = .5), (0.5 vs 0.1 = 1), (0.7 vs both = 2) -> 3.5 / 4
    assert auroc([0.5, 0.1, 0.5, 0.7], [0, 0, 1, 1]) == pytest.approx(0.875)
    assert auroc([math.inf, 1.0, -math.inf], [1, 0, 0]) == 1.0
    assert math.isnan(auroc([1.0, 2.0], [1, 1]))
    with pytest.raises(UserError, match="labels"):
        auroc([1.0, 2.0], [0, 2])
    with pytest.raises(UserError, match="2 scores but 3"):
        auroc([1.0, 2.0], [0, 1, 1])


def test_bootstrap_rows_match_sklearn_and_ci_brackets_point():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = y * 0.8 + rng.normal(size=200)
    s[:20] = np.round(s[:20])                             # some ties
    assert _auroc_rows(rankdata(s)[None], y[None])[0] == pytest.approx(roc_auc_score(y, s))
    a, lo, hi = auroc_ci(s, y, n_boot=300, seed=1)
    assert a == pytest.approx(roc_auc_score(y, s))
    assert lo < a < hi and hi - lo < 0.25
    assert auroc_ci(s, y, n_boot=300, seed=1) == (a, lo, hi)   # seeded
    assert all(math.isnan(v) for v in auroc_ci(s, y, n_boot=0)[1:])


def _synthetic_vectors(n_q=40, k=12, d=16, seed=0):
    # Incorrect questions: samples spread out; correct ones: samples near one point.
    rng = np.random.default_rng(seed)
    incorrect = np.arange(n_q) % 2
    base = rng.normal(size=(n_q, 1, d))
    spread = np.where(incorrect[:, None, None] == 1, 1.0, 0.05)
    return base + spread * rng.normal(size=(n_q, k, d)), incorrect


def test_quality_vs_k_and_layer():
    vecs, incorrect = _synthetic_vectors()
    df = quality_vs_k(vecs, incorrect, ks=[1, 2, 8, 20])
    assert list(df.columns) == ["k", "auroc", "lo", "hi", "n_short", "n", "n_incorrect"]
    assert df.set_index("k").loc[8, "auroc"] == 1.0      # separable once k >= 2
    assert df.set_index("k").loc[20, "n_short"] == 40    # only 12 samples each
    assert (df["n"] == 40).all() and (df["n_incorrect"] == 20).all()   # what the figure states
    noise = np.random.default_rng(5).normal(size=vecs.shape)
    by_layer = quality_vs_layer({3: noise, 7: vecs}, incorrect, k=8, n_boot=50)
    assert list(by_layer["layer"]) == [3, 7]
    assert by_layer.loc[1, "auroc"] == 1.0 and by_layer.loc[0, "auroc"] < 0.9
    assert by_layer[["lo", "hi"]].notna().all().all()
    ragged = [v[: 3 + i % 5] for i, v in enumerate(vecs)]
    assert quality_vs_k(ragged, incorrect, ks=[4]).loc[0, "n_short"] == 8


def test_estimator_table_orients_scores():
    y = np.array([0, 0, 1, 1])
    df = estimator_aurocs({"ppl": [1, 2, 3, 4], "energy": [9, 8, 2, 1]}, y,
                          {"energy": False}, n_boot=0)
    assert list(df["auroc"]) == [1.0, 1.0]


def test_delta_sweep_hand_values():
    u = np.array([-6.5, -6.2, -5.0, -4.0])
    correct = np.array([1, 1, 0, 1])
    rag = np.array([0, 1, 1, 1])
    df = delta_sweep(u, correct, deltas=[-7.0, -6.0, -4.5, 0.0], correct_with_retrieval=rag)
    r = df.set_index("delta")
    assert list(r["retrieval_rate"]) == [1.0, 0.5, 0.25, 0.0]
    assert r.loc[-6.0, "acc_kept"] == 1.0 and r.loc[-6.0, "acc_retrieved"] == 0.5
    assert r.loc[-4.5, "acc_kept"] == pytest.approx(2 / 3)
    assert math.isnan(r.loc[-7.0, "acc_kept"]) and math.isnan(r.loc[0.0, "acc_retrieved"])
    assert list(r["acc_adaptive"]) == [0.75, 1.0, 0.75, 0.75]
    # default grid: one delta per distinct decision
    assert len(delta_sweep(u, correct)) == 5


def test_calibrate_delta_rules():
    u = np.array([-6.5, -6.4, -6.3, -6.1, -5.9, -5.5, -5.0, -4.0, -3.0, -2.0])
    correct = np.array([1, 1, 1, 1, 0, 1, 0, 0, 0, 0])
    cal = calibrate_delta(u, correct, rule="precision", target=0.8, min_retrieved=3)
    # lowest delta with >= 80% of the retrieved incorrect: between -6.1 and -5.9 (5/6 incorrect)
    assert cal.delta == pytest.approx(-6.0) and cal.target_met and cal.rule_used == "precision"
    assert cal.retrieval_rate == 0.6 and cal.incorrect_rate_retrieved == pytest.approx(5 / 6)
    assert cal.acc_kept == 1.0
    y = calibrate_delta(u, correct, rule="youden")
    assert y.delta == pytest.approx(-6.0) and y.youden_j == pytest.approx(1 - 1 / 5)
    rate = calibrate_delta(u, correct, rule="rate", target=0.3)
    assert rate.retrieval_rate == pytest.approx(0.3) and rate.delta == pytest.approx(-4.5)
    miss = calibrate_delta(u, correct, rule="precision", target=1.0, min_retrieved=6)
    assert not miss.target_met and miss.rule_used == "youden"
    with pytest.raises(UserError, match="rule"):
        calibrate_delta(u, correct, rule="best")
    with pytest.raises(UserError, match="empty"):
        calibrate_delta([], [])
