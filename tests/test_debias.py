"""jaxrank.debias against independent NumPy computations (METHODS.md §3; paper eq. 8-10)."""

import jax
import numpy as np
import pytest

from jaxrank import (Comparisons, debias_threshold, permutation_average, positional_bias, stack_contexts,
                     threshold_debias)


# ----------------------------------------------------------------- helpers
def _random_set(rng, n, r, *, grid=False, weights=False):
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n          # never i == j
    p = rng.random(r)
    if grid:                                      # many exact ties, including p == 0.5
        p = np.round(p * 10) / 10
    w = rng.choice([0.5, 1.0, 2.0, 3.0], r) if weights else np.ones(r)
    return i, j, p.astype(np.float32), w.astype(np.float32)


def _np_positional_bias(p, w, tau=0.5):
    dec = np.where(p > tau, 1.0, np.where(p == tau, 0.5, 0.0))
    return np.sum(w * dec) / np.sum(w) if np.sum(w) > 0 else 0.5


def _symmetric_pairs(n):
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    return a, b


def _np_permutation_average(i, j, p, w):
    """Loop over comparisons: average with the weighted mean of the reverse-order comparisons."""
    out = np.array(p, float)
    for k in range(len(i)):
        rev = [m for m in range(len(i)) if i[m] == j[k] and j[m] == i[k] and w[m] > 0]
        wsum = sum(w[m] for m in rev)
        if wsum > 0:
            prev = sum(w[m] * p[m] for m in rev) / wsum
            out[k] = 0.5 * (p[k] + 1 - prev)
    return out


# ------------------------------------------------------------ positional_bias
@pytest.mark.parametrize("seed", range(3))
def test_positional_bias_is_weighted_count(seed):
    rng = np.random.default_rng(seed)
    i, j, p, w = _random_set(rng, 6, 40, grid=True, weights=True)
    assert (p == 0.5).any()
    c = Comparisons.from_pairs(i, j, p, num_items=6, weight=w)
    assert float(positional_bias(c)) == pytest.approx(_np_positional_bias(p, w), abs=1e-6)
    assert float(positional_bias(c, threshold=0.3)) == pytest.approx(_np_positional_bias(p, w, 0.3), abs=1e-6)


def test_positional_bias_batched_padded_and_empty():
    rng = np.random.default_rng(3)
    sets = [_random_set(rng, 5, r, grid=True, weights=True) for r in (12, 30, 7)]
    ctxs = [Comparisons.from_pairs(i, j, p, num_items=5, weight=w) for i, j, p, w in sets]
    empty = Comparisons.from_pairs([0, 1], [1, 2], [0.9, 0.8], num_items=5, weight=[0.0, 0.0])
    batch = stack_contexts(ctxs + [empty])
    got = np.asarray(positional_bias(batch))
    want = [_np_positional_bias(p, w) for _, _, p, w in sets] + [0.5]
    np.testing.assert_allclose(got, want, atol=1e-6)
    # per-context thresholds
    taus = np.array([0.2, 0.5, 0.7, 0.5], np.float32)
    got = np.asarray(positional_bias(batch, threshold=taus))
    want = [_np_positional_bias(p, w, t) for (_, _, p, w), t in zip(sets, taus)] + [0.5]
    np.testing.assert_allclose(got, want, atol=1e-6)
    # vmap over the batch
    got_v = np.asarray(jax.vmap(positional_bias)(batch))
    np.testing.assert_allclose(got_v, np.asarray(positional_bias(batch)), atol=1e-7)


# ------------------------------------------------------------ debias_threshold
@pytest.mark.parametrize("r", [20, 21, 64])
def test_debias_threshold_is_median_for_unit_weights(r):
    rng = np.random.default_rng(r)
    i, j, p, _ = _random_set(rng, 8, r)
    c = Comparisons.from_pairs(i, j, p, num_items=8)
    tau = float(debias_threshold(c))
    assert tau == pytest.approx(float(np.median(p.astype(float))), abs=1e-6)
    # the defining property: P(p > tau) = 0.5 within 1/R
    assert abs(np.mean(p > tau) - 0.5) <= 1.0 / r + 1e-9


