"""Percentile-bootstrap confidence intervals over questions.

The interval is the (1-c)/2 and (1+c)/2 quantiles of the resampled means; indices are drawn in
fixed-size blocks so memory stays bounded while the result depends only on `seed`.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..core.errors import UserError

_BLOCK_CELLS = 2_000_000  # indices drawn per block (16 MB of int64)


class Interval(NamedTuple):
    mean: float
    low: float
    high: float


class PairedDifference(NamedTuple):
    diff: float      # mean(a) - mean(b)
    low: float
    high: float
    p_value: float   # two-sided: 2 * min(P*(d <= 0), P*(d >= 0)), capped at 1


def _as_scores(scores: Sequence[float], name: str = "scores") -> np.ndarray:
    arr = np.asarray(scores, dtype=float).ravel()
    if arr.size == 0:
        raise UserError(f"no {name} to bootstrap", fix="run the method on at least one question")
    if not np.all(np.isfinite(arr)):
        raise UserError(f"{name} contain NaN or infinite values",
                        fix="score every question (a missing answer scores 0, not NaN)")
    return arr


def _check(n_boot: int, confidence: float) -> None:
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 1):
        raise UserError(f"n_boot must be a positive integer, got {n_boot!r}",
                        setting="evaluation.bootstrap_samples", fix="use e.g. 1000")
    if not 0 < confidence < 1:
        raise UserError(f"confidence must lie strictly between 0 and 1, got {confidence!r}",
                        setting="evaluation.confidence", fix="use e.g. 0.95")


def _resampled_means(arr: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = arr.size
    rows = max(1, _BLOCK_CELLS // n)
    means = np.empty(n_boot)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = arr[idx].mean(axis=1)
    return means


def _bounds(means: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_ci(scores: Sequence[float], n_boot: int = 1000, confidence: float = 0.95,
                 seed: int = 0) -> Interval:
    """(mean, low, high) of per-question scores; deterministic for a given seed."""
    _check(n_boot, confidence)
    arr = _as_scores(scores)
    low, high = _bounds(_resampled_means(arr, n_boot, seed), confidence)
    return Interval(float(arr.mean()), low, high)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 1000,
                     confidence: float = 0.95, seed: int = 0) -> PairedDifference:
    """Bootstrap of mean(a) - mean(b) over the per-question differences of two methods scored on the
    same questions, in order: the pairing is kept, so question difficulty cancels."""
    _check(n_boot, confidence)
    a_arr, b_arr = _as_scores(a, "scores of method a"), _as_scores(b, "scores of method b")
    if a_arr.size != b_arr.size:
        raise UserError(f"paired bootstrap needs the same questions: {a_arr.size} vs {b_arr.size} scores",
                        fix="restrict both methods to the questions both have answered, in the same order")
    d = a_arr - b_arr
    means = _resampled_means(d, n_boot, seed)
    low, high = _bounds(means, confidence)
    p = min(1.0, 2 * min(np.mean(means <= 0), np.mean(means >= 0)))
    return PairedDifference(float(d.mean()), low, high, float(p))
