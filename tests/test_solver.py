"""jaxrank.BradleyTerrySolver: the settings object of the Bradley-Terry family, its result codes and throw=."""

import dataclasses

import jax
import numpy as np
import pytest
from scipy.special import expit

import jaxrank as jr
from jaxrank.scoring import soft_bt

import reference as ref


def _data(seed, n=6, reps=3, scale=1.0):
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n, 1)
    i, j = np.repeat(i, reps), np.repeat(j, reps)
    s = scale * rng.normal(size=n)
    p = np.clip(expit(s[i] - s[j] + 0.5 * rng.normal(size=len(i))), 0.05, 0.95)
    return i, j, p


def test_settings_are_validated_by_name_and_the_object_is_a_static_jit_argument():
    for kw, name in [(dict(eps=0.5), "eps"), (dict(score_prior=-1), "score_prior"), (dict(gamma_prior=0), "gamma_prior"),
                     (dict(tol=0), "tol"), (dict(max_iter=0), "max_iter"), (dict(max_iter=2.5), "max_iter"),
                     (dict(debias="threshold"), "debias")]:
        with pytest.raises(ValueError, match=name):
            jr.BradleyTerrySolver(**kw)
    a, b = jr.BradleyTerrySolver(debias="mean", eps=1e-6), jr.BradleyTerrySolver(debias="mean", eps=1e-6)
    assert a == b and hash(a) == hash(b)
    assert jr.BradleyTerrySolver(debias=False).mode == jr.BradleyTerrySolver(debias="none").mode == "off"
    assert jr.BradleyTerrySolver(debias=True).mode == "mean"
    assert jr.BradleyTerrySolver().tolerance(np.float32) == 1e-5
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.eps = 0.1


def test_solve_with_a_solver_matches_scipy_and_the_keyword_function():
    i, j, p = _data(0)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=6)
    solver = jr.BradleyTerrySolver(debias="learn")
    sol = soft_bt.solve(c, solver)
    want, g = ref.soft_bt(i, j, np.clip(p, 1e-6, 1 - 1e-6), np.ones(len(i)), 6, learn=True)
    np.testing.assert_allclose(sol.scores, want, atol=2e-4)
    np.testing.assert_allclose(sol.gamma, g, atol=2e-4)
    assert int(sol.result) == jr.RESULTS.successful
    same = jr.fit_poe_bradley_terry(c, debias="learn")
    np.testing.assert_array_equal(sol.scores, same.scores)


def test_result_codes_per_context_under_vmap_and_throw():
    i, j, p = _data(2, scale=3.0)   # spread scores, clipped p: one Newton step does not reach tol
    one = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=6)
    b = jr.stack_contexts([one, one])
    short = jr.BradleyTerrySolver(max_iter=1, tol=1e-12)
    sol = soft_bt.solve(b, short)
    assert sol.result.shape == (2,) and sol.result.dtype == np.int32
    assert np.all(np.asarray(sol.result) == jr.RESULTS.max_steps_reached)
    assert not np.asarray(sol.converged).any()
    per_context = jax.vmap(lambda c: soft_bt.solve_context(c, jr.BradleyTerrySolver()).result)(b)
    assert np.all(np.asarray(per_context) == jr.RESULTS.successful)
    with pytest.raises(jr.SolverError, match="max_steps_reached"):
        soft_bt.solve(b, dataclasses.replace(short, throw=True))
    soft_bt.solve(b, jr.BradleyTerrySolver(throw=True))          # converged: no error


def test_laplace_posterior_fits_once_and_matches_the_separate_calls():
    i, j, p = _data(2, n=7)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=7)
    fit = jr.laplace_posterior(c, jr.BradleyTerrySolver(debias="mean"))
    sol = jr.fit_poe_bradley_terry(c, debias="mean")
    post = jr.laplace_bradley_terry(c, debias="mean")
    np.testing.assert_allclose(fit.solution.scores, sol.scores, atol=1e-5)
    np.testing.assert_allclose(fit.solution.gamma, sol.gamma, atol=1e-6)
    np.testing.assert_allclose(fit.posterior.covariance, post.covariance, atol=1e-6)
    # the covariance is the pseudo-inverse of the precision (NumPy, independently)
    np.testing.assert_allclose(np.asarray(fit.posterior.covariance, float),
                               np.linalg.pinv(np.asarray(fit.posterior.precision, float), rcond=1e-5, hermitian=True),
                               atol=1e-4)
    with pytest.raises(ValueError, match="solver"):
        jr.laplace_posterior(c, solver={"eps": 0.1})


def test_old_item_mask_keyword_warns_and_still_works():
    i, j, p = _data(3)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=6)
    post = jr.laplace_bradley_terry(c)
    mask = np.array([True] * 6)
    new = jr.ranking_confidence(post, rule="adjacent", where=mask)
    with pytest.warns(DeprecationWarning, match=r"ranking_confidence\(item_mask=\) is deprecated.*where="):
        old = jr.ranking_confidence(post, rule="adjacent", item_mask=mask)
    np.testing.assert_array_equal(new, old)
    with pytest.warns(DeprecationWarning, match=r"rank_intervals\(item_mask=\)"):
        jr.rank_intervals(post, key=jax.random.key(0), num_samples=8, item_mask=mask)
    with pytest.raises(ValueError, match="where"):
        jr.ranking_confidence(post, rule="adjacent", where=mask, item_mask=mask)


def test_public_names_reach_the_top_level():
    from jaxrank import scoring
    assert jr.decisions is scoring.decisions
    assert jr.max_likelihood_ranking is scoring.max_likelihood_ranking


def _newton_reference(i, j, p, n):
    """Soft-BT ML scores to machine precision: NumPy Newton on the dense Hessian, s_0 = 0."""
    s = np.zeros(n)
    for _ in range(100):
        d = s[i] - s[j]
        q = expit(d)
        g = np.bincount(i, q - p, n) - np.bincount(j, q - p, n)
        h = q * (1 - q)
        hess = np.zeros((n, n))
        np.add.at(hess, (i, i), h)
        np.add.at(hess, (j, j), h)
        np.add.at(hess, (i, j), -h)
        np.add.at(hess, (j, i), -h)
        step = np.linalg.solve(hess[1:, 1:], -g[1:])
        s[1:] += step
        if np.max(np.abs(step)) < 1e-14:
            break
    return s - s.mean()


@pytest.mark.parametrize("seed", range(8))
def test_stopping_rule_leaves_an_error_below_tol(seed):
    """Newton stops on a step below tol or on the contraction estimate |step|^2 / |previous| < tol;
    either way the scores it returns are within tol of the exact optimum (float64, so rounding is not the limit)."""
    n = 12
    i, j, p = _data(seed, n=n, reps=2)
    p = np.clip(expit(4 * (p - 0.5) * 4), 0.01, 0.99)     # sharper probabilities: more Newton steps
    want = _newton_reference(i, j, p, n)
    with jax.enable_x64(True):
        for tol in (1e-4, 1e-7):
            c = jr.Comparisons.from_pairs(i, j, p.astype(np.float64), num_items=n)
            sol = jr.fit_poe_bradley_terry(c, eps=1e-9, tol=tol)
            assert bool(sol.converged)
            assert np.max(np.abs(np.asarray(sol.scores) - want)) < tol