@pytest.mark.parametrize("seed", range(5))
def test_debias_threshold_balances_weighted_decisions(seed):
    rng = np.random.default_rng(100 + seed)
    r = int(rng.integers(15, 60))
    i, j, p, w = _random_set(rng, 7, r, weights=True)
    c = Comparisons.from_pairs(i, j, p, num_items=7, weight=w)
    tau = float(debias_threshold(c))
    above = np.sum(w * (p > tau)) / np.sum(w)
    at_or_above = np.sum(w * (p >= tau)) / np.sum(w)
    # weighted median: at most half the weight strictly above, at least half at or above,
    # so P(p > tau) is 0.5 up to one comparison's weight
    assert above <= 0.5 + 1e-6
    assert at_or_above >= 0.5 - 1e-6
    assert 0.5 - above <= w.max() / w.sum() + 1e-6


def test_debias_threshold_batched_equals_per_context():
    rng = np.random.default_rng(7)
    # equal R so that no padding is involved here (padding is tested separately)
    sets = [_random_set(rng, 6, 24, weights=True) for _ in range(4)]
    ctxs = [Comparisons.from_pairs(i, j, p, num_items=6, weight=w) for i, j, p, w in sets]
    batch = stack_contexts(ctxs)
    got = np.asarray(debias_threshold(batch))
    for k, (_, _, p, w) in enumerate(sets):
        tau = got[k]
        assert np.sum(w * (p > tau)) / np.sum(w) <= 0.5 + 1e-6
        assert np.sum(w * (p >= tau)) / np.sum(w) >= 0.5 - 1e-6
    np.testing.assert_allclose(got, [float(debias_threshold(c)) for c in ctxs], atol=1e-7)
    # two leading axes [2, 2]
    b2 = jax.tree.map(lambda x: x.reshape((2, 2) + x.shape[1:]), batch)
    np.testing.assert_allclose(np.asarray(debias_threshold(b2)), got.reshape(2, 2), atol=1e-7)
    np.testing.assert_allclose(np.asarray(jax.vmap(debias_threshold)(batch)), got, atol=1e-7)


def test_debias_threshold_empty_context_is_half():
    c = Comparisons.from_pairs([0, 1], [1, 2], [0.9, 0.8], num_items=3, weight=[0.0, 0.0])
    assert float(debias_threshold(c)) == 0.5


def test_debias_threshold_ignores_padded_comparisons():
    p = np.array([0.1, 0.2, 0.6, 0.7], np.float32)
    c = Comparisons.from_pairs([0, 1, 2, 3], [1, 2, 3, 0], p, num_items=4)
    other = Comparisons.from_pairs([0, 1, 2, 3, 0], [1, 2, 3, 0, 2], [0.3] * 5, num_items=4)
    batch = stack_contexts([c, other])       # pads context 0 with a p = 0.5, weight 0 comparison
    want = 0.5 * (0.2 + 0.6)
    assert float(debias_threshold(c)) == pytest.approx(want, abs=1e-6)
    assert float(np.asarray(debias_threshold(batch))[0]) == pytest.approx(want, abs=1e-6)


# ------------------------------------------------------------ threshold_debias
@pytest.mark.parametrize("seed", range(3))
def test_threshold_debias_formula_monotone_and_balanced(seed):
    rng = np.random.default_rng(200 + seed)
    r = 50
    i, j, p, w = _random_set(rng, 8, r)
    p = np.clip(p * 0.6 + 0.35, 0, 1).astype(np.float32)   # a judge biased towards A
    c = Comparisons.from_pairs(i, j, p, num_items=8, weight=w)
    tau = float(np.median(p.astype(float)))
    assert _np_positional_bias(p, w) > 0.6          # biased before
    out = threshold_debias(c)
    ph = np.asarray(out.p, float)
    alpha = (1 - tau) / tau
    np.testing.assert_allclose(ph, alpha * p / (alpha * p + 1 - p), atol=2e-6)
    # monotone in p
    order = np.argsort(p)
    assert np.all(np.diff(ph[order]) >= -1e-7)
    # p > tau  <=>  p^ > 0.5, and the debiased judge has P(A) = 0.5 within 1/R
    assert np.array_equal(ph[np.abs(p - tau) > 1e-5] > 0.5, p[np.abs(p - tau) > 1e-5] > tau)
    assert abs(_np_positional_bias(ph, w) - 0.5) <= 1.0 / r + 1e-9
    assert abs(float(positional_bias(out)) - 0.5) <= 1.0 / r + 1e-6
    # everything else untouched
    for f in ("i", "j", "weight", "item_mask"):
        assert np.array_equal(np.asarray(getattr(out, f)), np.asarray(getattr(c, f)))


