"""PoE-g-hard keeps exact ties exact: the batched sweep ranks as SciPy ranks the exact scores (issue 32).

Hard decisions make exact ties in the Gaussian PoE's scores common (two
candidates with the same wins against the same opponents). A float32 Cholesky
solve returns them a few ulps apart, differently for different batch shapes, and
a rank statistic then ranks them apart: the efficiency sweep read 43.0 where the
direct scores gave 47.0 on TopicalChat. :func:`jaxrank.scoring.gaussian.tie_scores`
ties scores closer than the solve's precision. The reference here is independent:
the scores of PoE eq. 7/11 solved in float64 by NumPy's pseudo-inverse
(``s = L^+ W^T D (x - 1/2)``), ranked by ``scipy.stats.spearmanr``.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrank import studies
from jaxrank.comparisons import Comparisons
from jaxrank.scoring.gaussian import poe_gaussian


def exact_scores(i, j, p, w, n, hard=True):
    """PoE eq. 7/11 in float64: ``s = L^+ W^T D (x - 1/2)``, ``x`` the hard decisions (0.5 for p = 0.5)."""
    x = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5)) if hard else np.asarray(p, np.float64)
    lap, rhs = np.zeros((n, n)), np.zeros(n)
    for a, b, wk, xk in zip(i, j, w, x):
        if wk == 0 or a == b:
            continue
        lap[a, a] += wk
        lap[b, b] += wk
        lap[a, b] -= wk
        lap[b, a] -= wk
        rhs[a] += wk * (xk - 0.5)
        rhs[b] -= wk * (xk - 0.5)
    s = np.linalg.pinv(lap) @ rhs
    return s - s.mean()


def scipy_rho(s, labels):
    s = np.round(s, 9)        # float64 round-off of the exact solve (1e-15) removed: exact ties stay ties
    if np.ptp(s) == 0 or np.ptp(labels) == 0:
        return np.nan
    return scipy.stats.spearmanr(s, labels).statistic


@pytest.fixture(scope="module")
def sweep():
    """A store-like judge (6 candidates, 8 contexts, every ordered pair) whose hard decisions tie often."""
    rng = np.random.default_rng(3)
    C, n = 8, 6
    probs = rng.choice([0.2, 0.4, 0.6, 0.9], size=(C, n, n)).astype(np.float32)
    labels = rng.integers(1, 4, size=(C, n)).astype(np.float32)
    mask = np.ones((C, n), bool)
    observed = np.broadcast_to(~np.eye(n, dtype=bool), (C, n, n)).copy()
    jm = studies.JudgeMatrix(probs, observed, labels, mask, "test")
    sel = studies.select_nested(jm, num_subsets=12, max_budget=n * (n - 1), key=jax.random.key(0))
    return jm, sel, [5, 8, 15, 30]


def test_batched_sweep_equals_scipy_on_exact_scores(sweep):
    """efficiency_curves (the [budgets, subsets, contexts] batch of efficiency_real.py) = SciPy on float64 scores."""
    jm, sel, budgets = sweep
    got = studies.efficiency_curves(sel, jm.labels, jm.mask, budgets, ["poe_gaussian_hard"])["poe_gaussian_hard"]
    i, j, p, w = (np.asarray(x) for x in (sel.i, sel.j, sel.p, sel.weight))
    S, C, _ = i.shape
    ties = 0
    for b, r in enumerate(budgets):
        for s in range(S):
            rho = []
            for k in range(C):
                x = exact_scores(i[s, k, :r], j[s, k, :r], p[s, k, :r], w[s, k, :r], jm.labels.shape[1])
                ties += int(np.sum(np.triu(np.abs(x[:, None] - x[None]) < 1e-9, 1)))
                rho.append(scipy_rho(x, jm.labels[k]))
            np.testing.assert_allclose(got[b, s], np.nanmean(rho), atol=1e-5)
    assert ties > 100        # the case does test ties


def test_direct_scores_tie_where_exact_scores_tie(sweep):
    """One problem at a time (the direct path): equal float32 scores exactly where the float64 ones are equal,
    and SciPy on them gives the sweep's Spearman."""
    jm, sel, _ = sweep
    n = jm.labels.shape[1]
    i, j, p, w = (np.asarray(x) for x in (sel.i, sel.j, sel.p, sel.weight))
    for s in range(4):
        for k in range(jm.labels.shape[0]):
            for r in (8, 30):
                c = Comparisons.from_pairs(i[s, k, :r], j[s, k, :r], p[s, k, :r], num_items=n, weight=w[s, k, :r])
                got = np.asarray(poe_gaussian(c, hard=True))
                x = exact_scores(i[s, k, :r], j[s, k, :r], p[s, k, :r], w[s, k, :r], n)
                tied = np.abs(x[:, None] - x[None]) < 1e-9
                assert np.array_equal(got[:, None] == got[None], tied)
                np.testing.assert_allclose(got, x, atol=1e-5)
                a, e = scipy.stats.spearmanr(got, jm.labels[k]).statistic, scipy_rho(x, jm.labels[k])
                assert (np.isnan(a) and np.isnan(e)) or abs(a - e) < 1e-6


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 8), batch=st.integers(1, 5), hard=st.booleans())
def test_ties_exact_whatever_the_batch(seed, n, batch, hard):
    """Property: in any batch, two scores are equal iff they are equal in exact arithmetic (hard decisions;
    soft probabilities on a grid of eighths, which tie too), and each score is the float64 one to 1e-5."""
    rng = np.random.default_rng(seed)
    r = int(rng.integers(n - 1, n * (n - 1) + 1))
    i = rng.integers(0, n, size=(batch, r))
    j = (i + rng.integers(1, n, size=(batch, r))) % n
    p = rng.integers(0, 9, size=(batch, r)) / 8.0
    w = rng.integers(1, 3, size=(batch, r)).astype(np.float32)
    c = Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w)
    got = np.asarray(poe_gaussian(c, hard=hard))
    for b in range(batch):
        x = exact_scores(i[b], j[b], p[b], w[b], n, hard=hard)
        lap = np.zeros((n, n))
        np.add.at(lap, (i[b], i[b]), w[b])
        np.add.at(lap, (j[b], j[b]), w[b])
        connected = np.linalg.matrix_rank(lap - _offdiag(i[b], j[b], w[b], n)) == n - 1
        if not connected:        # scores centred per component: compare only connected problems
            continue
        tied = np.abs(x[:, None] - x[None]) < 1e-9
        assert np.array_equal(got[b][:, None] == got[b][None], tied)
        np.testing.assert_allclose(got[b], x, atol=1e-5 * max(1.0, np.abs(x).max()))


def _offdiag(i, j, w, n):
    m = np.zeros((n, n))
    np.add.at(m, (i, j), w)
    np.add.at(m, (j, i), w)
    return m
