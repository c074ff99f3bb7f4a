"""The maths behind the paper's Figure 3 (quality vs k, vs layer, retrieval trade-off vs delta), the
estimator table (AUROC against closed-book correctness) and the calibration of delta.
Conventions: `incorrect` labels are 1 when the closed-book answer is wrong; scores are oriented so
that higher = more uncertain (see `logit_estimators.oriented`); retrieval fires when U > delta.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from ..core.errors import UserError
from .eigenscore import eigen_score


# ----------------------------------------------------------------------------------------- AUROC
def _scores_labels(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise UserError(f"{s.size} scores but {y.size} labels", setting="scores/labels",
                        fix="pass one score and one label per question, in the same order")
    if np.isnan(s).any():
        raise UserError("scores contain NaN", setting="scores",
                        fix="drop or recompute the questions whose estimator failed")
    if not np.isin(y, (0, 1, True, False)).all():
        raise UserError("labels must be 0/1 (1 = closed-book answer incorrect)", setting="labels",
                        fix="pass booleans or 0/1 integers")
    return s, y.astype(np.int64)


def auroc(scores, labels) -> float:
    """AUROC of `scores` for `labels`, on ranks so the estimators' +/-inf fallbacks are allowed;
    one class only -> NaN."""
    s, y = _scores_labels(scores, labels)
    if np.unique(y).size < 2:
        return float("nan")
    return float(roc_auc_score(y, rankdata(s)))


def _auroc_rows(ranks_matrix: np.ndarray, y_matrix: np.ndarray) -> np.ndarray:
    # Mann-Whitney form, one AUROC per row (ties get average ranks, as in sklearn).
    n1 = y_matrix.sum(axis=1)
    n0 = y_matrix.shape[1] - n1
    r1 = (ranks_matrix * y_matrix).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (r1 - n1 * (n1 + 1) / 2) / (n1 * n0)


def auroc_ci(scores, labels, n_boot: int = 1000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float]:
    """(AUROC, lower, upper): percentile bootstrap, one-class resamples dropped; n_boot 0: NaN bounds."""
    s, y = _scores_labels(scores, labels)
    point = auroc(s, y)
    if n_boot <= 0 or np.isnan(point):
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, s.size, size=(n_boot, s.size))
    ranks = rankdata(s[idx], axis=1)
    boots = _auroc_rows(ranks, y[idx])
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        return point, float("nan"), float("nan")
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(boots, [tail, 100 - tail])
    return point, float(lo), float(hi)


def estimator_aurocs(scores: Mapping[str, Sequence[float]], incorrect,
                     higher_is_more_uncertain: Mapping[str, bool] | None = None,
                     n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The estimator table (AUROC and bootstrap interval); a False flag (energy) negates first."""
    flags = higher_is_more_uncertain or {}
    rows = []
    for name, vals in scores.items():
        v = np.asarray(vals, dtype=np.float64)
        v = v if flags.get(name, True) else -v
        a, lo, hi = auroc_ci(v, incorrect, n_boot=n_boot, seed=seed)
        rows.append({"estimator": name, "auroc": a, "lo": lo, "hi": hi, "n": v.size})
    return pd.DataFrame(rows, columns=["estimator", "auroc", "lo", "hi", "n"])


# ---------------------------------------------------------------------- Figure 3: k and layer
def _per_question(vectors) -> list[np.ndarray]:
    if isinstance(vectors, np.ndarray):
        if vectors.ndim != 3:
            raise UserError(f"expected a q x k x d array, got shape {vectors.shape}",
                            setting="vectors", fix="or pass a list of k_i x d arrays")
        return list(vectors)
    return [np.asarray(v) for v in vectors]