def test_threshold_debias_maps_tau_to_half_and_explicit_tau():
    taus = np.array([0.1, 0.3, 0.5, 0.62, 0.9], np.float32)
    for tau in taus:
        c = Comparisons.from_pairs([0, 1, 2, 0], [1, 2, 0, 2], [tau, 0.0, 1.0, 0.4], num_items=3)
        ph = np.asarray(threshold_debias(c, tau).p)
        assert ph[0] == pytest.approx(0.5, abs=1e-6)
        assert ph[1] == pytest.approx(0.0, abs=1e-6) and ph[2] == pytest.approx(1.0, abs=1e-6)
        a = (1 - float(tau)) / float(tau)
        assert ph[3] == pytest.approx(a * 0.4 / (a * 0.4 + 0.6), abs=1e-6)
    # tau = 0.5 is the identity
    c = Comparisons.from_pairs([0, 1, 2], [1, 2, 0], [0.2, 0.5, 0.77], num_items=3)
    np.testing.assert_allclose(np.asarray(threshold_debias(c, 0.5).p), [0.2, 0.5, 0.77], atol=1e-7)


def test_threshold_debias_batched_per_context_tau():
    rng = np.random.default_rng(9)
    sets = [_random_set(rng, 6, 30) for _ in range(3)]
    ctxs = [Comparisons.from_pairs(i, j, p, num_items=6) for i, j, p, _ in sets]
    batch = stack_contexts(ctxs)
    taus = np.array([0.3, 0.55, 0.8], np.float32)
    got = np.asarray(threshold_debias(batch, taus).p)
    for k, (_, _, p, _) in enumerate(sets):
        a = (1 - taus[k]) / taus[k]
        np.testing.assert_allclose(got[k], a * p / (a * p + 1 - p), atol=2e-6)
    # default tau per context = each context's median
    got = np.asarray(threshold_debias(batch).p)
    for k, (_, _, p, _) in enumerate(sets):
        t = np.median(p.astype(float))
        a = (1 - t) / t
        np.testing.assert_allclose(got[k], a * p / (a * p + 1 - p), atol=2e-6)


# ------------------------------------------------------------ permutation_average
def test_permutation_average_symmetric_set_matches_loop():
    rng = np.random.default_rng(10)
    n = 6
    a, b = _symmetric_pairs(n)
    p = rng.random(len(a)).astype(np.float32)
    c = Comparisons.from_pairs(a, b, p, num_items=n)
    got = np.asarray(permutation_average(c).p)
    want = _np_permutation_average(a, b, p, np.ones(len(a)))
    np.testing.assert_allclose(got, want, atol=1e-6)
    # the averaged judge is order-consistent: p~_ab + p~_ba = 1
    lookup = {(x, y): k for k, (x, y) in enumerate(zip(a, b))}
    for k, (x, y) in enumerate(zip(a, b)):
        assert got[k] + got[lookup[(y, x)]] == pytest.approx(1.0, abs=1e-6)


def test_permutation_average_partial_reverse_repeats_and_padding():
    rng = np.random.default_rng(11)
    n = 7
    i, j, p, w = _random_set(rng, n, 45, weights=True)       # repeats and missing reverses
    w[::9] = 0.0                                             # some padded comparisons
    c = Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    got = np.asarray(permutation_average(c).p)
    want = _np_permutation_average(i, j, p, w)
    np.testing.assert_allclose(got, want, atol=1e-6)
    # some comparisons really have no reverse and keep p exactly
    no_rev = np.array([not any((i[m] == j[k]) and (j[m] == i[k]) and w[m] > 0 for m in range(len(i)))
                       for k in range(len(i))])
    assert no_rev.any() and (~no_rev).any()
    np.testing.assert_array_equal(got[no_rev], p[no_rev])


