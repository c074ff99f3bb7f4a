"""The output-space estimators of the paper's ablation (Table 3), on the returned text's tokens'
natural-log probabilities, EOS excluded (the official engine's variants are in `registry`).
Each carries `higher_is_more_uncertain`; `oriented` flips the ones where higher = MORE confident.
Empty input (no generated token, or no non-empty sample) returns the estimator's UNCERTAIN end:
+inf for perplexity / multi-perplexity / LN-entropy, -inf for energy (code sign). This mirrors
SeaKR, where an empty step always triggers retrieval and an empty candidate ranks last.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..core.errors import UserError


def _direction(higher_is_more_uncertain: bool) -> Callable:
    def mark(fn):
        fn.higher_is_more_uncertain = higher_is_more_uncertain
        return fn
    return mark


def _vector(values, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if np.isnan(arr).any():
        raise UserError(f"{what} contain NaN", setting=what,
                        fix="check the backend's log-probabilities (float16 overflow?)")
    return arr


def content_logprobs(generation, eos_token_id: int | None = None) -> list[float]:
    """Log-probs of a Generation's tokens with any EOS token removed (the code excludes EOS)."""
    if eos_token_id is None or not generation.token_ids:
        return list(generation.logprobs)
    return [lp for tid, lp in zip(generation.token_ids, generation.logprobs) if tid != eos_token_id]


@_direction(True)
def perplexity(logprobs: Sequence[float]) -> float:
    """exp(-mean log p) over the generated tokens (EOS excluded)."""
    lp = _vector(logprobs, "logprobs")
    if lp.size == 0:
        return math.inf
    return float(np.exp(-lp.mean()))


@_direction(True)
def multi_perplexity(samples: Sequence[Sequence[float]]) -> float:
    """Mean perplexity of k samples, empty ones skipped (as U(c) skips them)."""
    ppl = [perplexity(s) for s in samples if len(s)]
    return float(np.mean(ppl)) if ppl else math.inf


@_direction(True)
def ln_entropy(samples: Sequence[Sequence[float]]) -> float:
    """Length-normalised entropy (Malinin & Gales 2020): -(1/k) sum_i (1/T_i) sum_t log p(y_it),
    empty samples skipped."""
    per = [-_vector(s, "logprobs").mean() for s in samples if len(s)]
    return float(np.mean(per)) if per else math.inf


@_direction(False)
def energy(logsumexp_per_token: Sequence[float]) -> float:
    """Mean over generated tokens of logsumexp(raw logits), with the official code's sign: Liu et
    al.'s energy is E = -logsumexp(f), the code keeps NEGATIVE energy, so higher = MORE CONFIDENT."""
    v = _vector(logsumexp_per_token, "logsumexp values")
    if v.size == 0:
        return -math.inf
    return float(v.mean())


def oriented(value, estimator) -> float | np.ndarray:
    """`value` (scalar or array) with higher = more uncertain for `estimator` (or its flag itself)."""
    flag = estimator if isinstance(estimator, bool) else getattr(estimator, "higher_is_more_uncertain", None)
    if flag is None:
        raise UserError(f"{estimator!r} does not declare higher_is_more_uncertain",
                        fix="pass an estimator from seakr_repro.uncertainty or a bool")
    arr = np.asarray(value, dtype=np.float64)
    out = arr if flag else -arr
    return float(out) if out.ndim == 0 else out
