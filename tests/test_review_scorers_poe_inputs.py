"""Review: the general PoE solver's inputs: experts' parameters, the solver's settings, per-comparison theta,
a user's from_context under bucket padding, and the derivative in the weight of a comparison of weight 0.

Yardsticks: closed forms (a weighted mean, weighted least squares in float64 NumPy) and one-sided finite
differences in float64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from jaxrank.scoring import experts, poe
from jaxrank.scoring.experts import Expert

I = np.array([0, 1, 2, 0, 3])
J = np.array([1, 2, 3, 2, 1])
P = np.array([0.8, 0.7, 0.6, 0.9, 0.3])


def _c(dtype=np.float32, weight=None):
    return jr.Comparisons.from_pairs(I, J, P.astype(dtype), num_items=4, weight=weight)


def _wls(sigma, beta):
    """argmin sum_k (s_i - s_j - (p_k - beta))^2 / (2 sigma_k^2), centred (float64 least squares)."""
    rows = np.zeros((5, 4))
    rows[np.arange(5), I], rows[np.arange(5), J] = 1.0, -1.0
    s = np.linalg.lstsq(rows / sigma[:, None], (P - beta) / sigma, rcond=None)[0]
    return s - s.mean()


@pytest.mark.parametrize("make, name", [
    (lambda: experts.thurstone(scale=-1.0), "scale"), (lambda: experts.thurstone(scale=0.0), "scale"),
    (lambda: experts.gaussian(sigma=0.0), "sigma"), (lambda: experts.gaussian(alpha=-1.0), "alpha"),
    (lambda: experts.gaussian(beta=float("nan")), "beta"),
    (lambda: experts.heteroscedastic_gaussian(kappa=-10.0), "kappa"),
    (lambda: experts.soft_bradley_terry(gamma=float("inf")), "gamma")])
def test_built_in_experts_refuse_invalid_parameters(make, name):
    with pytest.raises(ValueError, match=name):
        make()


@pytest.mark.parametrize("expert, theta, name", [
    (experts.thurstone(), {"scale": float("nan")}, "scale"), (experts.thurstone(), {"scale": -1.0}, "scale"),
    (experts.soft_bradley_terry(), {"gamma": float("inf")}, "gamma"),
    (experts.gaussian(), {"sigma": np.array([1.0, 1.0, 0.0, 1.0, 1.0])}, "sigma"),
    (experts.heteroscedastic_gaussian(), {"kappa": -1.0}, "kappa"),
    (experts.soft_bradley_terry(), {"gamma": np.array([0.0, 1.0])}, "gamma"),
    (experts.soft_bradley_terry(), {"gamma": "x"}, "gamma")])
def test_theta_overrides_are_checked(expert, theta, name):
    with pytest.raises(ValueError, match=name):
        jr.fit_poe(_c(), jr.ProductOfExpertsSolver(expert), theta)


@pytest.mark.parametrize("kw, name", [
    (dict(score_prior=float("inf")), "score_prior"), (dict(score_prior="0.1"), "score_prior"),
    (dict(score_prior=None), "score_prior"), (dict(theta_prior=float("inf")), "theta_prior"),
    (dict(tol=float("nan")), "tol"), (dict(tol=float("inf")), "tol"), (dict(max_iter=True), "max_iter"),
    (dict(throw="yes"), "throw")])
def test_solver_settings_are_checked_as_bradley_terry_solver_checks_them(kw, name):
    with pytest.raises(ValueError, match=name):
        jr.ProductOfExpertsSolver(experts.soft_bradley_terry(), **kw)


def test_solve_context_refuses_a_batch_naming_c():
    b = jr.stack_contexts([_c(), _c()])
    with pytest.raises(ValueError, match="c must be one context"):
        poe.solve_context(b, jr.ProductOfExpertsSolver(experts.soft_bradley_terry()))


def test_per_comparison_theta_and_a_weighted_from_context_agree_eagerly_and_under_jit():
    """Eager solves pad to a bucket: a theta entry [R] is padded with the comparisons, and a from_context that
    weighs by weight (as documented) never sees the padding."""
    sigma = np.array([1.0, 0.5, 2.0, 1.0, 0.8])
    ld = lambda d, p, th: -0.5 * (d - (p - th["beta"])) ** 2 / th["sigma"] ** 2
    fc = lambda p, w, th: {**th, "beta": jnp.sum(w * p) / jnp.sum(w)}
    ex = Expert(ld, {"beta": 0.5, "sigma": sigma.astype(np.float32)}, name="per_comparison", from_context=fc,
                quadratic=True)
    solver = jr.ProductOfExpertsSolver(ex)
    c = _c()
    for sol in (jr.fit_poe(c, solver), jax.jit(lambda cc: jr.fit_poe(cc, solver))(c)):
        np.testing.assert_allclose(sol.theta["beta"], P.mean(), rtol=1e-6)
        np.testing.assert_allclose(sol.scores, _wls(sigma, P.mean()), atol=1e-5)
    override = np.array([2.0, 1.0, 1.0, 0.5, 1.0])
    for sol in (jr.fit_poe(c, solver, {"sigma": override}),
                jax.jit(lambda cc: jr.fit_poe(cc, solver, {"sigma": override}))(c)):
        np.testing.assert_allclose(sol.scores, _wls(override, P.mean()), atol=1e-5)


@pytest.mark.parametrize("expert", [experts.gaussian(), experts.soft_bradley_terry(), experts.thurstone()])
def test_derivative_in_the_weight_of_a_comparison_of_weight_zero_matches_finite_differences(expert):
    w0 = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    solver = jr.ProductOfExpertsSolver(expert)
    with jax.enable_x64(True):
        f = lambda ww: jr.fit_poe(jr.Comparisons.from_pairs(I, J, jnp.asarray(P), num_items=4, weight=ww),
                                  solver).scores[1]
        g = float(jax.grad(f)(jnp.asarray(w0))[4])
        h = 1e-6
        fd = float((f(jnp.asarray(w0).at[4].set(h)) - f(jnp.asarray(w0))) / h)
    assert abs(fd) > 1e-2
    np.testing.assert_allclose(g, fd, rtol=1e-4)
