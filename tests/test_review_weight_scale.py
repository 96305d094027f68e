"""Weights far from 1 give the same optimum: every weight and both priors scaled by ``a`` leave the maximiser of
the soft Bradley-Terry / PoE likelihood where it is (a known invariance), and the Laplace precision scales by ``a``.

Before the fix only the concrete ``soft_bt.solve`` divided the weights' scale out: ``laplace_posterior`` (the
``jaxrank rank`` default), ``solve_context`` under ``jit`` and the general PoE solver returned NaN scores with
``line_search_failed`` at uniform weights of 6e6-1e9 (``rank`` printed them as a ranking), and ``fit_poe`` drifted
or reported ``nonconcave`` at weights of 1e-8.
"""

import jax
import numpy as np
import pytest

import jaxrank as jr
from jaxrank.scoring import BradleyTerrySolver, ProductOfExpertsSolver, experts, poe, soft_bt
from jaxrank.uncertainty import laplace_posterior

N, R = 10, 60
_rng = np.random.default_rng(2)
I = _rng.integers(0, N, R)
J = (I + _rng.integers(1, N, R)) % N
P = _rng.uniform(0.05, 0.95, R).astype(np.float32)


def _c(a):
    return jr.Comparisons.from_pairs(I, J, P, num_items=N, weight=np.full(R, a, np.float32))


@pytest.mark.parametrize("a", [1e-6, 6e6, 1e7, 1e9])
def test_laplace_posterior_is_invariant_to_the_weights_scale(a):
    sol1, post1 = laplace_posterior(_c(1.0), BradleyTerrySolver())
    sol, post = laplace_posterior(_c(a), BradleyTerrySolver())
    assert bool(sol.converged) and int(sol.result) == 0
    np.testing.assert_allclose(np.asarray(sol.scores), np.asarray(sol1.scores), atol=2e-5)
    # precision a H: standard errors 1 / sqrt(a) of the unit-weight ones
    np.testing.assert_allclose(np.asarray(post.stderr) * np.sqrt(a), np.asarray(post1.stderr), rtol=2e-3)


@pytest.mark.parametrize("a", [1e-8, 1e7, 1e9])
@pytest.mark.parametrize("expert", ["soft_bradley_terry", "thurstone", "gaussian"])
def test_general_poe_solver_is_invariant_to_the_weights_scale(a, expert):
    solver = ProductOfExpertsSolver(getattr(experts, expert)())
    base = poe.solve(_c(1.0), solver)
    for sol in (poe.solve(_c(a), solver), jax.jit(lambda c: poe.solve_context(c, solver))(_c(a))):
        assert int(sol.result) == 0
        np.testing.assert_allclose(np.asarray(sol.scores), np.asarray(base.scores), atol=2e-5)


def test_traced_soft_bt_with_large_weights_and_its_gradient():
    """Under jit, and the derivative: with the score prior scaled alike, d s / d w at ``a w`` is ``1 / a`` of the
    derivative at ``w`` (the optimum is homogeneous of degree 0 in (w, prior))."""
    a = 1e7

    def first_score(w, prior):
        c = jr.Comparisons.from_pairs(I, J, P, num_items=N, weight=w)
        return soft_bt.solve_context(c, BradleyTerrySolver(score_prior=prior)).scores[0]

    w1 = np.ones(R, np.float32)
    s1 = jax.jit(first_score, static_argnums=1)(w1, 0.1)
    sa = jax.jit(first_score, static_argnums=1)(w1 * a, 0.1 * a)
    assert np.isfinite(sa) and abs(float(sa) - float(s1)) < 2e-5
    g1 = jax.grad(first_score)(w1, 0.1)
    ga = jax.grad(first_score)(w1 * a, 0.1 * a)
    np.testing.assert_allclose(np.asarray(ga) * a, np.asarray(g1), atol=2e-5 * np.abs(g1).max())


def test_weights_inside_the_range_change_nothing_bit_for_bit():
    """Mean weights within solver.WEIGHT_SCALE_RANGE are divided by exactly 1: a traced fit equals the old
    arithmetic, the fit of the same comparisons with the weights passed as they are (weight 1 vs weight 1.0)."""
    from jaxrank.scoring.solver import _traced_weight_scale

    for a in (2e-3, 0.5, 1.0, 7.0, 500.0):
        assert float(_traced_weight_scale(np.full((2, R), a, np.float32))) == 1.0
    assert float(_traced_weight_scale(np.full((2, R), 1e4, np.float32))) == pytest.approx(1e4)
    assert float(_traced_weight_scale(np.zeros((2, R), np.float32))) == 1.0