def quality_vs_k(vectors_per_question, incorrect, ks: Sequence[int], alpha: float = 1e-3,
                 variant: str = "seakr", n_boot: int = 0, seed: int = 0) -> pd.DataFrame:
    """AUROC of eigen_score on the first k vectors (non-empty samples, in sampling order) of each
    question, per k in `ks`; a question with fewer uses all it has (`n_short`), as U(c) does."""
    qs = _per_question(vectors_per_question)
    y = np.asarray(incorrect)
    if len(qs) != y.size:
        raise UserError(f"{len(qs)} questions of vectors but {y.size} labels",
                        setting="incorrect", fix="pass one label per question")
    rows = []
    for k in ks:
        if k < 1:
            raise UserError(f"k must be >= 1, got {k}", setting="ks", fix="use k values >= 1")
        u = [eigen_score(z[:k], alpha=alpha, variant=variant) for z in qs]
        a, lo, hi = auroc_ci(u, y, n_boot=n_boot, seed=seed)
        rows.append({"k": int(k), "auroc": a, "lo": lo, "hi": hi,
                     "n_short": sum(len(z) < k for z in qs), "n": y.size, "n_incorrect": int(y.sum())})
    return pd.DataFrame(rows, columns=["k", "auroc", "lo", "hi", "n_short", "n", "n_incorrect"])


def quality_vs_layer(vectors_by_layer, incorrect, k: int | None = None, alpha: float = 1e-3,
                     variant: str = "seakr", n_boot: int = 0, seed: int = 0) -> pd.DataFrame:
    """AUROC of eigen_score per layer of {layer: per-question vectors} (or a sequence by layer), on
    the first `k` samples; a lazy Mapping (`VectorStore.by_layer`) is held one layer at a time."""
    items = (vectors_by_layer.items() if isinstance(vectors_by_layer, Mapping)
             else enumerate(vectors_by_layer))
    rows = []
    for layer, vecs in items:
        qs = _per_question(vecs)
        del vecs
        kk = k or max((len(z) for z in qs), default=1)
        row = quality_vs_k(qs, incorrect, [kk], alpha, variant, n_boot, seed).iloc[0]
        del qs
        rows.append({"layer": int(layer), "auroc": row["auroc"], "lo": row["lo"], "hi": row["hi"],
                     "n": int(row["n"]), "n_incorrect": int(row["n_incorrect"])})
    return pd.DataFrame(rows, columns=["layer", "auroc", "lo", "hi", "n", "n_incorrect"])


# ---------------------------------------------------------------------- Figure 3: delta
def candidate_deltas(scores) -> np.ndarray:
    """Every distinct decision "U > delta": one delta below all scores (retrieve all), the
    midpoints between consecutive distinct finite scores, and the largest finite score."""
    s = np.unique(np.asarray(scores, dtype=np.float64))
    finite = s[np.isfinite(s)]
    if finite.size == 0:
        return np.array([0.0])
    mids = (finite[:-1] + finite[1:]) / 2
    return np.concatenate([[finite[0] - 1.0], mids, [finite[-1]]])


