"""Large sparse pools: the fixed scorers and graph helpers keep O(N + R) memory (issue 14).

A pool of 20,000 items and 100,000 comparisons: every check compares against an
independent sparse NumPy/SciPy computation (``np.bincount``, ``scipy.sparse``),
and the lowered program of each scorer is searched for an ``[N, N]`` value.
No timing is asserted.
"""

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.sparse.linalg import LinearOperator, cg
from scipy.special import expit

import jaxrank as jr
from jaxrank import _graph

N, R = 20_000, 100_000


@pytest.fixture(scope="module")
def pool():
    rng = np.random.default_rng(14)
    m = N - 100                                # items m.. are isolated, but for a 10-item ring
    i = rng.integers(0, m, R)
    j = (i + rng.integers(1, m, R)) % m
    i[-10:], j[-10:] = m + np.arange(10), m + (np.arange(10) + 1) % 10
    s = rng.normal(size=N)
    p = expit(s[i] - s[j]).astype(np.float32)
    w = np.where(rng.random(R) < 0.05, 0.0, 1.0).astype(np.float32)   # some padded comparisons
    c = jr.Comparisons.from_pairs(i, j, p, num_items=N, weight=w)
    return c, i, j, p.astype(float), w.astype(float)


def _dense_shapes(fn, c):
    """The lowered StableHLO of ``fn(c)`` mentions no ``N x N``, ``R x R`` or ``R x N`` tensor."""
    text = jax.jit(fn).lower(c).as_text()
    return [shape for shape in (f"{N}x{N}", f"{R}x{R}", f"{R}x{N}", f"{N}x{R}") if shape in text]


@pytest.mark.parametrize("fn", [
    jr.win_ratio, jr.average_probability, jr.poe_gaussian, jr.bradley_terry,
    lambda c: jr.poe_gaussian(c, hard=True),
    lambda c: c.components(), lambda c: c.is_connected(), lambda c: c.games(),
], ids=["win_ratio", "average_probability", "poe_gaussian", "bradley_terry", "poe_gaussian_hard",
        "components", "is_connected", "games"])
def test_no_dense_item_by_item_array(pool, fn):
    assert _dense_shapes(fn, pool[0]) == []


def _reference_labels(i, j, w):
    live = w > 0
    g = sp.coo_matrix((np.ones(live.sum()), (i[live], j[live])), shape=(N, N))
    _, comp = csgraph.connected_components(g, directed=False)
    first = np.full(comp.max() + 1, N)
    np.minimum.at(first, comp, np.arange(N))
    return first[comp]


def test_components_match_scipy(pool):
    c, i, j, _, w = pool
    labels = _reference_labels(i, j, w)
    assert len(np.unique(labels)) > 1           # isolated items exist: the check is not trivial
    np.testing.assert_array_equal(np.asarray(c.components()), labels)
    assert not bool(c.is_connected())


def test_components_of_a_long_path_match_scipy():
    """A path is the worst case for label propagation (diameter N - 1)."""
    n = 3000
    perm = np.random.default_rng(0).permutation(n)
    i, j = perm[:-1], perm[1:]
    keep = np.arange(n - 1) != 1500            # cut the path in two
    c = jr.Comparisons.from_pairs(i[keep], j[keep], np.full(keep.sum(), 0.6, np.float32), num_items=n)
    labels = np.asarray(c.components())
    first = perm[:1501].min(), perm[1501:].min()
    expect = np.where(np.isin(np.arange(n), perm[:1501]), first[0], first[1])
    np.testing.assert_array_equal(labels, expect)


def test_counting_scorers_match_bincount(pool):
    c, i, j, p, w = pool
    games = np.bincount(i, w, N) + np.bincount(j, w, N)
    for got, x in ((jr.win_ratio(c), np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))),
                   (jr.average_probability(c), p)):
        won = np.bincount(i, w * x, N) + np.bincount(j, w * (1 - x), N)
        expect = np.where(games > 0, won / np.where(games > 0, games, 1), 0.5)
        np.testing.assert_allclose(np.asarray(got), expect, atol=1e-5)
    np.testing.assert_allclose(np.asarray(c.games()), games)


