"""Hard BT's rank-scaled start on nearly separable sparse pools (``_soft_bt_sparse._rank_start``, issue 33).

Checked against independent float64 computations: the fitted scores against SciPy's trust-region Newton
optimum of the smoothed hard-decision likelihood (PoE eq. 1-2, prior ``1/(N-1)``), and the start's scale
``alpha`` against SciPy's scalar minimiser of the objective along the ranks.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

import jaxrank as jr
from jaxrank import _graph
from jaxrank.scoring import _mm, _soft_bt_newton as sbn
from jaxrank.scoring import _soft_bt_sparse as sparse

N = 1000   # >= _graph.CG_MIN_ITEMS and sparse (R = 10 N): the Newman-started CG path


def _pool(n, noisy, seed=0):
    rng = np.random.default_rng(seed)
    r = 10 * n
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    s = rng.normal(size=n)
    z = s[i] - s[j] + (rng.normal(0.0, 1.5, r) if noisy else 0.0)
    return i.astype(np.int32), j.astype(np.int32), (1 / (1 + np.exp(-z))).astype(np.float32)


def _objective(i, j, p, n):
    """Float64 negative log-likelihood of hard decisions with ``1/(N-1)`` virtual wins each way, gradient, Hessian."""
    y = (p > 0.5).astype(np.float64)
    lam = 1.0 / (n - 1)
    a, b = y + lam, 1 - y + lam

    def f(s):
        d = s[i] - s[j]
        return np.sum(a * np.logaddexp(0, -d) + b * np.logaddexp(0, d))

    def g(s):
        q = 1 / (1 + np.exp(-(s[i] - s[j])))
        r = (a + b) * q - a
        return np.bincount(i, r, n) - np.bincount(j, r, n)

    def h(s):
        q = 1 / (1 + np.exp(-(s[i] - s[j])))
        w = (a + b) * q * (1 - q)
        m = np.zeros((n, n))
        np.add.at(m, (i, j), -w)
        np.add.at(m, (j, i), -w)
        m[np.diag_indices(n)] = -m.sum(axis=1)
        return m + 1.0 / n   # the constant direction, along which f is flat

    return f, g, h


@pytest.mark.parametrize("noisy", [False, True])
def test_hard_bt_matches_scipy_optimum(noisy):
    i, j, p = _pool(N, noisy)
    assert _graph.sizes_use_cg(N, len(i))   # the path under test
    sol = jr.fit_bradley_terry(jr.Comparisons.from_pairs(i, j, p, num_items=N))
    assert bool(sol.converged)
    f, g, h = _objective(i, j, p, N)
    ref = optimize.minimize(f, np.zeros(N), jac=g, hess=h, method="trust-exact", options={"gtol": 1e-9})
    s_ref = ref.x - ref.x.mean()
    s = np.asarray(sol.scores, np.float64)
    # float32 scores spread over ~100 log-units on the separable pool: within 0.05 of the float64 optimum
    assert np.max(np.abs(s - s_ref)) < (0.05 if not noisy else 1e-3) * max(1.0, np.ptp(s_ref) / 100)
    assert np.max(np.abs(g(s))) < 1e-3


def _smoothed_problem(i, j, p, n):
    lam = 1.0 / (n - 1)
    y = (p > 0.5).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, (y + lam) / (1 + 2 * lam), weight=np.full(len(i), 1 + 2 * lam, np.float32),
                                  num_items=n)
    pr = sbn._problem(c, "off", 0.0)
    return pr, _graph.components(c, e=pr.e, w=pr.w)


@pytest.mark.parametrize("noisy", [False, True])
def test_rank_start_taken_only_on_the_separable_pool(noisy):
    """Plumbing: the pools of the test above do exercise both branches of the gate."""
    i, j, p = _pool(N, noisy)
    pr, labels = _smoothed_problem(i, j, p, N)
    batch = lambda a: a[None]
    prb = jax.tree.map(batch, pr)
    x = _mm.newman_sweeps(pr.e, pr.wp, pr.wl, labels, _graph.component_sizes(labels, jnp.float32), sparse.MM_START_SWEEPS)
    st = jr.BradleyTerrySolver(eps=0.0).settings(np.float32)
    out = sparse._rank_start(prb, x[None], labels[None], jnp.zeros(1, jnp.float32), "off", st)[0]
    assert bool(jnp.any(out != x)) == (not noisy)


def test_rank_scale_minimises_objective_along_ranks():
    i, j, p = _pool(N, noisy=False, seed=3)
    n = N
    pr, labels = _smoothed_problem(i, j, p, n)
    s0 = np.asarray(_mm.newman_sweeps(pr.e, pr.wp, pr.wl, labels, _graph.component_sizes(labels, jnp.float32), 5))
    x = np.asarray(sparse._rank_scaled(pr, jnp.asarray(s0), labels, jnp.float32(0.0)), np.float64)
    u = np.argsort(np.argsort(s0)).astype(np.float64)
    u -= u.mean()
    f, _, _ = _objective(i, j, p, n)
    # the same objective up to a constant: (y + lam) / (1 + 2 lam) with weight 1 + 2 lam is a = y + lam, b = 1 - y + lam
    best = optimize.minimize_scalar(lambda al: f(al * u), bounds=(1e-6, 10.0), method="bounded",
                                    options={"xatol": 1e-9}).x
    np.testing.assert_allclose(x, best * u, rtol=5e-3, atol=1e-3)
