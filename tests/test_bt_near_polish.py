"""Hard BT's start on one large sparse context (issue 33, part h; ``_soft_bt_sparse.NEAR_NOTE``).

The start's polish over the near comparisons only (``_soft_bt_sparse._near_polish``: far comparisons as their
saturated side and their exponential tail, summed once) is checked against a float64 NumPy implementation of
Newman's update over every comparison; the rank scale's scalar bisection for one component
(``_rank_scaled(..., one=True)``) against SciPy's scalar minimiser of the float64 objective along the ranks; and a
whole fit that takes both against the float64 gradient of the smoothed hard-decision likelihood (PoE eq. 1-2).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, special

import jaxrank as jr
from jaxrank import _graph
from jaxrank.scoring import _mm, _soft_bt_newton as sbn
from jaxrank.scoring import _soft_bt_sparse as sparse
from jaxrank.simulate import sparse_pool

N = 1000   # >= _graph.CG_MIN_ITEMS, R = 10 N: the sparse CG path with Newman's start


def _separable(n, seed=0, extra=0):
    """``benchmarks/memory_scale.py``'s pool (decisions follow one order), smoothed as hard BT smooths it
    (``bradley_terry._smoothed``); ``extra`` items in no comparison (single-item components)."""
    i, j, p, _ = sparse_pool(n, per_item=10, seed=seed)
    lam = 1.0 / (n - 1)
    y = (p > 0.5).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, (y + lam) / (1 + 2 * lam), weight=np.full(len(i), 1 + 2 * lam, np.float32),
                                  num_items=n + extra)
    pr = sbn._problem(c, "off", 0.0)
    return c, pr, _graph.components(c, e=pr.e, w=pr.w), i, j, y, lam


def _start(pr, labels):
    """Newman's start and its rank-scaled form (as ``_rank_start`` forms them)."""
    x = _mm.newman_sweeps(pr.e, pr.wp, pr.wl, labels, _graph.component_sizes(labels, jnp.float32),
                          sparse.MM_START_SWEEPS)
    return x, sparse._rank_scaled(pr, x, labels, 0.0)


def _numpy_polish(pr, labels, s, sweeps):
    """``sweeps`` uncapped Newman updates over every comparison in float64 (``_mm.newman_polish``'s rule: a step
    that changes sign from the last is halved, scores centred per component after each update)."""
    i, j = np.asarray(pr.e.i), np.asarray(pr.e.j)
    a, b = np.asarray(pr.wp, np.float64), np.asarray(pr.wl, np.float64)
    lab, n = np.asarray(labels), pr.e.num_items
    live = np.bincount(i, a + b, n) + np.bincount(j, a + b, n) > 0
    size = np.bincount(lab, minlength=n)[lab]
    s, prev = np.asarray(s, np.float64).copy(), np.zeros(n)
    for _ in range(sweeps):
        d = s[i] - s[j]
        up, down = special.expit(-d), special.expit(d)
        won = np.bincount(i, a * up, n) + np.bincount(j, b * down, n)
        lost = np.bincount(i, b * down, n) + np.bincount(j, a * up, n)
        with np.errstate(divide="ignore"):
            delta = np.where(live, np.log(won) - np.log(lost), 0.0)
        delta = np.where(delta * prev < 0, 0.5 * delta, delta)
        s = s + delta
        s = s - (np.bincount(lab, s, n) / np.maximum(np.bincount(lab, minlength=n), 1))[lab] * (size > 0)
        prev = delta
    return s


def _polish(pr, y, labels):
    """``_near_polish`` traced afresh (it reads the module's settings when traced: tests set them)."""
    return jax.jit(lambda p, s, lab: sparse._near_polish(p, s, lab, 0.0))(pr, y, labels)


def test_one_update_with_far_comparisons_summed_is_newmans(monkeypatch):
    """One update of ``_near_polish`` is Newman's update over every comparison, far ones included: the far
    comparisons' saturated sides and tails are summed exactly at the start point (float32 rounding only)."""
    _, pr, labels, *_ = _separable(N)
    _, y = _start(pr, labels)
    y = 3 * y   # spread further: many comparisons beyond POLISH_REACH, some items held by far ones only
    d = np.abs(np.asarray(_graph.incidence(pr.e, y)))
    near = (d < sparse.POLISH_REACH) & (np.asarray(pr.w) > 0)
    i, j = np.asarray(pr.e.i), np.asarray(pr.e.j)
    has_near = (np.bincount(i, near, N) + np.bincount(j, near, N)) > 0
    assert near.mean() < 0.5 and not has_near.all()   # the path under test: far comparisons, far-only items
    monkeypatch.setattr(sparse, "RANK_POLISH", 1)
    monkeypatch.setattr(sparse, "POLISH_SHARE", 0.5)
    got = np.asarray(_polish(pr, y, labels), np.float64)
    want = _numpy_polish(pr, labels, y, 1)
    np.testing.assert_allclose(got, want, atol=2e-4 * max(1.0, np.ptp(want) / 100))