def test_permutation_average_removes_constant_offset():
    rng = np.random.default_rng(12)
    n = 8
    s = rng.permutation(n).astype(float)                     # distinct true scores
    a, b = _symmetric_pairs(n)
    offset = 1.5                                             # judge favours position A
    p = (1 / (1 + np.exp(-(0.7 * (s[a] - s[b]) + offset)))).astype(np.float32)
    c = Comparisons.from_pairs(a, b, p, num_items=n)
    assert _np_positional_bias(p, np.ones(len(p))) > 0.6
    out = permutation_average(c)
    assert float(positional_bias(out)) == pytest.approx(0.5, abs=1e-7)
    ph = np.asarray(out.p)
    # strictly consistent: after averaging, A is preferred exactly when it is better
    assert np.array_equal(ph > 0.5, s[a] > s[b])


def test_permutation_average_batched_equals_per_context_and_jit():
    rng = np.random.default_rng(13)
    sets = [_random_set(rng, n, r, weights=True) for n, r in ((5, 30), (7, 40), (4, 12))]
    ctxs = [Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
            for (i, j, p, w), n in zip(sets, (5, 7, 4))]
    batch = stack_contexts(ctxs)
    got = np.asarray(permutation_average(batch).p)
    for k, (i, j, p, w) in enumerate(sets):
        want = _np_permutation_average(i, j, p, w)
        np.testing.assert_allclose(got[k, :len(p)], want, atol=1e-6)
    got_j = np.asarray(jax.jit(permutation_average)(batch).p)
    np.testing.assert_allclose(got_j, got, atol=1e-7)
    got_v = np.asarray(jax.vmap(permutation_average)(batch).p)
    np.testing.assert_allclose(got_v, got, atol=1e-7)


# ------------------------------------------- threshold_debias at p == tau (review: float32 alpha rounding)
@pytest.mark.parametrize("pv", [[0.3, 0.7, 0.9], [0.2, 0.6, 0.95], [0.1, 0.35, 0.8], [0.05, 0.45, 0.55, 0.61, 0.99]])
def test_threshold_debias_p_at_tau_is_exactly_half(pv):
    """The median p (== tau) maps to exactly 0.5, a tie, as positional_bias counts p == tau; the others match
    eq. 9 in float64 (alpha p / (alpha p + 1 - p)) and fall on tau's side of 0.5 (alpha's rounding gave 0.50000006)."""
    p = np.asarray(pv, np.float32)
    n = len(p)
    c = Comparisons.from_pairs(np.arange(n), (np.arange(n) + 1) % n, p, num_items=n)
    tau = float(np.float32(np.median(p)))                       # odd count: the weighted median is an observed p
    assert float(debias_threshold(c)) == tau
    ph = np.asarray(threshold_debias(c).p)
    at = p == np.float32(tau)
    assert at.sum() == 1 and ph[at][0] == 0.5
    t, p64 = np.float64(tau), p.astype(np.float64)
    alpha = (1 - t) / t
    np.testing.assert_allclose(ph, alpha * p64 / (alpha * p64 + 1 - p64), rtol=1e-6)
    assert np.all((ph > 0.5) == (p > np.float32(tau))) and np.all((ph < 0.5) == (p < np.float32(tau)))
    np.testing.assert_equal(float(positional_bias(threshold_debias(c))), _np_positional_bias(p64, np.ones(n), t))
    assert float(positional_bias(threshold_debias(c))) == float(positional_bias(c, threshold=debias_threshold(c)))


def test_threshold_debias_ties_in_win_ratio_cli_case():
    """Comparisons at p == tau count half a win each way after threshold debiasing (win_ratio, the CLI's case)."""
    from jaxrank import win_ratio
    p = np.float32([0.3, 0.7, 0.7, 0.9])
    c = Comparisons.from_pairs([0, 1, 2, 0], [1, 2, 1, 2], p, num_items=3)
    tau = float(debias_threshold(c))
    assert tau == np.float32(0.7)
    ph = np.asarray(threshold_debias(c).p)
    np.testing.assert_array_equal(ph[1:3], [0.5, 0.5])
    wr = np.asarray(win_ratio(threshold_debias(c)))
    # NumPy: decisions 1[p^ > .5] + .5 1[p^ == .5] per comparison, wins / games per item
    dec = np.where(ph > 0.5, 1.0, np.where(ph == 0.5, 0.5, 0.0))
    wins, games = np.zeros(3), np.zeros(3)
    for a, b, d in zip([0, 1, 2, 0], [1, 2, 1, 2], dec):
        wins[a] += d; wins[b] += 1 - d; games[a] += 1; games[b] += 1
    np.testing.assert_allclose(wr, wins / games, rtol=1e-6)
