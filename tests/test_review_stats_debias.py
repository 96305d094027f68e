"""Review fixes in jaxrank.debias: threshold_debias keeps its tie rule at tau = 0 or 1, and debias_threshold
is the most balancing threshold when p has ties (checked against a NumPy search over every threshold)."""

import numpy as np

import jaxrank as jr
from jaxrank import debias as D


def _pa(p, w, tau):
    """P(A) at ``tau`` (NumPy): weight of p > tau plus half the weight of p == tau."""
    return (np.sum(w * (p > tau)) + 0.5 * np.sum(w * (p == tau))) / np.sum(w)


def _best_gap(p, w):
    """min over every threshold in [0, 1] of |P(A) - 1/2|: the distinct values, the gaps' midpoints, the ends."""
    v = np.unique(p[w > 0])
    taus = np.concatenate([v, (v[1:] + v[:-1]) / 2, [0.0, 1.0]])
    return min(abs(_pa(p, w, t) - 0.5) for t in taus)


def test_debias_threshold_balances_as_closely_as_the_data_allow_with_ties():
    p = np.float32([0.0, 0.7, 0.7, 0.7, 0.7, 1.0, 1.0, 1.0, 1.0])        # the review's sampling judge
    c = jr.Comparisons.from_pairs(np.zeros(9, int), np.ones(9, int), p, num_items=2)
    tau = float(D.debias_threshold(c))
    assert abs(_pa(p, np.ones(9), np.float32(tau)) - 0.5) == _best_gap(p, np.ones(9))   # 4/9, not 6/9
    rng = np.random.default_rng(0)
    for trial in range(40):                                             # discrete p (K samples), equal weights
        r = int(rng.integers(1, 12))
        k = int(rng.integers(1, 6))
        p = np.float32(rng.integers(0, k + 1, r) / k)
        w = np.ones(r, np.float32) * (1 + trial % 3)
        c = jr.Comparisons.from_pairs(np.zeros(r, int), np.ones(r, int), p, num_items=2, weight=w)
        tau = np.float32(D.debias_threshold(c))
        got = abs(_pa(p, w, tau) - 0.5)
        np.testing.assert_allclose(got, _best_gap(p, w), atol=1e-6, err_msg=f"p={p} w={w} tau={tau}")
        np.testing.assert_allclose(float(D.positional_bias(c, threshold=tau)), _pa(p, w, tau), atol=1e-6)


def test_debias_threshold_with_weights_and_a_tie_at_the_median():
    # P(A) at the median 0.5 (weight 4 + 4 tied there, 1 above): 5/15; the gap above: 1/15; below: 9/15
    p, w = np.float32([0.2, 0.5, 0.5, 0.9]), np.float32([6.0, 4.0, 4.0, 1.0])
    c = jr.Comparisons.from_pairs(np.zeros(4, int), np.ones(4, int), p, num_items=2, weight=w)
    tau = np.float32(D.debias_threshold(c))
    assert abs(_pa(p, w, tau) - 0.5) == _best_gap(p, w) and tau == np.float32(0.35)


def test_threshold_debias_maps_p_equal_to_tau_to_a_tie_at_the_ends():
    c = jr.Comparisons.from_decisions([0, 1, 2, 3], [1, 2, 3, 0], [0, 0, 0, 1], num_items=4)   # p in {0, 1}
    assert float(D.debias_threshold(c)) == 0.0
    p = np.asarray(D.threshold_debias(c).p)
    np.testing.assert_array_equal(p, [0.5, 0.5, 0.5, 1.0])              # p == tau: a tie; above: A
    np.testing.assert_allclose(float(D.positional_bias(D.threshold_debias(c))),
                               _pa(np.float32([0, 0, 0, 1]), np.ones(4), 0.0))
    x = jr.Comparisons.from_pairs([0, 1, 2], [1, 2, 0], [1.0, 1.0, 0.3], num_items=3)
    assert float(D.debias_threshold(x)) == 1.0                           # P(A) 1/3 at 1, 2/3 below: the median
    np.testing.assert_array_equal(np.asarray(D.threshold_debias(x).p), [0.5, 0.5, 0.0])


def _perm_np(i, j, p, w):
    """Permutation average by a dict of ordered pairs (NumPy)."""
    from collections import defaultdict
    ws, ps = defaultdict(float), defaultdict(float)
    for a, b, pp, ww in zip(i, j, p, w):
        ws[a, b] += ww
        ps[a, b] += ww * pp
    return np.array([0.5 * (pp + 1 - ps[b, a] / ws[b, a]) if ws[b, a] > 0 else pp for a, b, pp in zip(i, j, p)])


def test_permutation_average_on_a_sparse_pool_builds_no_n_by_n_array():
    import jax
    from jaxrank import _graph
    rng = np.random.default_rng(1)
    n, r = 60, 90                                                   # N^2 far above R: the sparse edge space
    assert not _graph.use_dense(n, r)
    i = rng.integers(0, n // 6, r)                                  # few items compared often: reverses and repeats
    j = (i + rng.integers(1, n // 6, r)) % (n // 6)
    p = rng.uniform(0, 1, r).astype(np.float32)
    w = np.float32(rng.integers(0, 3, r))                           # weight-0 rows count nothing
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    got = np.asarray(D.permutation_average(c).p)
    np.testing.assert_allclose(got, _perm_np(i, j, p, w), atol=1e-6)
    jaxpr = jax.make_jaxpr(lambda cc: D.permutation_average(cc).p)(c)
    assert f"{n},{n}]" not in str(jaxpr), "an N x N array on a sparse pool"         # nested jaxprs too
    batch = jr.stack_contexts([c, jr.Comparisons.from_pairs(i[::-1], j[::-1], p, num_items=n, weight=w)])
    np.testing.assert_allclose(np.asarray(D.permutation_average(batch).p)[1],
                               _perm_np(i[::-1], j[::-1], p, w), atol=1e-6)