def delta_sweep(scores, correct_closed_book, deltas=None,
                correct_with_retrieval=None) -> pd.DataFrame:
    """Retrieval trade-off per threshold: acc_kept / acc_retrieved are the closed-book accuracies
    of the questions not retrieved / retrieved (empty group: NaN); acc_adaptive, given each
    question's retrieval-augmented correctness, is the adaptive system's accuracy at that delta."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    c = np.asarray(correct_closed_book).astype(bool).reshape(-1)
    _scores_labels(s, c)
    d = candidate_deltas(s) if deltas is None else np.sort(np.asarray(deltas, dtype=np.float64))
    retrieve = s[None, :] > d[:, None]                          # n_delta x n_questions
    n_ret = retrieve.sum(axis=1)
    n_keep = s.size - n_ret
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_kept = (~retrieve & c).sum(axis=1) / n_keep
        acc_ret = (retrieve & c).sum(axis=1) / n_ret
    out = pd.DataFrame({"delta": d, "retrieval_rate": n_ret / max(s.size, 1), "n": s.size,
                        "n_retrieved": n_ret, "acc_kept": acc_kept, "acc_retrieved": acc_ret,
                        "incorrect_rate_retrieved": 1.0 - acc_ret})
    if correct_with_retrieval is not None:
        r = np.asarray(correct_with_retrieval).astype(bool).reshape(-1)
        if r.shape != c.shape:
            raise UserError(f"{r.size} retrieval-augmented results for {c.size} questions",
                            setting="correct_with_retrieval", fix="pass one per question")
        out["acc_adaptive"] = np.where(retrieve, r[None, :], c[None, :]).mean(axis=1)
    return out


RULES = ("precision", "youden", "rate")


@dataclass(eq=False)
class DeltaCalibration:
    delta: float
    rule: str               # the rule asked for
    rule_used: str          # differs when the asked rule had no solution (fell back to youden)
    target: float
    target_met: bool
    retrieval_rate: float
    acc_kept: float
    incorrect_rate_retrieved: float
    youden_j: float
    n: int
    sweep: pd.DataFrame = field(repr=False)


def calibrate_delta(scores, correct, rule: str = "precision", target: float = 0.8,
                    min_retrieved: int = 5) -> DeltaCalibration:
    """The retrieval threshold delta (retrieve when U > delta) of a calibration set, by rule:
    - "precision" (our reading of §5.3's delta = -6 on NQ-train, "80%"): the LOWEST delta (retrieve
      as often as possible) at which at least `target` of the retrieved questions, at least
      `min_retrieved` of them, are closed-book incorrect; no such delta -> "youden".
    - "youden": the delta maximising TPR - FPR of "U > delta" as a detector of incorrect answers
      (ties -> lowest delta). `target` is ignored.
    - "rate": the lowest delta whose retrieval rate is <= `target` (a retrieval budget).
    """
    if rule not in RULES:
        raise UserError(f"unknown calibration rule {rule!r}", setting="rule",
                        fix=f"use one of {', '.join(RULES)}")
    if not 0.0 <= target <= 1.0:
        raise UserError(f"target must lie in [0, 1], got {target}", setting="target",
                        fix="give a fraction, e.g. 0.8")
    c = np.asarray(correct).astype(bool).reshape(-1)
    if c.size == 0:
        raise UserError("the calibration set is empty", setting="scores",
                        fix="pass the scores and closed-book correctness of some questions")
    sweep = delta_sweep(scores, c)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    wrong = ~c
    retrieve = s[None, :] > sweep["delta"].to_numpy()[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = (retrieve & wrong).sum(axis=1) / wrong.sum()
        fpr = (retrieve & c).sum(axis=1) / c.sum()
    sweep["youden_j"] = np.nan_to_num(tpr, nan=0.0) - np.nan_to_num(fpr, nan=0.0)

    rule_used, ok = rule, None
    if rule == "precision":
        ok = ((sweep["incorrect_rate_retrieved"] >= target)
              & (sweep["n_retrieved"] >= min_retrieved)).to_numpy()
    elif rule == "rate":
        ok = (sweep["retrieval_rate"] <= target).to_numpy()
    if ok is not None and ok.any():
        i = int(np.flatnonzero(ok)[0])                          # deltas are sorted ascending
    else:
        if ok is not None:
            rule_used = "youden"
        i = int(np.argmax(sweep["youden_j"].to_numpy()))        # first maximum = lowest delta
    row = sweep.iloc[i]
    return DeltaCalibration(
        delta=float(row["delta"]), rule=rule, rule_used=rule_used, target=target,
        target_met=rule_used == rule, retrieval_rate=float(row["retrieval_rate"]),
        acc_kept=float(row["acc_kept"]), incorrect_rate_retrieved=float(row["incorrect_rate_retrieved"]),
        youden_j=float(row["youden_j"]), n=int(c.size), sweep=sweep)
