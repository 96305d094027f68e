"""The soft-BT objective in float32 keeps its relative accuracy near saturation, and the line search can use it.

``_soft_bt_newton._nll_d`` sums only non-negative terms; the earlier form ``w softplus(-d) + w (1 - p) d``
cancelled two terms of size ``w |d|`` where ``d < 0``, and on a nearly separable context its rounding hid
the decrease of a full Newton step, which was then rejected pass after pass (100 passes, 2e-4 off).
"""

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from scipy.special import log_expit

import jaxrank as jr
from jaxrank.scoring import _soft_bt_newton as newton
from jaxrank.scoring.solver import BradleyTerrySolver

# a nearly separable context (p = 0.001 / 0.999): items 0 and 3 end 19 log-units below item 4
I = np.array([3, 1, 0, 6, 8, 5, 2, 4, 7, 8, 4])
J = np.array([1, 0, 6, 8, 5, 2, 4, 7, 6, 5, 0])
P = np.array([0.001, 0.999, 0.001, 0.001, 0.999, 0.001, 0.001, 0.999, 0.999, 0.999, 0.999], np.float32)


def _nll64(s, i, j, p, w):
    d = s[i] - s[j]
    return -np.sum(w * (p * log_expit(d) + (1 - p) * log_expit(-d)))


OPTIMUM = np.array([-8.40875, -1.50198, 3.96433, -8.40874, 10.58744, -2.65879, -2.19614, 4.19565, 4.42698])


@pytest.mark.parametrize("scale", [0.5, 1.0, 1.5])
def test_objective_keeps_float32_relative_accuracy_at_large_differences(scale):
    """``_nll_d`` in float32 against the float64 log-likelihood near the nearly separable optimum (the
    objective ~0.1 there, made of terms up to ~7 in the cancelling form), scaled out and in."""
    rng = np.random.default_rng(int(10 * scale))
    n = 9
    s = scale * OPTIMUM
    w = rng.uniform(0.5, 3.0, len(I))
    c = jr.Comparisons.from_pairs(I, J, P, num_items=n, weight=w.astype(np.float32))
    st = BradleyTerrySolver().settings(jnp.float32)
    pr = newton._problem(c, "off", st.eps)
    x = jnp.asarray(s, jnp.float32)
    got = float(jax.jit(lambda x: newton._nll_d(x, newton._diffs(x, pr, "off"), pr, "off", st))(x))
    want = _nll64(np.asarray(x, np.float64), I, J, np.clip(P.astype(np.float64), 1e-6, 1 - 1e-6),
                  w.astype(np.float32).astype(np.float64))
    assert abs(got - want) <= 1e-5 * abs(want)


def test_nearly_separable_context_converges_in_a_batch():
    """The context (and a copy) in one batch: converged in a handful of passes, at the float64 optimum."""
    from scipy.optimize import minimize

    n = 9
    c = jr.Comparisons.from_pairs(I, J, P, num_items=n)
    sol = jr.fit_poe_bradley_terry(jr.stack_contexts([c, c]))
    pc = np.clip(P.astype(np.float64), 1e-6, 1 - 1e-6)
    grad = lambda s: (np.bincount(I, 1 / (1 + np.exp(-(s[I] - s[J]))) - pc, n)
                      - np.bincount(J, 1 / (1 + np.exp(-(s[I] - s[J]))) - pc, n))
    res = minimize(lambda s: _nll64(s, I, J, pc, 1.0), np.zeros(n), jac=grad, method="BFGS",
                   options=dict(gtol=1e-12, maxiter=10_000))
    want = res.x - res.x.mean()
    assert np.all(np.asarray(sol.converged)) and int(np.max(sol.iterations)) <= 15
    np.testing.assert_allclose(np.asarray(sol.scores[0]), want, atol=2e-5)
