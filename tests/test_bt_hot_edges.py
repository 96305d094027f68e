"""Hard BT's compacted CG operator on large sparse pools (``_soft_bt_sparse.HOT_NOTE``, issue 33).

The Newton direction that ``_direction_cg`` computes over the edges that carry curvature is checked against
``numpy.linalg.solve`` of the float64 Newton system (the full one and the compacted one), and a whole fit with
the compacted operator against the float64 gradient of the smoothed hard-decision likelihood (PoE eq. 1-2).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from jaxrank import _graph
from jaxrank.simulate import sparse_pool
from jaxrank.scoring import _soft_bt_newton as sbn
from jaxrank.scoring import _soft_bt_sparse as sparse

N = 600   # >= _graph.CG_MIN_ITEMS, R = 10 N: the sparse CG path
SHARE = 0.5   # at 600 items ~36 % of the edges carry curvature (5,000 items: 23 %): a larger static share


def _separable(n, seed=0):
    """``benchmarks/memory_scale.py``'s pool (``jaxrank.simulate.sparse_pool``): its decisions follow one order."""
    i, j, p, _ = sparse_pool(n, per_item=10, seed=seed)
    r = len(i)
    lam = 1.0 / (n - 1)
    y = (p > 0.5).astype(np.float32)
    # the smoothed problem hard BT solves (bradley_terry._smoothed): its optimum is hard BT's fixed point
    c = jr.Comparisons.from_pairs(i, j, (y + lam) / (1 + 2 * lam), weight=np.full(r, 1 + 2 * lam, np.float32),
                                  num_items=n)
    return c, i, j, y, lam


def _fit(c, hot_share, monkeypatch):
    monkeypatch.setattr(sparse, "HOT_SHARE", hot_share)
    st = jr.BradleyTerrySolver(eps=0.0).settings(np.float32)
    pr = sbn._problem(c, "off", 0.0)
    labels = _graph.components(c, e=pr.e, w=pr.w)
    cb = jax.tree.map(lambda a: a[None], c)
    prior = jnp.full(1, st.score_prior, jnp.float32)   # hard BT: its prior is in the smoothing, no score prior
    run = jax.jit(lambda cb, lab: sbn._newton(cb, lab, prior, "off", st, "mm"))   # a fresh trace per setting
    x, it, conv, _ = run(cb, labels[None])
    return np.asarray(x[0], np.float64), int(it[0]), bool(conv[0]), pr, labels, st


def _grad64(s, i, j, y, lam, n):
    a, b = y + lam, 1 - y + lam
    q = 1 / (1 + np.exp(-(s[i] - s[j])))
    r = (a + b) * q - a
    return np.bincount(i, r, n) - np.bincount(j, r, n)


@pytest.fixture(scope="module")
def hot_fit():
    c, i, j, y, lam = _separable(N)
    with pytest.MonkeyPatch.context() as mp:
        return c, i, j, y, lam, _fit(c, SHARE, mp)


def _hot_edges(h, i, j):
    h64 = np.asarray(h, np.float64)
    deg = np.bincount(i, h64, N) + np.bincount(j, h64, N)
    return h64, deg, h64 > sparse.HOT_RELATIVE * np.minimum(deg[i], deg[j])


def test_fit_with_compacted_operator_reaches_a_float64_stationary_point(hot_fit, monkeypatch):
    c, i, j, y, lam, (s_hot, _, conv_hot, pr, _, _) = hot_fit
    s_full, _, conv_full, *_ = _fit(c, 0.0, monkeypatch)
    assert conv_hot and conv_full
    qq = 1 / (1 + np.exp(-(s_hot[i] - s_hot[j])))
    hot = _hot_edges(np.asarray(pr.w) * np.maximum(qq * (1 - qq), sparse.SWEEP_FLOOR), i, j)[2]
    assert hot.sum() <= SHARE * len(i)   # plumbing: at the optimum the compacted operator is the one used
    assert np.max(np.abs(_grad64(s_hot, i, j, y, lam, N))) < 1e-3
    assert np.max(np.abs(s_hot - s_full)) < 1e-2 * max(1.0, np.ptp(s_full) / 100)


