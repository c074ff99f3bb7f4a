"""SeaKR's self-aware uncertainty U(c): the regularised Gram log-determinant of k EOS vectors.

For Z, the k x d matrix of forced-EOS vectors of k samples of one context (SEAKR_REFERENCE_FACTS.md):

    J_d   = I_d - (1/d) 1 1^T          centres each vector across its OWN d dimensions
    Sigma = Z J_d Z^T                   k x k; no 1/(d-1), no L2 normalisation
    U     = (1/k) ln det(Sigma + alpha I_k),  alpha = 1e-3, natural log

`variant="inside"` is INSIDE's code: `torch.cov(Z)` (the same row centring, divided by d - 1), then
`mean(log10(svd(C + alpha I)))` = (1/k) log10 det(Z J_d Z^T / (d-1) + alpha I_k).

Numerics: float64 whatever the input dtype (the official code: float32); Sigma's eigenvalues are
clipped at 0 before adding alpha, which keeps U finite for k > d, zero and identical vectors.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.errors import UserError

OFFICIAL_DELTA = -6.0   # SeaKR's threshold on U for LLaMA-2-7B-chat (§5.3, the official scripts)

VARIANTS = ("seakr", "inside")

# The official code sets U = 0 when no sample with non-empty text remains. 0 is far above any
# threshold in use (U >= ((k-1)/k) ln alpha ~ -6.56 for k = 20), so it means "uncertain: retrieve".
EMPTY_FALLBACK = 0.0


def _as_matrix(embeddings) -> np.ndarray:
    z = np.asarray(embeddings)
    if z.size == 0:
        return np.zeros((0, z.shape[-1] if z.ndim == 2 else 0))
    if z.ndim != 2:
        raise UserError(f"eigen_score needs a k x d array of vectors, got shape {z.shape}",
                        fix="pass one row per sample, e.g. SampleSet.nonempty_vectors; "
                            "wrap a single vector as v[None, :]", setting="embeddings")
    if not np.issubdtype(z.dtype, np.number):
        raise UserError(f"eigen_score needs numeric vectors, got dtype {z.dtype}",
                        setting="embeddings", fix="pass a float array")
    z = z.astype(np.float64)
    if not np.isfinite(z).all():
        raise UserError("the EOS vectors contain NaN or inf, so U(c) is undefined",
                        setting="embeddings",
                        fix="run the model in float32 or bfloat16 rather than float16 (overflow), "
                            "and check that padding positions are not read as sample states")
    return z


def gram_matrix(embeddings, variant: str = "seakr") -> np.ndarray:
    """Sigma = Z J_d Z^T (variant "seakr") or Z J_d Z^T / (d-1) (variant "inside"), in float64."""
    _check_variant(variant)
    z = _as_matrix(embeddings)
    if z.shape[0] == 0:
        return np.zeros((0, 0))
    zc = z - z.mean(axis=1, keepdims=True)          # Z J_d without forming the d x d matrix
    sigma = zc @ zc.T
    if variant == "inside":
        d = z.shape[1]
        if d < 2:
            raise UserError("INSIDE's covariance divides by d - 1, so it needs vectors of "
                            f"dimension >= 2 (got d = {d})", setting="variant",
                            fix='use variant="seakr" or pass the full hidden vectors')
        sigma = sigma / (d - 1)
    return sigma


def eigen_score(embeddings, alpha: float = 1e-3, variant: str = "seakr") -> float:
    """U for a k x d array of vectors (module doc); k = 0 (no non-empty sample): EMPTY_FALLBACK."""
    _check_variant(variant)
    if not (isinstance(alpha, (int, float, np.floating)) and alpha > 0 and math.isfinite(alpha)):
        raise UserError(f"alpha must be a positive finite number, got {alpha!r}", setting="alpha",
                        fix="use the paper's alpha = 1e-3 (alpha > 0 keeps the log-det finite)")
    sigma = gram_matrix(embeddings, variant)
    k = sigma.shape[0]
    if k == 0:
        return EMPTY_FALLBACK
    eig = np.clip(np.linalg.eigvalsh(sigma), 0.0, None)   # PSD: negatives are rounding error
    logs = np.log(eig + alpha)
    if variant == "inside":
        logs = logs / math.log(10.0)
    return float(logs.mean())


eigen_score.higher_is_more_uncertain = True


def identical_vectors_score(k: int, spread: float, alpha: float = 1e-3) -> float:
    """U of k identical vectors z with spread s = ||z - mean(z) 1||^2: Sigma = s 1 1^T has
    eigenvalues k s (once) and 0 (k - 1 times), so U = ((k-1)/k) ln alpha + (1/k) ln(alpha + k s).
    The first term (about -6.56 for k = 20) is why delta = -6 means "all samples agree"."""
    if k < 1 or spread < 0:
        raise UserError(f"need k >= 1 and spread >= 0, got k={k}, spread={spread}",
                        setting="k", fix="use k >= 1 samples and a squared norm")
    return ((k - 1) * math.log(alpha) + math.log(alpha + k * spread)) / k


def u_from_sampleset(sampleset, alpha: float = 1e-3, variant: str = "seakr") -> float:
    """U(c) from a `SampleSet`'s samples with non-empty text (as the official code)."""
    return eigen_score(sampleset.nonempty_vectors, alpha=alpha, variant=variant)


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise UserError(f"unknown EigenScore variant {variant!r}", setting="variant",
                        fix=f"use one of {', '.join(VARIANTS)}")
