import math

import numpy as np
import pytest
from scipy.linalg import hadamard

from seakr_repro.core.errors import UserError
from seakr_repro.llm.base import Generation, SampleSet
from seakr_repro.uncertainty import (
    EMPTY_FALLBACK,
    eigen_score,
    gram_matrix,
    identical_vectors_score,
    u_from_sampleset,
)

ALPHA = 1e-3


def test_identical_vectors_closed_form():
    # Sigma = s 11^T, eigenvalues k s and 0 (k-1 times): U = ((k-1) ln a + ln(a + k s)) / k.
    z = np.array([0.5, -1.0, 2.0, 3.5])
    s = float(((z - z.mean()) ** 2).sum())
    assert s == 11.25                                 # deviations +-0.75, +-2.25
    for k in (1, 2, 20):
        want = ((k - 1) * math.log(ALPHA) + math.log(ALPHA + k * s)) / k
        assert eigen_score(np.tile(z, (k, 1)), ALPHA) == pytest.approx(want, rel=1e-12)
        assert identical_vectors_score(k, s, ALPHA) == pytest.approx(want, rel=1e-12)
    # k = 20 identical vectors sit just above ((k-1)/k) ln alpha = -6.56, as the facts say.
    u20 = eigen_score(np.tile(z, (20, 1)))
    assert u20 == pytest.approx(0.95 * math.log(1e-3) + math.log(1e-3 + 20 * 11.25) / 20)
    assert -6.57 < 0.95 * math.log(1e-3) < u20 < -6.2


def test_orthogonal_centred_vectors():
    # Rows 1..k of a Hadamard matrix: zero mean, mutually orthogonal, ||z||^2 = d -> Sigma = d I.
    d, k = 16, 5
    z = hadamard(d)[1:k + 1].astype(float)
    assert eigen_score(z, ALPHA) == pytest.approx(math.log(d + ALPHA), rel=1e-12)
    assert eigen_score(z, ALPHA, "inside") == pytest.approx(math.log10(d / (d - 1) + ALPHA),
                                                            rel=1e-12)


def test_centring_is_per_vector_across_its_dimensions():
    # J_d removes each vector's own mean: adding a different constant to each row changes nothing,
    # while centring across samples (the usual covariance) would.
    rng = np.random.default_rng(0)
    z = rng.normal(size=(6, 32))
    shifted = z + rng.normal(size=(6, 1)) * 10
    assert eigen_score(shifted) == pytest.approx(eigen_score(z), rel=1e-10)
    zc = z - z.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(gram_matrix(z), zc @ zc.T, rtol=1e-12)


def test_matches_explicit_formula_and_no_normalisation():
    rng = np.random.default_rng(1)
    k, d = 7, 40
    z = rng.normal(size=(k, d)) * 3
    j = np.eye(d) - np.ones((d, d)) / d
    sigma = z @ j @ z.T
    want = np.linalg.slogdet(sigma + ALPHA * np.eye(k))[1] / k
    assert eigen_score(z) == pytest.approx(want, rel=1e-10)
    # no L2 normalisation: scaling the vectors moves the score
    assert eigen_score(2 * z) > eigen_score(z) + 1.0
    # INSIDE: torch.cov(Z) = Z J Z^T / (d-1), log10
    want_inside = np.mean(np.log10(np.linalg.svd(np.cov(z) + ALPHA * np.eye(k))[1]))
    assert eigen_score(z, variant="inside") == pytest.approx(want_inside, rel=1e-10)


def test_k_greater_than_d_zero_vectors_and_float16():
    rng = np.random.default_rng(2)
    z = rng.normal(size=(30, 4))                       # rank <= d - 1 = 3 after centring
    u = eigen_score(z)
    eig = np.clip(np.linalg.eigvalsh(gram_matrix(z)), 0, None)
    assert math.isfinite(u) and u == pytest.approx(np.mean(np.log(eig + ALPHA)))
    assert eigen_score(np.zeros((5, 8))) == pytest.approx(math.log(ALPHA))
    z16 = rng.normal(size=(5, 64)).astype(np.float16)
    assert eigen_score(z16) == pytest.approx(eigen_score(z16.astype(np.float64)), rel=1e-12)
    assert math.isfinite(eigen_score(z16 * np.float16(200)))   # no float16 overflow inside


def test_empty_single_and_bad_input():
    assert eigen_score(np.zeros((0, 8))) == EMPTY_FALLBACK == 0.0
    assert eigen_score([]) == 0.0
    z = np.array([[1.0, 2.0, 4.0]])
    assert eigen_score(z) == pytest.approx(math.log(ALPHA + ((z - z.mean()) ** 2).sum()))
    with pytest.raises(UserError, match="k x d"):
        eigen_score(np.ones(5))
    with pytest.raises(UserError, match="NaN"):
        eigen_score([[1.0, np.nan]])
    with pytest.raises(UserError, match="alpha"):
        eigen_score(z, alpha=0)
    with pytest.raises(UserError, match="variant"):
        eigen_score(z, variant="cov")
    with pytest.raises(UserError, match="d - 1"):
        eigen_score([[1.0], [2.0]], variant="inside")


def test_u_from_sampleset_uses_only_nonempty_samples():
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(4, 10)).astype(np.float32)
    texts = ["Paris.", "  ", "Paris is.", ""]
    ss = SampleSet([Generation(t) for t in texts], vecs, layer=15, hook="mlp_out")
    assert u_from_sampleset(ss) == pytest.approx(eigen_score(vecs[[0, 2]]))
    empty = SampleSet([Generation(""), Generation(" ")], vecs[:2], layer=15, hook="mlp_out")
    assert u_from_sampleset(empty) == 0.0