def test_compacted_direction_solves_the_newton_system(hot_fit, monkeypatch):
    """Near the optimum (relative CG target ``eta = |g|``, floors lowered): the direction solves the compacted
    system to ``eta`` and the full float64 Newton system (``numpy.linalg.solve``) to within the dropped curvature."""
    c, i, j, y, lam, (s, _, _, pr, labels, st) = hot_fit
    monkeypatch.setattr(sparse, "LOOSE_FLOOR", 1e-6)
    monkeypatch.setattr(sparse, "HOT_SHARE", SHARE)
    st = st._replace(score_prior=jnp.float32(st.score_prior), tol=1e-6)
    mu = float(st.score_prior)
    yv = jnp.asarray(s + np.random.default_rng(2).normal(0, 1e-4, N), jnp.float32)
    d = _graph.incidence(pr.e, yv)
    r, mag, qq = sbn._residual(d, pr)
    h = pr.w * jnp.maximum(qq, sparse.SWEEP_FLOOR)
    k = int(SHARE * len(i))
    h64, deg, hot = _hot_edges(h, i, j)
    assert 0 < hot.sum() <= k   # the compacted branch is the one taken

    x, g, diag, _, _, eta = jax.jit(functools.partial(sparse._direction_cg, mode="off", st=st, loose=True, hot=True))(
        yv, h, r, mag, pr, labels=labels)
    x, g, eta = np.asarray(x, np.float64), np.asarray(g, np.float64), float(eta)
    damp = np.asarray(diag, np.float64) - (deg + 1.0 / N + mu)   # the per-item term (one component here)
    assert np.all(np.asarray(labels) == 0)

    def system(keep):
        m = np.zeros((N, N))
        np.add.at(m, (i[keep], j[keep]), -h64[keep])
        np.add.at(m, (j[keep], i[keep]), -h64[keep])
        m[np.diag_indices(N)] = -m.sum(axis=1)
        return m + 1.0 / N + np.diag(mu + np.maximum(damp, 0))

    b = -(g - g.mean())
    full, compact = system(np.ones_like(hot)), system(hot)
    assert eta < 1e-3
    assert np.linalg.norm(compact @ x - b) <= 1.05 * eta * np.linalg.norm(b) + 1e-6
    x_star = np.linalg.solve(full, b)
    # the dropped edges hold below HOT_RELATIVE of either item's curvature each (at most 2 % over 20 edges)
    assert np.linalg.norm(x - x_star) <= 0.05 * np.linalg.norm(x_star)
    assert np.linalg.norm(full @ x - b) <= 0.05 * np.linalg.norm(b)


def test_batch_of_contexts_uses_every_edge_and_reaches_stationary_points():
    """Under ``vmap`` (a batch of contexts) the compacted operator is off (``lax.cond`` would run both branches):
    plumbing through ``fit_bradley_terry``, each context checked against its float64 gradient."""
    pools = []
    for seed in (3, 4):
        r = np.random.default_rng(seed)
        i = r.integers(0, N, 10 * N)
        j = (i + r.integers(1, N, 10 * N)) % N
        s = r.normal(size=N)
        pools.append((i.astype(np.int32), j.astype(np.int32), (s[i] > s[j]).astype(np.float32)))
    c = jr.Comparisons.from_pairs(np.stack([p[0] for p in pools]), np.stack([p[1] for p in pools]),
                                  np.stack([p[2] for p in pools]), num_items=N)
    sol = jr.fit_bradley_terry(c)
    assert np.all(np.asarray(sol.converged))
    lam = 1.0 / (N - 1)
    for b, (i, j, y) in enumerate(pools):
        s = np.asarray(sol.scores[b], np.float64)
        assert np.max(np.abs(_grad64(s, i, j, y.astype(np.float64), lam, N))) < 1e-3


def test_sparse_pool_is_the_documented_design():
    """``jaxrank.simulate.sparse_pool``: distinct pairs, ``p = sigmoid(s_a - s_b)`` (SciPy's ``expit``),
    ``R = per_item N``, reproducible; bad sizes raise."""
    from scipy.special import expit

    i, j, p, s = sparse_pool(50, per_item=4, seed=3)
    assert len(i) == 200 and np.all(i != j) and i.min() >= 0 and max(i.max(), j.max()) < 50
    np.testing.assert_allclose(p, expit(s[i] - s[j]), rtol=1e-6)
    assert all(np.array_equal(a, b) for a, b in zip(sparse_pool(50, per_item=4, seed=3), (i, j, p, s)))
    for bad in (dict(num_items=1), dict(num_items=10, per_item=0), dict(num_items=2.5)):
        with pytest.raises(ValueError):
            sparse_pool(**bad)
