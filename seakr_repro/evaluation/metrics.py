"""Answer scoring: SQuAD normalisation, exact match and token F1 with aliases.

As the HotpotQA/DRAGIN script SeaKR's numbers come from: the maximum over all golds (answers and
aliases); F1 is 0 when either side normalises to yes/no/noanswer and the two differ.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from ..core.errors import UserError
from .bootstrap import bootstrap_ci

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(s: str | None) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, squeeze whitespace (SQuAD order)."""
    s = (s or "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _as_golds(golds: str | Iterable[str]) -> list[str]:
    # A bare string would otherwise be iterated character by character and score nonsense.
    out = [golds] if isinstance(golds, str) else [g for g in golds if g is not None]
    if not out:
        raise UserError("a question has no gold answer, so it cannot be scored",
                        fix="drop questions without answers when loading the data set "
                            "(DRAGIN's loaders skip IIRC questions whose answer is 'none')")
    return [str(g) for g in out]


def _f1_single(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in _SPECIAL or g in _SPECIAL) and p != g:
        return 0.0
    common = Counter(p.split()) & Counter(g.split())
    same = sum(common.values())
    if same == 0:  # also covers an empty side, as in the SQuAD v1.1 / HotpotQA scripts
        return 0.0
    precision, recall = same / len(p.split()), same / len(g.split())
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction (None: "") equals any normalised gold (answer or alias; a bare
    string is one gold; none at all is a UserError, as a silent 0 would bias the mean), else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_golds(golds)))


def f1_score(prediction: str | None, golds: str | Iterable[str]) -> float:
    """Maximum token F1 over the golds, in [0, 1], with the yes/no/noanswer rule (module doc)."""
    pred = prediction or ""
    return max(_f1_single(pred, g) for g in _as_golds(golds))


def per_question_scores(predictions: Sequence[str | None],
                        golds_list: Sequence[str | Iterable[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(em, f1) arrays in [0, 1], one entry per question, for bootstraps and paired tests."""
    if len(predictions) != len(golds_list):
        raise UserError(f"{len(predictions)} predictions but {len(golds_list)} gold answer lists",
                        fix="score the predictions of exactly the questions that were run, in order")
    em = np.array([exact_match(p, g) for p, g in zip(predictions, golds_list)], dtype=float)
    f1 = np.array([f1_score(p, g) for p, g in zip(predictions, golds_list)], dtype=float)
    return em, f1


def score_predictions(predictions: Sequence[str | None], golds_list: Sequence[str | Iterable[str]],
                      n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """{"n", "em", "em_low", "em_high", "f1", "f1_low", "f1_high"}: mean EM and F1 in percent (as the
    paper) with percentile-bootstrap intervals over questions."""
    em, f1 = per_question_scores(predictions, golds_list)
    out: dict = {"n": int(len(em))}
    for name, arr in (("em", em), ("f1", f1)):
        mean, low, high = bootstrap_ci(arr, n_boot=n_boot, confidence=confidence, seed=seed)
        out.update({name: 100 * mean, f"{name}_low": 100 * low, f"{name}_high": 100 * high})
    return out
