"""Selection review fixes: Laplace-BT selection with a positional bias ``gamma`` (METHODS.md §4-5), argument checks.

Independent references: the ordered criterion ``q_ab (1 - q_ab) (A_aa + A_bb - 2 A_ab)``,
``q_ab = sigmoid(s_a - s_b - gamma)``, scored over all ordered pairs by NumPy/SciPy from the
posterior (``A = cov + 11^T / n`` on a connected graph), sequential picks by
``np.linalg.slogdet`` of the precision ``inv(A) + g v v^T`` (no Sherman-Morrison), and the
updated ``A`` by ``np.linalg.inv``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit

import jaxrank as jr
from jaxrank.scoring import BradleyTerrySolver
from jaxrank.selection import laplace_comparisons
from jaxrank.selection.greedy import TIE_TOL, _greedy_loop
from jaxrank.uncertainty import laplace_posterior


def _biased_context():
    """5 items, a judge with a strong bias to position A (gamma = -2 in d = s_i - s_j - gamma)."""
    s_true = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
    i = np.r_[0, 1, 2, 3, 1, 0, 2, 4]
    j = np.r_[1, 2, 3, 4, 0, 2, 1, 2]
    p = expit(s_true[i] - s_true[j] + 2.0).astype(np.float32)
    return jr.Comparisons.from_pairs(i, j, p, num_items=5), i, j


def _fit(c, debias="learn"):
    fit = laplace_posterior(c, BradleyTerrySolver(debias=debias))
    s = np.asarray(fit.posterior.mean, np.float64)
    a0 = np.asarray(fit.posterior.covariance, np.float64) + 1.0 / c.num_items   # connected: P = 11^T / n
    return s, float(fit.solution.gamma), a0


def _g(s, gamma, a, b):
    q = expit(s[a] - s[b] - gamma)
    return q * (1 - q)


def _weight(s, gamma, a, b, used, symmetric):
    """Expected gain of pair {a, b} over its random order (the free order's alone; both orders symmetric)."""
    if symmetric:
        return _g(s, gamma, a, b) + _g(s, gamma, b, a)
    fw, bw = (a, b) not in used, (b, a) not in used
    if fw and bw:
        return 0.5 * (_g(s, gamma, a, b) + _g(s, gamma, b, a))
    return _g(s, gamma, a, b) if fw else _g(s, gamma, b, a)


def _reference(s, gamma, a0, used, picks, symmetric=False, drawn=None):
    """Sequential greedy pairs by determinant ratios of the precision (NumPy slogdet, no Sherman-Morrison).

    ``1 + w v^T A v`` is linear in ``w``, so the expected ratio over the order is that of the
    expected gain. The precision then absorbs the gain of the order the code drew (``drawn``).
    """
    n = len(s)
    h = np.linalg.inv(a0)
    chosen = []
    for k in range(picks):
        _, base = np.linalg.slogdet(h)
        best, arg = -np.inf, None
        for a in range(n):
            for b in range(a + 1, n):
                if frozenset((a, b)) in chosen:
                    continue
                if symmetric and ((a, b) in used or (b, a) in used):
                    continue
                if (a, b) in used and (b, a) in used:
                    continue
                w = _weight(s, gamma, a, b, used, symmetric)
                v = np.zeros(n); v[a], v[b] = 1, -1
                _, ld = np.linalg.slogdet(h + w * np.outer(v, v))
                crit = np.exp(ld - base) - 1
                if crit > best * (1 + 10 * TIE_TOL):
                    best, arg = crit, (a, b)
        chosen.append(frozenset(arg))
        a, b = drawn[k] if drawn is not None else arg
        assert {a, b} == set(arg)
        w = _g(s, gamma, a, b) + (_g(s, gamma, b, a) if symmetric else 0.0)
        v = np.zeros(n); v[a], v[b] = 1, -1
        h = h + w * np.outer(v, v)
    return chosen


def _pairs(ni, nj):
    return list(zip(np.asarray(ni).tolist(), np.asarray(nj).tolist()))


def test_laplace_selection_uses_the_fitted_bias():
    c, i, j = _biased_context()
    s, gamma, a0 = _fit(c)
    assert gamma < -1.5                                                   # the bias is learnt
    used = set(zip(i.tolist(), j.tolist()))
    crit = {(a, b): _weight(s, gamma, a, b, used, False) * (a0[a, a] + a0[b, b] - 2 * a0[a, b])
            for a in range(5) for b in range(a + 1, 5) if (a, b) not in used or (b, a) not in used}
    best = max(crit, key=crit.get)
    assert crit[best] > 1.05 * max(v for k, v in crit.items() if k != best)   # a clear winner
    # without gamma (q = sigmoid(s_a - s_b), the old criterion) another pair wins
    crit0 = {k: _g(s, 0.0, *k) * (a0[k[0], k[0]] + a0[k[1], k[1]] - 2 * a0[k]) for k in crit}
    assert max(crit0, key=crit0.get) != best
    orders = set()
    for k in range(8):                                                    # the same pair for any key, random order
        (pick,) = _pairs(*laplace_comparisons(c, 1, key=jax.random.key(k), debias="learn"))
        assert frozenset(pick) == frozenset(best)
        orders.add(pick)
    assert len(orders) == 2
    # several picks: Sherman-Morrison within the batch matches the determinant-ratio reference
    for k in range(3):
        got = _pairs(*laplace_comparisons(c, 4, key=jax.random.key(k), debias="learn"))
        assert [frozenset(p) for p in got] == _reference(s, gamma, a0, used, 4, drawn=got)


def test_laplace_selection_symmetric_with_bias_sums_both_orders():
    c, i, j = _biased_context()
    s, gamma, a0 = _fit(c)
    used = set(zip(i.tolist(), j.tolist()))
    ni, nj = (np.asarray(x) for x in laplace_comparisons(c, 4, key=jax.random.key(3), symmetric=True,
                                                         debias="learn"))
    got = _pairs(ni[0::2], nj[0::2])
    assert [frozenset(p) for p in got] == _reference(s, gamma, a0, used, 2, symmetric=True, drawn=got)
    np.testing.assert_array_equal(ni[0::2], nj[1::2])


def test_sherman_morrison_update_matches_numpy_inverse_with_ordered_gain():
    c, _, _ = _biased_context()
    fit = laplace_posterior(c, BradleyTerrySolver(debias="learn"))
    s, gamma, a0 = _fit(c)
    g = np.array([[_g(s, gamma, a, b) for b in range(5)] for a in range(5)])
    avail = ~np.eye(5, dtype=bool)
    for flip in (False, True):
        a, b, live, a1 = _greedy_loop(fit.posterior.covariance + 1.0 / 5, jnp.asarray(avail),
                                      jnp.asarray(g, jnp.float32), 1, jnp.full(1, flip))
        a, b = int(a[0]), int(b[0])
        assert bool(live[0]) and (a > b) == flip
        v = np.zeros(5); v[a], v[b] = 1, -1
        want = np.linalg.inv(np.linalg.inv(a0) + g[a, b] * np.outer(v, v))   # the drawn order's gain
        np.testing.assert_allclose(np.asarray(a1, np.float64), want, rtol=2e-4, atol=2e-5)


def test_one_order_left_is_scored_by_its_own_gain():
    """Pair {0, 4} judged as (0, 4): only (4, 0) is left, scored and judged with g_40."""
    c, i, j = _biased_context()
    c = jr.Comparisons.from_pairs(np.r_[i, 0], np.r_[j, 4], np.r_[np.asarray(c.p), 0.99].astype(np.float32),
                                  num_items=5)
    s, gamma, a0 = _fit(c)
    used = set(zip(np.asarray(c.i).tolist(), np.asarray(c.j).tolist()))
    for k in range(2):
        got = _pairs(*laplace_comparisons(c, 3, key=jax.random.key(k), debias="learn"))
        assert [frozenset(p) for p in got] == _reference(s, gamma, a0, used, 3, drawn=got)
        assert not used & set(got)


def test_without_bias_the_order_stays_random():
    rng = np.random.default_rng(0)
    i = np.r_[0, 1, 2, 3, 4]
    j = np.r_[1, 2, 3, 4, 5]
    c = jr.Comparisons.from_pairs(i, j, rng.uniform(0.3, 0.7, 5).astype(np.float32), num_items=6)
    picks = set()
    for k in range(12):
        ni, nj = laplace_comparisons(c, 1, key=jax.random.key(k))
        picks.add((int(ni[0]), int(nj[0])))
    assert len({frozenset(p) for p in picks}) == 1 and len(picks) == 2   # one pair, both orders by key


# ------------------------------------------------------------------ argument checks before any judging
def _recording_judge():
    calls = []

    def judge(i, j):
        calls.append(len(i))
        return np.full(len(i), 0.5)
    return judge, calls


@pytest.mark.parametrize("bad, match", [
    (dict(num_samples=0), "num_samples"), (dict(num_samples=2.9), "num_samples"),
    (dict(num_samples=True), "num_samples"), (dict(callback=3), "callback"),
    (dict(key=None), "key"), (dict(key=jax.random.split(jax.random.key(0), 2)), "key"),
    (dict(key=jax.random.split(jax.random.PRNGKey(0), 2)), "key"),
])
def test_active_rejects_bad_settings_before_calling_the_judge(bad, match):
    judge, calls = _recording_judge()
    kw = dict(batch_size=2, budget=8, key=jax.random.key(0)) | bad
    with pytest.raises(ValueError, match=match):
        jr.selection.active_assess(judge, 4, **kw)
    assert calls == []
    with pytest.raises(ValueError, match="judge_fn"):
        jr.selection.active_assess(np.zeros((4, 4)), 4, batch_size=2, budget=8, key=jax.random.key(0))


def test_item_mask_and_key_errors_name_the_argument():
    k = jax.random.key(0)
    for fn in (jr.selection.greedy_comparisons, jr.selection.random_comparisons):
        with pytest.raises(ValueError, match=r"item_mask must have shape \(5,\)"):
            fn(k, 5, 6, item_mask=np.ones((2, 5), bool))                 # one key: no batch axis
        with pytest.raises(ValueError, match=r"item_mask must have shape \(3, 5\)"):
            fn(jax.random.split(k, 3), 5, 6, item_mask=np.ones((2, 5), bool))
        with pytest.raises(ValueError, match="item_mask.*0.5"):
            fn(k, 5, 6, item_mask=[0.5, 1, 1, 1, 1])                      # a probability is not a mask
        ones = np.asarray(fn(k, 5, 6, item_mask=np.array([0.0, 1, 1, 1, 1]))[0])
        bools = np.asarray(fn(k, 5, 6, item_mask=np.array([False, True, True, True, True]))[0])
        np.testing.assert_array_equal(ones, bools)                        # exact 0/1 is a mask
        assert 0 not in ones
    c, _, _ = _biased_context()
    with pytest.raises(ValueError, match="key"):
        laplace_comparisons(c, 1, key=None)
    with pytest.raises(ValueError, match="single jax.random key"):
        laplace_comparisons(c, 1, key=jax.random.split(k, 2))


# ------------------------------------------------------------------ all means tied
def test_confidence_of_an_all_tied_posterior_is_zero_not_nan():
    i, j = np.nonzero(~np.eye(4, dtype=bool))
    tied = jr.Comparisons.from_pairs(i, j, np.full(len(i), 0.5, np.float32), num_items=4)
    post = jr.laplace_bradley_terry(tied)
    assert np.ptp(np.asarray(post.mean)) == 0 and np.all(np.diag(np.asarray(post.covariance)) > 0)
    conf = jr.ranking_confidence(post, key=jax.random.key(0))
    assert float(conf) == 0.0                                             # nothing is ordered
    assert float(jr.ranking_confidence(post, rule="adjacent")) == 0.5     # Phi(0) for every adjacent pair
    # in a batch, the tied context gives 0 and a clearly ordered one its own value (vs a NumPy estimate)
    ordered = jr.Comparisons.from_pairs(i, j, expit(np.array([0.0, 1, 2, 3])[i] - np.array([0.0, 1, 2, 3])[j]
                                                    ).astype(np.float32), num_items=4)
    both = jr.laplace_bradley_terry(jr.stack_contexts([tied, ordered]))
    got = np.asarray(jr.ranking_confidence(both, key=jax.random.key(1), num_samples=4000))
    po = jr.laplace_bradley_terry(ordered)
    m, cov = np.asarray(po.mean, np.float64), np.asarray(po.covariance, np.float64)
    draws = np.random.default_rng(0).multivariate_normal(m, cov, size=4000)
    rm = np.argsort(np.argsort(m))
    rho = [1 - 6 * np.sum((np.argsort(np.argsort(d)) - rm) ** 2) / (4 * 15) for d in draws]
    assert got[0] == 0.0 and abs(got[1] - np.mean(rho)) < 0.03


def test_active_with_an_uninformative_judge_records_zero_confidence():
    seen = []
    out = jr.selection.active_assess(lambda i, j: np.full(len(i), 0.5), 5, batch_size=4, budget=12,
                                     key=jax.random.key(0), rank_confidence=0.5,
                                     callback=lambda r, u, conf, post: seen.append(conf))
    assert out.stopped == "budget" and np.all(np.isfinite(out.history)) and np.all(out.history[:, 1] == 0)
    assert seen == [0.0] * len(out.history)


def test_laplace_selection_picks_each_pair_at_most_once_per_call():
    """Within one call no pair is picked in both orders (the docstring's promise): asking for more comparisons
    than the C(N, 2) pairs of a path gives each pair once, and the rest of the slots are empty (i == j)."""
    n = 6
    i = np.arange(n - 1)
    c = jr.Comparisons.from_pairs(i, i + 1, np.full(n - 1, 0.6, np.float32), num_items=n)
    for k in (10, 20, 25):
        a, b = (np.asarray(x) for x in laplace_comparisons(c, k, key=jax.random.key(0)))
        live = a != b
        pairs = [tuple(sorted(x)) for x in zip(a[live].tolist(), b[live].tolist())]
        assert len(pairs) == len(set(pairs)) == min(k, n * (n - 1) // 2)
        # an ordered pair already judged is never asked again
        assert not set(zip(a[live].tolist(), b[live].tolist())) & set(zip(i.tolist(), (i + 1).tolist()))
