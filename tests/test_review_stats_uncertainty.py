"""Review fixes in jaxrank.uncertainty: laplace_bradley_terry's existence fallback at eps=0, a warning for
rankings across disconnected components, unbounded intervals of unidentified scores, int seeds as keys."""

import warnings

import jax
import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import norm

import jaxrank as jr
from jaxrank import uncertainty as U
from jaxrank.scoring.existence import AUTO_SCORE_PRIOR, NotStronglyConnectedWarning


def _map_and_cov(i, j, p, n, lam):
    """MAP of soft BT under N(0, 1/lam) and the covariance of the centred scores Q (H + lam I)^-1 Q (NumPy/SciPy)."""
    i, j, p = map(np.asarray, (i, j, p))

    def f(s):
        d = s[i] - s[j]
        return np.sum(np.logaddexp(0, -d) * p + np.logaddexp(0, d) * (1 - p)) + 0.5 * lam * s @ s

    s = minimize(f, np.zeros(n), method="BFGS", options=dict(gtol=1e-10)).x
    q = 1 / (1 + np.exp(-(s[i] - s[j])))
    h = np.zeros((n, n))
    for a, b, v in zip(i, j, q * (1 - q)):
        h[a, a] += v; h[b, b] += v; h[a, b] -= v; h[b, a] -= v
    qc = np.eye(n) - 1 / n
    return s, qc @ np.linalg.inv(h + lam * np.eye(n)) @ qc


def test_laplace_bradley_terry_at_eps0_falls_back_to_the_auto_prior_with_a_warning():
    c = jr.Comparisons.from_decisions([0, 1], [1, 2], [1, 1], num_items=3)       # a chain: no finite ML scores
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        post = jr.laplace_bradley_terry(c, eps=0.0)
    assert any(issubclass(w.category, NotStronglyConnectedWarning) and "laplace_bradley_terry" in str(w.message)
               for w in rec)
    s, cov = _map_and_cov([0, 1], [1, 2], [1.0, 1.0], 3, AUTO_SCORE_PRIOR)
    np.testing.assert_allclose(post.mean, s, atol=2e-3)
    np.testing.assert_allclose(post.stderr, np.sqrt(np.diag(cov)), rtol=2e-3)
    assert np.all(np.isfinite(np.asarray(post.covariance)))
    # a batch: only the context without finite scores falls back
    ok = jr.Comparisons.from_pairs([0, 1, 2], [1, 2, 0], [0.7, 0.6, 0.4], num_items=3)
    both = jr.stack_contexts([ok, c])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotStronglyConnectedWarning)
        pb = jr.laplace_bradley_terry(both, eps=0.0)
    s0, cov0 = _map_and_cov([0, 1, 2], [1, 2, 0], [0.7, 0.6, 0.4], 3, 0.0 + 1e-12)
    np.testing.assert_allclose(pb.mean[0], s0, atol=2e-3)
    np.testing.assert_allclose(pb.stderr[0], np.sqrt(np.diag(cov0)), rtol=2e-3)
    np.testing.assert_allclose(pb.mean[1], s, atol=2e-3)


def _two_pools():
    i, j = [0] * 20 + [2] * 20, [1] * 20 + [3] * 20
    return jr.Comparisons.from_pairs(i, j, np.float32([0.9] * 20 + [0.52] * 20), num_items=4)


def test_rank_intervals_and_ranking_confidence_warn_on_disconnected_pools():
    post = jr.laplace_bradley_terry(_two_pools())
    for call in (lambda: U.rank_intervals(post, key=0, num_samples=64),
                 lambda: U.ranking_confidence(post, key=0, num_samples=16),
                 lambda: U.ranking_confidence(post, rule="adjacent")):
        with pytest.warns(U.DisconnectedRankingWarning, match=r"2 connected components \(\[0, 1\]; \[2, 3\]\)"):
            call()
    joined = jr.Comparisons.from_pairs([0, 1, 2, 3], [1, 2, 3, 0], [0.6, 0.6, 0.6, 0.4], num_items=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # connected (item 4 unjudged): no warning
        U.rank_intervals(jr.laplace_bradley_terry(joined), key=0, num_samples=64)


def test_score_intervals_of_an_unjudged_item_are_unbounded_without_a_prior():
    c = jr.Comparisons.from_pairs([0, 1, 2, 0], [1, 2, 0, 2], [0.7, 0.6, 0.3, 0.8], num_items=4)
    lo, hi = U.score_intervals(jr.laplace_bradley_terry(c))
    assert lo[3] == -np.inf and hi[3] == np.inf
    s, cov = _map_and_cov([0, 1, 2, 0], [1, 2, 0, 2], [0.7, 0.6, 0.3, 0.8], 3, 1e-12)
    s = s - s.mean()
    z = norm.ppf(0.975)
    np.testing.assert_allclose(lo[:3], s - z * np.sqrt(np.diag(cov)), atol=3e-3)
    np.testing.assert_allclose(hi[:3], s + z * np.sqrt(np.diag(cov)), atol=3e-3)
    lo, hi = U.score_intervals(jr.laplace_bradley_terry(c, score_prior=0.25))    # the prior's interval
    np.testing.assert_allclose([lo[3], hi[3]], [-z / 0.5, z / 0.5], rtol=1e-5)
    padded = jr.stack_contexts([c, jr.Comparisons.from_pairs([0], [1], [0.7], num_items=4)])
    lo, hi = U.score_intervals(jr.laplace_bradley_terry(padded))
    assert np.isinf(lo[1, 2]) and np.isinf(hi[1, 3])    # real items of the second context in no comparison


def test_int_seeds_are_keys_everywhere_and_bad_keys_name_key():
    c = jr.Comparisons.from_pairs([0, 1, 2, 0], [1, 2, 0, 2], [0.7, 0.6, 0.3, 0.8], num_items=3)
    post = jr.laplace_bradley_terry(c)
    k = jax.random.key(5)
    np.testing.assert_array_equal(U.posterior_samples(post, key=5, num_samples=3),
                                  U.posterior_samples(post, key=k, num_samples=3))
    np.testing.assert_array_equal(U.rank_intervals(post, key=5, num_samples=32).mean,
                                  U.rank_intervals(post, key=k, num_samples=32).mean)
    assert U.ranking_confidence(post, key=5) == U.ranking_confidence(post, key=k)
    np.testing.assert_array_equal(U.laplace_posterior(c, covariance="diagonal", key=5).posterior.variance,
                                  U.laplace_posterior(c, covariance="diagonal", key=k).posterior.variance)
    for call in (lambda key: U.posterior_samples(post, key=key, num_samples=3),
                 lambda key: U.rank_intervals(post, key=key),
                 lambda key: U.ranking_confidence(post, key=key),
                 lambda key: U.laplace_posterior(c, covariance="diagonal", key=key)):
        with pytest.raises(ValueError, match="key must be"):
            call("seven")
