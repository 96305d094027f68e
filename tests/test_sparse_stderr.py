"""Laplace standard errors without a dense covariance (issue 14): ``laplace_posterior(covariance="diagonal")``.

The Hutchinson estimate of ``diag(H^+)`` is compared with the pseudo-inverse of
the Hessian built independently in NumPy (float64) from the fitted scores
(soft BT: ``L(w q (1 - q))``, with the Schur complement of a learnt ``gamma``),
and the lowered programs of large pools are searched for an ``[N, N]`` value.
No timing is asserted.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit

import jaxrank as jr
from jaxrank.scoring import experts


def _pool(n, per_item=10, seed=0):
    rng = np.random.default_rng(seed)
    r = per_item * n
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    s = rng.normal(size=n)
    p = expit(s[i] - s[j] + 0.3).astype(np.float32)
    return i, j, p


def _numpy_variances(i, j, w, scores, gamma, n, learn):
    """``diag`` of the score covariance: the pseudo-inverse of the (Schur-complemented) soft-BT Hessian."""
    q = expit(scores[i] - scores[j] - gamma)
    h = w * q * (1 - q)
    lap = np.zeros((n, n))
    np.add.at(lap, (i, i), h)
    np.add.at(lap, (j, j), h)
    np.add.at(lap, (i, j), -h)
    np.add.at(lap, (j, i), -h)
    if learn:
        cross = -(np.bincount(i, h, n) - np.bincount(j, h, n))
        lap = lap - np.outer(cross, cross) / (h.sum() + 1e-6)
    return np.diag(np.linalg.pinv(lap, hermitian=True))


@pytest.mark.parametrize("debias", [False, "learn"])
def test_diagonal_matches_numpy_pinv_on_a_medium_pool(debias):
    n = 600                                   # above CG_MIN_ITEMS: the sparse Newton path too
    i, j, p = _pool(n)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    fit = jr.laplace_posterior(c, jr.BradleyTerrySolver(debias=debias), covariance="diagonal")
    assert isinstance(fit.posterior, jr.MarginalPosterior)
    ref = _numpy_variances(i, j, np.ones(len(i)), np.asarray(fit.solution.scores, float),
                           float(fit.solution.gamma), n, debias == "learn")
    rel = np.asarray(fit.posterior.variance, float) / ref - 1
    # Hutchinson, 64 probes, ~20 comparisons per item: 1/sqrt(d K) ~ 0.03 per variance
    assert np.median(np.abs(rel)) < 0.05
    assert np.max(np.abs(rel)) < 0.25
    se_rel = np.asarray(fit.posterior.stderr, float) / np.sqrt(ref) - 1
    assert np.max(np.abs(se_rel)) < 0.12
    assert np.all(np.isfinite(np.asarray(fit.posterior.variance)))


def test_estimate_converges_with_probes_and_keeps_padding_zero():
    n = 40
    i, j, p = _pool(n, per_item=4, seed=3)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n + 2)       # two items in no comparison
    fit = jr.laplace_posterior(c, covariance="diagonal", num_probes=4096, key=jax.random.key(7))
    ref = _numpy_variances(i, j, np.ones(len(i)), np.asarray(fit.solution.scores, float)[:n], 0.0, n, False)
    var = np.asarray(fit.posterior.variance, float)
    np.testing.assert_allclose(var[:n], ref, rtol=0.06)
    assert np.all(var[n:] == 0)


def test_jit_batch_and_auto_agree_with_dense_on_small_pools():
    n = 50
    cs = [jr.Comparisons.from_pairs(*_pool(n, per_item=6, seed=k), num_items=n) for k in range(2)]
    c = jr.stack_contexts(cs)
    dense = jr.laplace_posterior(c, covariance="auto").posterior      # small: dense
    assert isinstance(dense, jr.GaussianPosterior)
    diag = jax.jit(lambda cc: jr.laplace_posterior(cc, covariance="diagonal", num_probes=2048).posterior)(c)
    np.testing.assert_allclose(np.asarray(diag.variance), np.diagonal(np.asarray(dense.covariance), axis1=-2,
                                                                      axis2=-1), rtol=0.1)


def test_general_expert_with_a_learnt_parameter():
    n = 30
    i, j, p = _pool(n, per_item=6, seed=5)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    solver = jr.ProductOfExpertsSolver(experts.soft_bradley_terry(debias="learn"))
    dense = jr.laplace_posterior(c, solver, covariance="dense").posterior
    diag = jr.laplace_posterior(c, solver, covariance="diagonal", num_probes=4096).posterior
    np.testing.assert_allclose(np.asarray(diag.variance), np.diag(np.asarray(dense.covariance)), rtol=0.06)


def test_large_pool_program_has_no_item_by_item_value():
    n = 3000                                   # above DENSE_COVARIANCE_MAX_ITEMS
    i, j, p = _pool(n)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    fn = lambda cc: jr.laplace_posterior(cc, jr.BradleyTerrySolver(debias="learn"), covariance="auto").posterior
    text = jax.jit(fn).lower(c).as_text()
    assert f"{n}x{n}" not in text
    assert isinstance(jax.eval_shape(fn, c), jr.MarginalPosterior)


def test_bad_options_and_marginal_only_uses_raise():
    i, j, p = _pool(20, per_item=3)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=20)
    with pytest.raises(ValueError, match="covariance"):
        jr.laplace_posterior(c, covariance="sparse")
    with pytest.raises(ValueError, match="num_probes"):
        jr.laplace_posterior(c, covariance="diagonal", num_probes=0)
    post = jr.laplace_posterior(c, covariance="diagonal").posterior
    lo, hi = jr.uncertainty.score_intervals(post, level=0.9)
    np.testing.assert_allclose(np.asarray(hi - lo), 2 * 1.6448536 * np.asarray(post.stderr), rtol=1e-5)
    with pytest.raises(ValueError, match="covariance='dense'"):
        jr.uncertainty.rank_intervals(post, key=jax.random.key(0))


def _numpy_gaussian_variances(i, j, w, n):
    """``diag((W^T D W)^+)``: PoE-g's covariance (PoE eq. 8), from a NumPy Laplacian and ``pinv``."""
    lap = np.zeros((n, n))
    np.add.at(lap, (i, i), w)
    np.add.at(lap, (j, j), w)
    np.add.at(lap, (i, j), -w)
    np.add.at(lap, (j, i), -w)
    return np.diag(np.linalg.pinv(lap, hermitian=True))


