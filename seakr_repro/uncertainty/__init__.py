"""Uncertainty estimators of SeaKR and its ablation, and the analysis behind Figure 3.

Every estimator carries `higher_is_more_uncertain`; `oriented()` makes them comparable.
`registry` declares each estimator of U(c) once; methods and steps 02/03 score through it.
"""
from .analysis import (
    DeltaCalibration,
    auroc,
    auroc_ci,
    calibrate_delta,
    delta_sweep,
    estimator_aurocs,
    quality_vs_k,
    quality_vs_layer,
)
from .eigenscore import EMPTY_FALLBACK, eigen_score, gram_matrix, identical_vectors_score, u_from_sampleset
from .logit_estimators import content_logprobs, energy, ln_entropy, multi_perplexity, oriented, perplexity
from .prompt_estimator import PromptJudgement, build_prompt, judge, prompt_uncertainty

__all__ = [
    "DeltaCalibration", "EMPTY_FALLBACK", "PromptJudgement", "auroc", "auroc_ci", "build_prompt",
    "calibrate_delta", "content_logprobs", "delta_sweep", "eigen_score", "energy",
    "estimator_aurocs", "gram_matrix", "identical_vectors_score", "judge", "ln_entropy",
    "multi_perplexity", "oriented", "perplexity", "prompt_uncertainty",
    "quality_vs_k", "quality_vs_layer", "u_from_sampleset",
]
