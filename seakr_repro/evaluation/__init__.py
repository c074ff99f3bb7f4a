"""Evaluation: answer extraction, SQuAD-style EM/F1 with aliases, bootstrap intervals."""
from .bootstrap import Interval, PairedDifference, bootstrap_ci, paired_bootstrap
from .extraction import (
    DRAGIN_REASK_TOKENS,
    MODES,
    answer_from_forced,
    dragin_answer,
    dragin_needs_reask,
    dragin_reasked,
    dragin_trim,
    extract_answer,
)
from .metrics import exact_match, f1_score, normalize_answer, per_question_scores, score_predictions

__all__ = ["Interval", "PairedDifference", "bootstrap_ci", "paired_bootstrap", "MODES",
           "answer_from_forced", "extract_answer", "DRAGIN_REASK_TOKENS", "dragin_answer",
           "dragin_needs_reask", "dragin_reasked", "dragin_trim", "exact_match", "f1_score", "normalize_answer",
           "per_question_scores", "score_predictions"]