@pytest.mark.parametrize("hard", [False, True])
def test_poe_gaussian_marginals_match_numpy_pinv_on_a_medium_pool(hard):
    n = 600                                   # above CG_MIN_ITEMS: PoE-g's mean by CG too
    i, j, p = _pool(n, seed=11)
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(i)).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    post = jr.poe_gaussian_posterior(c, hard=hard, covariance="diagonal")
    assert isinstance(post, jr.MarginalPosterior)
    np.testing.assert_allclose(np.asarray(post.mean), np.asarray(jr.poe_gaussian(c, hard=hard)), atol=1e-5)
    ref = _numpy_gaussian_variances(i, j, w.astype(float), n)
    rel = np.asarray(post.variance, float) / ref - 1
    assert np.median(np.abs(rel)) < 0.05        # 64 probes, ~20 comparisons per item: 1/sqrt(d K) ~ 0.03
    assert np.max(np.abs(rel)) < 0.25


def test_poe_gaussian_auto_is_dense_when_small_and_diagonal_agrees_with_it_under_jit():
    n = 40
    i, j, p = _pool(n, per_item=5, seed=4)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n + 1)       # one item in no comparison
    dense = jr.poe_gaussian_posterior(c, covariance="auto")
    assert isinstance(dense, jr.GaussianPosterior)
    diag = jax.jit(lambda cc: jr.poe_gaussian_posterior(cc, covariance="diagonal", num_probes=4096))(c)
    np.testing.assert_allclose(np.asarray(diag.variance)[:n], np.diag(np.asarray(dense.covariance))[:n], rtol=0.06)
    assert float(diag.variance[n]) == 0.0


def test_poe_gaussian_large_pool_program_has_no_item_by_item_value_and_bad_options_raise():
    n = 3000                                   # above DENSE_COVARIANCE_MAX_ITEMS
    i, j, p = _pool(n)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    fn = lambda cc: jr.poe_gaussian_posterior(cc, covariance="auto")
    assert f"{n}x{n}" not in jax.jit(fn).lower(c).as_text()
    assert isinstance(jax.eval_shape(fn, c), jr.MarginalPosterior)
    with pytest.raises(ValueError, match="covariance"):
        jr.poe_gaussian_posterior(c, covariance="sparse")
    with pytest.raises(ValueError, match="num_probes"):
        jr.poe_gaussian_posterior(c, covariance="diagonal", num_probes=0)