def test_near_polish_close_to_newmans_over_every_comparison(monkeypatch):
    """The default reach on the separable pool: the 20 updates stay as close to the float64 all-comparison polish
    as float32's all-comparison polish does (``_mm.newman_polish``: max 0.12, mean 7e-4 on this pool; the far
    opponents held within each update's tails add ~0.03 at most)."""
    _, pr, labels, *_ = _separable(5000)
    _, y = _start(pr, labels)
    d = np.abs(np.asarray(_graph.incidence(pr.e, y)))
    share = np.mean((d < sparse.POLISH_REACH) & (np.asarray(pr.w) > 0))
    assert share < 0.6   # (unpadded: 52% of the comparisons; padded to the fit's bucket, 40% of the edges)
    monkeypatch.setattr(sparse, "POLISH_SHARE", share + 0.05)   # the compacted branch
    got = np.asarray(_polish(pr, y, labels), np.float64)
    want = _numpy_polish(pr, labels, y, sparse.RANK_POLISH)
    assert np.max(np.abs(got - want)) < 0.25
    assert np.mean(np.abs(got - want)) < 2e-3


def test_too_many_near_comparisons_fall_back_to_every_edge(monkeypatch):
    """Where the near comparisons do not fit the static share, every update runs over every comparison."""
    monkeypatch.setattr(sparse, "POLISH_SHARE", 0.01)
    _, pr, labels, *_ = _separable(N)
    _, y = _start(pr, labels)
    got = np.asarray(_polish(pr, y, labels), np.float64)
    want = _numpy_polish(pr, labels, y, sparse.RANK_POLISH)
    # float32 rounding only (20 uncapped updates amplify it on a few items: max 0.016 on this pool)
    assert np.max(np.abs(got - want)) < 0.05 and np.mean(np.abs(got - want)) < 1e-4
    full = _mm.newman_polish(pr.e, pr.wp, pr.wl, y, 0.0, 0.0, labels, sparse.RANK_POLISH, jnp.inf)
    np.testing.assert_allclose(got, np.asarray(full, np.float64), atol=1e-5)   # the all-edge branch itself


@pytest.mark.parametrize("extra", [0, 24])
def test_scalar_rank_scale_minimises_objective_along_ranks(extra):
    """One component (with ``extra`` single items in no comparison): the scalar bisection's ``alpha`` is SciPy's
    minimiser of the float64 objective ``f(alpha u)`` along the centred ranks of Newman's start."""
    c, pr, labels, i, j, y, lam = _separable(N, seed=2, extra=extra)
    x, _ = _start(pr, labels)
    got = np.asarray(jax.jit(lambda x: sparse._rank_scaled(pr, x, labels, 0.0, one=True))(x), np.float64)
    u = np.argsort(np.argsort(np.asarray(x)[:N])).astype(np.float64)
    u -= u.mean()
    a, b = y + lam, 1 - y + lam

    def f(alpha):
        d = alpha * (u[i] - u[j])
        return np.sum(a * np.logaddexp(0, -d) + b * np.logaddexp(0, d))

    best = optimize.minimize_scalar(f, bounds=(1e-6, 10.0), method="bounded", options={"xatol": 1e-10}).x
    np.testing.assert_allclose(got[:N], best * u, rtol=5e-3, atol=1e-3)
    np.testing.assert_array_equal(got[N:], 0.0)   # a single item keeps 0


def test_scalar_rank_scale_keeps_components_apart():
    """Two components: ``one=True`` takes the per-component bisection, as without it."""
    c1, pr1, *_ = _separable(600, seed=3)
    i1, j1 = np.asarray(c1.i), np.asarray(c1.j)
    c = jr.Comparisons.from_pairs(np.r_[i1, i1 + 600], np.r_[j1, j1 + 600], np.r_[c1.p, c1.p],
                                  weight=np.r_[c1.weight, c1.weight], num_items=1200)
    pr = sbn._problem(c, "off", 0.0)
    labels = _graph.components(c, e=pr.e, w=pr.w)
    x, _ = _start(pr, labels)
    got = jax.jit(lambda x: sparse._rank_scaled(pr, x, labels, 0.0, one=True))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(sparse._rank_scaled(pr, x, labels, 0.0)), atol=1e-5)


def _grad64(s, i, j, y, lam, n):
    a, b = y + lam, 1 - y + lam
    q = special.expit(s[i] - s[j])
    r = (a + b) * q - a
    return np.bincount(i, r, n) - np.bincount(j, r, n)


def test_fit_from_the_near_polished_start_reaches_the_optimum(monkeypatch):
    """A whole fit (one context) whose start takes both: converged, and the float64 gradient of the smoothed
    likelihood at its scores at float32's noise."""
    c, pr, labels, i, j, y, lam = _separable(N)
    _, y0 = _start(pr, labels)
    d = np.abs(np.asarray(_graph.incidence(pr.e, y0)))
    share = np.mean((d < sparse.POLISH_REACH) & (np.asarray(pr.w) > 0))
    monkeypatch.setattr(sparse, "POLISH_SHARE", min(1.0, share + 0.1))   # 1,000 items: the compacted branch
    st = jr.BradleyTerrySolver(eps=0.0).settings(np.float32)
    cb = jax.tree.map(lambda a: a[None], c)
    prior = jnp.zeros(1, jnp.float32)   # hard BT: its prior is in the smoothing, no score prior
    run = jax.jit(lambda cb, lab: sbn._newton(cb, lab, prior, "off", st, "mm"))   # a fresh trace for this setting
    x, it, conv, _ = run(cb, labels[None])
    s = np.asarray(x[0], np.float64)
    assert bool(conv[0]) and int(it[0]) < 20
    assert np.ptp(s) > 50   # separable: the scores spread far (the start's polish has far comparisons)
    assert np.max(np.abs(_grad64(s, i, j, y.astype(np.float64), lam, N))) < 1e-3