@pytest.mark.parametrize("hard", [False, True])
def test_poe_gaussian_matches_scipy_sparse_solve(pool, hard):
    """PoE eq. 11 per component: (W^T D W) s = W^T D (x - 1/2), each component centred."""
    c, i, j, p, w = pool
    x = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5)) if hard else p
    y = x - 0.5
    lap = sp.coo_matrix((np.concatenate([w, w, -w, -w]),
                         (np.concatenate([i, j, i, j]), np.concatenate([i, j, j, i]))), shape=(N, N)).tocsr()
    labels = _reference_labels(i, j, w)
    size = np.bincount(labels, minlength=N)[labels]
    mean = lambda v: np.bincount(labels, v, N)[labels] / size
    op = LinearOperator((N, N), matvec=lambda v: lap @ v + mean(v), dtype=float)
    rhs = np.bincount(i, w * y, N) - np.bincount(j, w * y, N)
    expect, info = cg(op, rhs, rtol=1e-12, maxiter=5000)
    assert info == 0
    got = np.asarray(jr.poe_gaussian(c, hard=hard))
    np.testing.assert_allclose(got, expect, atol=2e-3 * np.abs(expect).max())


def test_bradley_terry_is_stationary(pool):
    """Hard BT with 1/(N-1) virtual wins: the gradient of its log-likelihood (PoE eq. 1-2) vanishes."""
    c, i, j, p, w = pool
    s = np.asarray(jr.bradley_terry(c), float)
    y = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))
    live = (np.bincount(i, w, N) + np.bincount(j, w, N)) > 0
    prior = 1.0 / (live.sum() - 1)
    a, b = w * (y + prior), w * (1 - y + prior)
    r = (a + b) * expit(s[i] - s[j]) - a
    grad = np.bincount(i, r, N) - np.bincount(j, r, N)
    scale = np.bincount(i, a + b, N) + np.bincount(j, a + b, N)
    assert np.all(s[~live] == 0)
    assert np.max(np.abs(grad[live]) / scale[live]) < 1e-3
    labels = _reference_labels(i, j, w)
    np.testing.assert_allclose(np.bincount(labels, s, N), 0, atol=1e-2)   # centred per component


def test_sparse_and_dense_paths_agree_on_a_subset(monkeypatch):
    """The same 600-item pool through the sparse (CG, segment) and the dense edge space."""
    rng = np.random.default_rng(3)
    n, r = 600, 3000
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = expit(rng.normal(size=n)[i] - rng.normal(size=n)[j]).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    fns = {"poe_gaussian": jr.poe_gaussian, "bradley_terry": jr.bradley_terry,
           "poe_bradley_terry": jr.poe_bradley_terry, "components": lambda cc: cc.components()}
    sparse = {k: np.asarray(f(c)) for k, f in fns.items()}
    assert _graph.use_cg(_graph.edges(c))
    monkeypatch.setattr(_graph, "DENSE_RATIO", float("inf"))
    jax.clear_caches()
    try:
        dense = {k: np.asarray(f(c)) for k, f in fns.items()}
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    np.testing.assert_array_equal(sparse["components"], dense["components"])
    np.testing.assert_allclose(sparse["poe_gaussian"], dense["poe_gaussian"], atol=1e-4)
    np.testing.assert_allclose(sparse["bradley_terry"], dense["bradley_terry"], atol=1e-3)
    # PoE-BT's Newton steps on the sparse path are inexact CG solves (eta = O(|g|)): same optimum
    np.testing.assert_allclose(sparse["poe_bradley_terry"], dense["poe_bradley_terry"], atol=1e-4)
