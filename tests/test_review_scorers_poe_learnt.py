"""Review: the general PoE solver's learnt parameters where only their prior fixes them (float32).

A learnt bias on a tree of comparisons (one per pair) is unidentified: the data fit every value, and the
weak prior (theta_prior = 1e-6) alone puts it at its prior mean. Its Schur complement ``1e-6`` was the
float32 difference of two numbers ``~5`` (``H_bb - H_bs H_ss^-1 H_sb``): the bias came out anywhere
(3e-8 eagerly, 0.25 under jit, against 0.5) with a successful result. Yardstick: the float64 least-squares
solution of the same quadratic objective (NumPy's ``lstsq``, its minimum-norm i.e. centred scores).
"""

import jax
import numpy as np
import pytest

import jaxrank as jr
from jaxrank.scoring import experts


def _reference(i, j, p, w, n, alpha, beta0, sigma, theta_prior):
    """argmin sum_k w_k / (2 sigma^2) (s_i - s_j - alpha (p_k - beta))^2 + theta_prior / 2 (beta - beta0)^2."""
    rows, rhs = [], []
    for a, b, pk, wk in zip(i, j, p, w):
        row = np.zeros(n + 1)
        row[a], row[b], row[n] = 1.0, -1.0, alpha
        rows.append(np.sqrt(wk) / sigma * row)
        rhs.append(np.sqrt(wk) / sigma * alpha * pk)
    prior = np.zeros(n + 1)
    prior[n] = np.sqrt(theta_prior)
    rows.append(prior)
    rhs.append(np.sqrt(theta_prior) * beta0)
    x = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
    s = x[:n] - x[:n].mean()
    return s, x[n]


@pytest.mark.parametrize("alpha,beta0,sigma,extra,uniform", [(1.0, 0.5, 1.0, False, True),
                                                              (3.0, 0.3, 0.7, False, False),
                                                              (2.0, 0.5, 1.0, True, False)])
def test_learnt_bias_fixed_only_by_its_prior_is_the_float64_answer_eager_and_under_jit(alpha, beta0, sigma, extra,
                                                                                       uniform):
    i, j = np.arange(5), np.arange(5) + 1
    p = np.array([0.9, 0.8, 0.7, 0.95, 0.6])
    w = np.ones(5) if uniform else np.array([1.0, 2.0, 0.5, 1.0, 1.5])
    if extra:       # one cycle: the bias identified, weakly
        i, j, p, w = np.r_[i, 0], np.r_[j, 5], np.r_[p, 0.99], np.r_[w, 0.01]
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), weight=w.astype(np.float32), num_items=6)
    solver = jr.ProductOfExpertsSolver(experts.gaussian("learn", alpha=alpha, beta=beta0, sigma=sigma))
    s_ref, b_ref = _reference(i, j, p, w, 6, alpha, beta0, sigma, 1e-6)
    for sol in (jr.fit_poe(c, solver), jax.jit(lambda cc: jr.fit_poe(cc, solver))(c),
                jr.fit_poe(jr.stack_contexts([c, c]), solver)):
        scores = np.asarray(sol.scores).reshape(-1, 6)[0]
        beta = np.asarray(sol.theta["beta"]).reshape(-1)[0]
        assert np.asarray(sol.result).reshape(-1)[0] == jr.scoring.RESULTS.successful
        np.testing.assert_allclose(beta, b_ref, atol=2e-4)
        np.testing.assert_allclose(scores, s_ref, atol=2e-4)


@pytest.mark.parametrize("sigma", [1e2, 1e4])
def test_gaussian_expert_with_small_curvature_is_the_float64_least_squares_solution(sigma):
    """Curvatures 1/sigma^2 = 1e-8 were lost beside the anchor P's 1/N in float32 (scores 2.8e-2 off)."""
    rng = np.random.default_rng(11)
    n, r = 8, 20
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0, 1, r).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    rows = np.zeros((r, n))
    rows[np.arange(r), i] += 1.0
    rows[np.arange(r), j] -= 1.0
    ref = np.linalg.lstsq(rows, p.astype(np.float64) - 0.5, rcond=None)[0]
    ref -= ref.mean()
    sol = jr.fit_poe(c, jr.ProductOfExpertsSolver(experts.gaussian(sigma=sigma)))
    assert int(sol.result) == jr.scoring.RESULTS.successful
    np.testing.assert_allclose(sol.scores, ref, atol=1e-5)
    # the implicit derivative of a score in p: the same least-squares map, sigma-free
    g = jax.grad(lambda pp: jr.fit_poe(jr.Comparisons.from_pairs(i, j, pp, num_items=n),
                                       jr.ProductOfExpertsSolver(experts.gaussian(sigma=sigma))).scores[0])(p)
    pinv = np.linalg.pinv(rows)
    np.testing.assert_allclose(g, (pinv - pinv.mean(0))[0], atol=1e-4)
