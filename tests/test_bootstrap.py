"""Bootstrap over comparisons: multinomial resampling, one vmapped call, coverage on synthetic data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit

import jaxrank as jr
from jaxrank.bootstrap import bootstrap, bootstrap_intervals, percentile_intervals, resample_comparisons
from compile_log import CompileLog


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    ctxs = []
    for n, r in ((5, 12), (7, 20), (6, 9)):
        a, b = np.nonzero(~np.eye(n, dtype=bool))
        k = rng.choice(len(a), r, replace=False)
        i, j = a[k], b[k]
        ctxs.append(jr.Comparisons.from_pairs(i, j, rng.uniform(0.1, 0.9, r).astype(np.float32), num_items=n,
                                              weight=rng.choice([1.0, 2.0], r).astype(np.float32)))
    return jr.stack_contexts(ctxs, num_comparisons=24)


def test_resample_is_a_multinomial_count_per_comparison():
    c = _batch()
    live = np.asarray(c.weight) > 0
    totals = []
    for s in range(200):
        rep = resample_comparisons(c, key=jax.random.key(s))
        w = np.asarray(rep.weight)
        counts = np.where(live, w / np.where(live, np.asarray(c.weight), 1), 0)
        np.testing.assert_allclose(counts, np.round(counts))           # integer counts
        np.testing.assert_array_equal(counts.sum(-1), live.sum(-1))    # R_live draws per context
        assert np.all(w[~live] == 0)                                   # padding stays padding
        for f in ("i", "j", "p", "item_mask"):
            np.testing.assert_array_equal(getattr(rep, f), getattr(c, f))
        totals.append(counts)
    mean = np.mean(totals, axis=0)
    np.testing.assert_allclose(mean[live], 1.0, atol=0.35)              # E[count] = 1, sd 1/sqrt(200)
    assert abs(mean[live].mean() - 1) < 1e-6


def test_bootstrap_one_vmapped_call_equals_replicates_one_by_one():
    c = _batch(1)
    key = jax.random.key(7)
    out = bootstrap(jr.poe_bradley_terry, c, key=key, num_replicates=16, debias="mean")
    assert out.shape == (16, 3, 7)
    keys = jax.random.split(key, 16)
    for b in (0, 9):
        rep = resample_comparisons(c, key=keys[b])
        np.testing.assert_allclose(out[b], jr.poe_bradley_terry(rep, debias="mean"), atol=1e-5)
    assert np.all(np.asarray(out)[:, 0, 5:] == 0)                      # padded items stay neutral
    post = bootstrap(jr.poe_gaussian_posterior, c, key=key, num_replicates=4)   # pytree output
    assert post.mean.shape == (4, 3, 7) and post.covariance.shape == (4, 3, 7, 7)
    with CompileLog() as log:                                          # second call: no compilation
        jax.block_until_ready(bootstrap(jr.poe_bradley_terry, c, key=jax.random.key(8), num_replicates=16,
                                        debias="mean"))
    assert log.records == []


def test_percentile_intervals_match_numpy():
    x = np.random.default_rng(2).normal(size=(500, 3, 4))
    lo, hi = percentile_intervals(x, level=0.9)
    np.testing.assert_allclose(lo, np.percentile(x, 5, axis=0), atol=1e-6)
    np.testing.assert_allclose(hi, np.percentile(x, 95, axis=0), atol=1e-6)
    lo, hi = percentile_intervals(x, level=0.5, axis=1)
    np.testing.assert_allclose(hi, np.percentile(x, 75, axis=1), atol=1e-6)


def test_bootstrap_intervals_cover_true_scores():
    """Data simulated FROM the soft-BT model; nominal 95% intervals must cover about 95%.

    200 contexts of N = 8 items, every ordered pair twice (112 comparisons, the resampling
    units; 28 per item), each with p = the fraction of m = 4 Bernoulli(sigmoid(s_i - s_j))
    draws and weight 4. 200 bootstrap replicates each, all in one call.

    Tolerances: the 1600 intervals are not independent (8 per context share data and the
    centring); across seeds the coverage varies with sd about 0.01 (binomial sd alone
    0.0055), so +-0.025 around the expected value. The *basic* interval and Laplace should
    cover 0.95; the *percentile* interval is expected a little low (about 0.92: the MLE's
    outward bias counted twice, see jaxrank.bootstrap), hence [0.895, 0.97] for it.
    """
    n, m, reps, boot = 8, 4, 200, 200
    rng = np.random.default_rng(11)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    a, b = np.tile(a, 2), np.tile(b, 2)
    true = rng.normal(scale=0.7, size=(reps, n))
    p = rng.binomial(m, expit(true[:, a] - true[:, b])) / m
    c = jr.Comparisons.from_pairs(np.broadcast_to(a, p.shape), np.broadcast_to(b, p.shape), p.astype(np.float32),
                                  num_items=n, weight=np.full(p.shape, float(m), np.float32))
    samples = bootstrap(jr.poe_bradley_terry, c, key=jax.random.key(0), num_replicates=boot)
    estimate = jr.poe_bradley_terry(c)
    centred = true - true.mean(axis=1, keepdims=True)
    cover = {}
    for method in ("percentile", "basic", "normal"):
        lo, hi = (np.asarray(x, float) for x in bootstrap_intervals(samples, estimate=estimate, method=method))
        cover[method] = ((lo <= centred) & (centred <= hi)).mean()
        assert np.median(hi - lo) < 2 * centred.std()                  # not vacuous
    post = jr.laplace_bradley_terry(c)                                 # Laplace on the same data
    cover["laplace"] = (np.abs(np.asarray(post.mean) - centred) <= 1.96 * np.asarray(post.stderr)).mean()
    print("\n95% interval coverage over 1600 intervals: " + ", ".join(f"{k} {v:.4f}" for k, v in cover.items()))
    assert 0.895 <= cover["percentile"] <= 0.97
    for method in ("basic", "normal", "laplace"):
        assert 0.925 <= cover[method] <= 0.975, method


def test_bootstrap_arguments():
    c = _batch()
    k = jax.random.key(0)
    with pytest.raises(ValueError, match="num_replicates"):
        bootstrap(jr.poe_gaussian, c, key=k, num_replicates=0)
    with pytest.raises(ValueError, match="callable"):
        bootstrap("poe", c, key=k, num_replicates=2)
    with pytest.raises(ValueError, match="Comparisons"):
        bootstrap(jr.poe_gaussian, np.zeros(3), key=k, num_replicates=2)
    with pytest.raises(ValueError, match="level"):
        percentile_intervals(np.zeros((3, 2)), level=1.0)
    with pytest.raises(ValueError, match="estimate"):
        bootstrap_intervals(np.zeros((3, 2)), method="basic")
    with pytest.raises(ValueError, match="method"):
        bootstrap_intervals(np.zeros((3, 2)), method="bca")


def _count_data(seed=0, n=8, pairs=40, games=60):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    a = rng.integers(0, n, pairs)
    b = (a + rng.integers(1, n, pairs)) % n
    g = rng.integers(1, games, pairs).astype(np.float64)
    won = rng.binomial(g.astype(int), 1 / (1 + np.exp(-(s[a] - s[b])))).astype(np.float64)
    return a, b, g, won, n


def test_bootstrap_outcomes_resamples_raw_outcomes_multinomially():
    a, b, g, won, n = _count_data(1)
    c = jr.Comparisons.from_pairs(a, b, won / g, num_items=n, weight=g)
    cells = lambda cc: jnp.stack([cc.weight, cc.p * cc.weight], -1)      # the replicate's counts
    rep = np.asarray(jr.bootstrap_outcomes(cells, c, num_replicates=2000, key=jax.random.key(3)), np.float64)
    games, wins = rep[..., 0], rep[..., 1]
    m = g.sum()
    np.testing.assert_allclose(games.sum(-1), m)                           # M outcomes in every replicate
    np.testing.assert_allclose(wins, np.round(wins), atol=1e-3)            # whole wins
    assert np.all(wins <= games + 1e-3)
    # Multinomial(M, n/M) over (comparison, winner): means n, variances M q (1 - q), q = n / M
    q = np.stack([won, g - won], -1).reshape(-1) / m
    cat = np.stack([wins, games - wins], -1).reshape(len(rep), -1)
    np.testing.assert_allclose(cat.mean(0), q * m, atol=4 * np.sqrt(m * q * (1 - q) / len(rep)).max())
    np.testing.assert_allclose(cat.var(0, ddof=1), m * q * (1 - q), rtol=0.2)
    # covariances -M q_i q_j: the sum over half of the categories has variance M Q (1 - Q), not M Q
    for seed in range(3):
        sub = np.random.default_rng(seed).random(len(q)) < 0.5
        qs = q[sub].sum()
        np.testing.assert_allclose(cat[:, sub].sum(1).var(ddof=1), m * qs * (1 - qs), rtol=0.12)
    c01 = np.cov(cat[:, 0], cat[:, 1])[0, 1]
    assert abs(c01 + m * q[0] * q[1]) < 5 * np.sqrt(m * q[0] * m * q[1] / len(rep))


def test_bootstrap_outcomes_draws_on_the_device_from_its_key():
    a, b, g, won, n = _count_data(7)
    c = jr.Comparisons.from_pairs(a, b, won / g, num_items=n, weight=g)
    games = lambda cc: cc.weight
    k = jax.random.key(11)
    one = np.asarray(jr.bootstrap_outcomes(games, c, num_replicates=8, key=k))
    np.testing.assert_array_equal(one, np.asarray(jr.bootstrap_outcomes(games, c, num_replicates=8, key=k)))
    assert not np.array_equal(one, np.asarray(jr.bootstrap_outcomes(games, c, num_replicates=8,
                                                                    key=jax.random.key(12))))
    np.testing.assert_array_equal(jr.bootstrap_outcomes(games, c, num_replicates=8, key=jax.random.key(5)),
                                  jr.bootstrap_outcomes(games, c, num_replicates=8, key=jax.random.key(5)))
    big = jr.Comparisons.from_pairs(a[:2], b[:2], np.array([0.5, 0.5]), num_items=n,
                                    weight=np.array([2.0**24, 2.0]))
    with pytest.raises(ValueError, match="float32"):
        jr.bootstrap_outcomes(games, big, num_replicates=2)


def test_bootstrap_outcomes_spread_matches_the_fisher_standard_error():
    a, b, g, won, n = _count_data(2, pairs=60, games=200)
    c = jr.Comparisons.from_pairs(a, b, won / g, num_items=n, weight=g)
    reps = np.asarray(jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=600, key=jax.random.key(0), eps=0.0))
    s = np.asarray(jr.poe_bradley_terry(c, eps=0.0), np.float64)
    q = 1 / (1 + np.exp(-(s[a] - s[b])))                                   # float64 Fisher information at the MLE
    h = g * q * (1 - q)
    fisher = np.zeros((n, n))
    np.add.at(fisher, (a, a), h); np.add.at(fisher, (b, b), h); np.add.at(fisher, (a, b), -h); np.add.at(fisher, (b, a), -h)
    se = np.sqrt(np.diag(np.linalg.pinv(fisher)))
    ratio = reps.std(0, ddof=1) / se
    assert 0.9 < ratio.mean() < 1.1 and np.all((ratio > 0.75) & (ratio < 1.25)), ratio


def test_bootstrap_outcomes_bad_input():
    a, b, g, won, n = _count_data(3)
    c = jr.Comparisons.from_pairs(a, b, won / g, num_items=n, weight=g)
    with pytest.raises(ValueError, match="whole numbers"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c.with_p(jnp.full_like(c.p, 0.3)), num_replicates=4)
    with pytest.raises(ValueError, match="one context"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, jr.stack_contexts([c, c]), num_replicates=4)
    with pytest.raises(ValueError, match="num_replicates"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=0)
    with pytest.raises(ValueError, match="chunks"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=4, chunks=0)


def test_bootstrap_outcomes_with_draws_resamples_three_categories():
    a, b, g, won, n = _count_data(4)
    rng = np.random.default_rng(5)
    d = np.floor(rng.random(len(g)) * (g - won + 1))                       # draws among the games A did not win
    c = jr.Comparisons.from_pairs(a, b, (won + d / 2) / g, num_items=n, weight=g)
    cells = lambda cc: jnp.stack([cc.weight, cc.p * cc.weight], -1)
    rep = np.asarray(jr.bootstrap_outcomes(cells, c, num_replicates=3000, key=jax.random.key(1), draws=d), np.float64)
    games, wins = rep[..., 0], rep[..., 1]                                   # wins = A's wins + draws / 2
    m = g.sum()
    np.testing.assert_allclose(games.sum(-1), m)
    np.testing.assert_allclose(2 * wins, np.round(2 * wins), atol=1e-3)     # half-integers where draws are odd
    qa, qd, qg = won / m, d / m, g / m                                       # Multinomial(M, q) over (cell, A/B/draw)
    np.testing.assert_allclose(wins.mean(0), m * (qa + qd / 2), atol=4 * np.sqrt(m * qg / len(rep)).max())
    var = m * (qa * (1 - qa) + qd * (1 - qd) / 4 - qa * qd)                 # Var(A + D/2)
    np.testing.assert_allclose(wins.var(0, ddof=1), var, rtol=0.2)
    np.testing.assert_allclose(games.var(0, ddof=1), m * qg * (1 - qg), rtol=0.2)
    # Only draws in a cell: every replicate gives it p = 1/2 exactly.
    only = jr.Comparisons.from_pairs(a[:3], b[:3], np.full(3, 0.5), num_items=n, weight=np.array([4.0, 6.0, 2.0]))
    rp = np.asarray(jr.bootstrap_outcomes(lambda cc: cc.p, only, num_replicates=50, draws=[4, 6, 2]))
    games_only = np.asarray(jr.bootstrap_outcomes(lambda cc: cc.weight, only, num_replicates=50, draws=[4, 6, 2]))
    np.testing.assert_array_equal(rp[games_only > 0], 0.5)


def test_bootstrap_outcomes_draws_bad_input():
    a, b, g, won, n = _count_data(6)
    ok = (won < g).astype(np.float64)                                            # one draw where A lost a game
    c = jr.Comparisons.from_pairs(a, b, (won + ok / 2) / g, num_items=n, weight=g)
    with pytest.raises(ValueError, match="whole numbers"):                       # draws not declared
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=4)
    assert np.asarray(jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=4, draws=ok)).shape == (4, n)
    with pytest.raises(ValueError, match="draws must have shape"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=4, draws=ok[:-1])
    with pytest.raises(ValueError, match="draws must count"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=4, draws=ok + 0.5)
    with pytest.raises(ValueError, match="draws must count"):
        jr.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=4, draws=g + 1)


def test_bootstrap_outcomes_seed_is_the_deprecated_name_of_key():
    a, b, g, won, n = _count_data(2, n=5, pairs=12, games=20)
    c = jr.Comparisons.from_pairs(a, b, won / g, num_items=n, weight=g)
    games = lambda cc: jnp.stack([cc.weight, cc.p * cc.weight], -1)
    new = np.asarray(jr.bootstrap_outcomes(games, c, num_replicates=4, key=jax.random.key(7)))
    with pytest.warns(DeprecationWarning, match="seed"):
        old = np.asarray(jr.bootstrap_outcomes(games, c, num_replicates=4, seed=7))
    np.testing.assert_array_equal(old, new)
    with pytest.raises(ValueError, match="key= only"):
        jr.bootstrap_outcomes(games, c, num_replicates=4, seed=7, key=jax.random.key(7))


def test_bootstrap_int_seed_and_bad_key():
    """An int seed is jax.random.key(seed) (as bootstrap_outcomes accepts); anything else names key."""
    c = _batch()
    got = bootstrap(jr.poe_gaussian, c, key=3, num_replicates=4)
    ref = bootstrap(jr.poe_gaussian, c, key=jax.random.key(3), num_replicates=4)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    legacy = bootstrap(jr.poe_gaussian, c, key=jax.random.PRNGKey(3), num_replicates=4)
    assert np.asarray(legacy).shape == np.asarray(ref).shape
    for bad in ("3", 3.0, None, True, np.zeros(3)):
        with pytest.raises(ValueError, match="key"):
            bootstrap(jr.poe_gaussian, c, key=bad, num_replicates=2)
    with pytest.raises(ValueError, match="key"):
        resample_comparisons(c, key="seed")
    np.testing.assert_array_equal(np.asarray(resample_comparisons(c, key=5).weight),
                                  np.asarray(resample_comparisons(c, key=jax.random.key(5)).weight))


def test_bootstrap_intervals_estimate_shape():
    rng = np.random.default_rng(0)
    samples = rng.normal(size=(50, 3, 4))
    with pytest.raises(ValueError, match="estimate"):
        bootstrap_intervals(samples, estimate=np.zeros((3, 5)), method="basic")
    with pytest.raises(ValueError, match="estimate"):
        bootstrap_intervals(samples, estimate=np.zeros((2, 3, 4)), method="normal")
    est = rng.normal(size=(3, 4))
    lo, hi = bootstrap_intervals(samples, estimate=est, method="normal", level=0.9)
    sd = samples.std(axis=0, ddof=1)
    np.testing.assert_allclose(np.asarray(lo), est - 1.6448536269514722 * sd, rtol=1e-5)
    lo, hi = bootstrap_intervals(samples, estimate=est, method="basic", level=0.9)
    q = np.quantile(samples, [0.05, 0.95], axis=0)
    np.testing.assert_allclose(np.asarray(hi), 2 * est - q[0], rtol=1e-5, atol=1e-6)
    lo, hi = bootstrap_intervals(samples.transpose(1, 0, 2), estimate=est[:, :1], method="basic", axis=1)
    assert np.shape(lo) == (3, 4)
