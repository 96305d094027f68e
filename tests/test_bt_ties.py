"""Bradley-Terry keeps exact ties exact: scores tie where the float64 optimum ties, batched or alone (issue 32).

In a complete balanced design (every pair compared equally often) Bradley-Terry's win counts are sufficient:
two items with the same wins have exactly the same maximum-likelihood score. A float32 Newton solve returned
such scores up to ~1e-7 apart, differently per batch shape, and a rank statistic ranked them apart (TopicalChat,
every ordered pair of 6 responses: BT 47.0 batched, 46.5 alone, where the win ratio gives 45.5).
``soft_bt._tied`` returns scores closer than the solve's estimated error as exact ties
(``jaxrank.scoring._ties``). The references here are independent: the optimum of the likelihood (hard: PoE eq.
1-2 with the ``1/(N-1)`` prior; soft: PoE eq. 3) by Newton's method in float64 NumPy with a pseudo-inverse, and
the win counts themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrank.comparisons import Comparisons
from jaxrank.scoring import bradley_terry, poe_bradley_terry

TIE64 = 1e-9      # float64 optimum to ~1e-14: closer than this is an exact tie
APART = 1e-4      # a float32 solve (tol 1e-3 hard, 1e-5 soft) resolves gaps beyond this


def float64_fit(i, j, a, b, n):
    """Maximise ``sum_k a_k log sigmoid(d_k) + b_k log sigmoid(-d_k)``, ``d_k = s_i - s_j``, by Newton in float64
    (pseudo-inverse of the Laplacian Hessian), centred."""
    s = np.zeros(n)
    for _ in range(100):
        d = s[i] - s[j]
        q = 1 / (1 + np.exp(-d))
        r = (a + b) * q - a
        g = np.zeros(n)
        np.add.at(g, i, r)
        np.add.at(g, j, -r)
        h = (a + b) * q * (1 - q)
        lap = np.zeros((n, n))
        np.add.at(lap, (i, i), h)
        np.add.at(lap, (j, j), h)
        np.add.at(lap, (i, j), -h)
        np.add.at(lap, (j, i), -h)
        step = np.linalg.pinv(lap) @ g
        s = s - step
        s -= s.mean()
        if np.max(np.abs(step)) < 1e-14:
            break
    return s


def hard_bt64(i, j, p, n):
    """Hard BT (PoE eq. 1-2): decisions ``1[p > 1/2]`` with ``1/(N-1)`` virtual wins each way per comparison."""
    y = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))
    lam = 1.0 / (n - 1)
    return float64_fit(i, j, y + lam, 1 - y + lam, n)


def balanced(rng, n, reps):
    """Every ordered pair of ``n`` items ``reps`` times, random decisions, items relabelled and comparisons shuffled."""
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    i, j = np.tile(i, reps), np.tile(j, reps)
    p = rng.choice([0.2, 0.7], size=len(i)).astype(np.float32)
    perm, order = rng.permutation(n), rng.permutation(len(i))
    return perm[i][order], perm[j][order], p[order]


def wins(i, j, p, n):
    y = np.where(p > 0.5, 1.0, 0.0)
    out = np.zeros(n)
    np.add.at(out, i, y)
    np.add.at(out, j, 1 - y)
    return out


def check_ties(got, ref):
    """Equal exactly where ``ref`` (float64) ties; distinct, in ``ref``'s order, where ``ref`` is ``APART`` apart."""
    gap = ref[:, None] - ref[None]
    same = got[:, None] == got[None]
    assert np.all(same[np.abs(gap) < TIE64])
    far = np.abs(gap) > APART
    assert np.array_equal(np.sign(got[:, None] - got[None])[far], np.sign(gap)[far])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 8), reps=st.integers(1, 3), batch=st.integers(1, 6))
