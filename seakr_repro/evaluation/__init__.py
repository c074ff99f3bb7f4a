"""Evaluation: answer extraction, SQuAD-style EM/F1 with aliases, bootstrap intervals."""
from .bootstrap import Interval, PairedDifference, bootstrap_ci, paired_bootstrap
from .extraction import MODES, answer_from_forced, extract_answer
from .metrics import (exact_match, f1_score, normalize_answer, per_question_scores,
                      score_predictions)

__all__ = ["Interval", "PairedDifference", "bootstrap_ci", "paired_bootstrap", "MODES",
           "answer_from_forced", "extract_answer", "exact_match", "f1_score", "normalize_answer",
           "per_question_scores", "score_predictions"]