def test_balanced_ties_where_wins_tie(seed, n, reps, batch):
    """Complete balanced designs: scores equal exactly where the win counts (and the float64 optimum) are equal,
    distinct and in the float64 order elsewhere, each within 1e-3 of float64; batched ranks = alone ranks."""
    rng = np.random.default_rng(seed)
    designs = [balanced(rng, n, reps) for _ in range(batch)]
    i, j, p = (np.stack(x) for x in zip(*designs))
    got = np.asarray(bradley_terry(Comparisons.from_pairs(i, j, p, num_items=n)))
    for b in range(batch):
        ref = hard_bt64(i[b], j[b], p[b], n)
        w = wins(i[b], j[b], p[b], n)
        assert np.array_equal(np.abs(ref[:, None] - ref[None]) < TIE64, w[:, None] == w[None])   # the design
        check_ties(got[b], ref)
        np.testing.assert_allclose(got[b], ref, atol=1e-3)
        alone = np.asarray(bradley_terry(Comparisons.from_pairs(i[b], j[b], p[b], num_items=n)))
        check_ties(alone, ref)
        assert np.array_equal(scipy.stats.rankdata(alone), scipy.stats.rankdata(got[b]))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 8), batch=st.integers(1, 5))
def test_soft_ties_where_float64_ties(seed, n, batch):
    """PoE-BT (soft, PoE eq. 3) on balanced designs whose probabilities repeat per item: items with the same
    multiset of outcomes tie in float64 and exactly in float32, batched or alone; others stay apart."""
    rng = np.random.default_rng(seed)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    # p of (a, b) depends on a "level" of a and b only: items of one level are exchangeable, hence tied
    levels = rng.integers(0, 3, size=(batch, n))
    grid = rng.integers(1, 8, size=(batch, 3, 3)) / 8.0
    grid = (grid + 1 - np.swapaxes(grid, 1, 2)) / 2          # p(a beats b) + p(b beats a) = 1 per level pair
    p = np.stack([grid[b][levels[b][i], levels[b][j]] for b in range(batch)]).astype(np.float32)
    ii, jj = np.broadcast_to(i, p.shape), np.broadcast_to(j, p.shape)
    got = np.asarray(poe_bradley_terry(Comparisons.from_pairs(ii, jj, p, num_items=n)))
    for b in range(batch):
        pc = np.clip(p[b].astype(np.float64), 1e-6, 1 - 1e-6)
        ref = float64_fit(i, j, pc, 1 - pc, n)
        check_ties(got[b], ref)
        np.testing.assert_allclose(got[b], ref, atol=1e-4)
        alone = np.asarray(poe_bradley_terry(Comparisons.from_pairs(i, j, p[b], num_items=n)))
        check_ties(alone, ref)
        assert np.array_equal(scipy.stats.rankdata(alone), scipy.stats.rankdata(got[b]))


def test_items_in_no_comparison_keep_zero():
    """An item in no comparison scores exactly 0, also beside a component whose scores tie near 0."""
    n = 5
    i, j = np.nonzero(~np.eye(4, dtype=bool))
    p = np.full(len(i), 0.8, np.float32)      # items 0-3 each win 3 of 6 (tied); item 4 alone
    got = np.asarray(bradley_terry(Comparisons.from_pairs(i, j, p, num_items=n)))
    ref = hard_bt64(i, j, p, 4)   # the prior counts live items only (1 / (4 - 1))
    assert got[4] == 0.0
    check_ties(got[:4], ref)


@pytest.mark.parametrize("reps", [1, 2])
def test_topicalchat_shape_spearman_as_win_ratio(reps):
    """Every ordered pair of 6 responses (the TopicalChat slice's full budget): BT's Spearman against labels, with
    average ranks, equals the win ratio's (a balanced design ranks by wins), batched and alone."""
    rng = np.random.default_rng(7)
    designs = [balanced(rng, 6, reps) for _ in range(40)]
    i, j, p = (np.stack(x) for x in zip(*designs))
    labels = rng.integers(1, 4, size=(40, 6))
    got = np.asarray(bradley_terry(Comparisons.from_pairs(i, j, p, num_items=6)))
    for b in range(40):
        w = wins(i[b], j[b], p[b], 6)
        alone = np.asarray(bradley_terry(Comparisons.from_pairs(i[b], j[b], p[b], num_items=6)))
        expect = scipy.stats.spearmanr(w, labels[b]).statistic
        for s in (got[b], alone):
            rho = scipy.stats.spearmanr(s, labels[b]).statistic
            assert (np.isnan(rho) and np.isnan(expect)) or abs(rho - expect) < 1e-12
