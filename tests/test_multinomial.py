"""The device binomial and multinomial samplers (jaxrank/_multinomial.py) against SciPy's distributions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrank import _multinomial as mn


def _chi2_pvalue(k, n, p):
    """Chi-square goodness of fit of draws ``k`` to Binomial(n, p), bins of expected count >= 20."""
    num = len(k)
    lo, hi = (int(x) for x in stats.binom.ppf([1e-7, 1 - 1e-7], n, p))
    support = np.arange(max(lo - 1, 0), min(hi + 2, n) + 1)
    expect = stats.binom.pmf(support, n, p) * num
    observed = np.bincount((k.astype(np.int64) - support[0]).clip(0, len(support) - 1), minlength=len(support))
    bins_o, bins_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expect):
        acc_o += o
        acc_e += e
        if acc_e >= 20:
            bins_o.append(acc_o); bins_e.append(acc_e); acc_o = acc_e = 0.0
    bins_o[-1] += acc_o
    bins_e[-1] += acc_e
    o, e = np.array(bins_o), np.array(bins_e)
    return stats.chi2.sf(((o - e) ** 2 / e).sum(), len(o) - 1)


# inversion (n min(p, 1-p) < 10), BTRS, both sides of p = 1/2, the 2^24 float32 limit
CASES = [(1, 0.5), (5, 0.3), (19, 0.5), (30, 0.2), (1000, 0.003), (40, 0.3), (100, 0.5), (1000, 0.9),
         (25, 0.41), (12345, 0.77), (2**23, 0.37), (2**24 - 1, 0.5)]


@pytest.mark.parametrize("n, p", CASES)
def test_binomial_matches_scipy(n, p):
    num = 200_000
    k = np.asarray(jax.jit(mn.binomial)(jax.random.key(n % 1000 + 7), jnp.full(num, float(n)), jnp.full(num, p)))
    assert np.all(k == np.round(k)) and k.min() >= 0 and k.max() <= n
    assert _chi2_pvalue(k, n, p) > 1e-4
    sd = np.sqrt(n * p * (1 - p))
    assert abs(k.mean() - n * p) < 5 * sd / np.sqrt(num)
    np.testing.assert_allclose(k.var(), sd**2, rtol=0.03)


def test_binomial_edge_values_and_shapes():
    n = jnp.array([[0.0, 7.0, 7.0], [3.0, 50.0, 0.0]])
    p = jnp.array([[0.3, 0.0, 1.0], [1.0, 0.0, 0.0]])
    np.testing.assert_array_equal(mn.binomial(jax.random.key(0), n, p), [[0, 0, 7], [3, 0, 0]])
    # mixed parameters in one call: each element follows its own binomial
    rng = np.random.default_rng(0)
    nn = rng.integers(0, 400, 50_000).astype(np.float32)
    pp = rng.random(50_000).astype(np.float32)
    k = np.asarray(jax.jit(mn.binomial)(jax.random.key(1), jnp.asarray(nn), jnp.asarray(pp)))
    z = (k - nn * pp) / np.sqrt(np.maximum(nn * pp * (1 - pp), 1e-12))
    live = nn * pp * (1 - pp) > 1
    assert abs(z[live].mean()) < 0.02 and abs(z[live].var() - 1) < 0.03


def test_tree_fractions_split_every_node_by_its_masses():
    masses = np.array([3.0, 0.0, 5.0, 1.0, 7.0, 2.0, 0.0])
    t = mn.tree(masses)
    k = len(masses)
    node = np.zeros(2 * k)
    node[k:] = masses
    for h in range(k - 1, 0, -1):
        node[h] = node[2 * h] + node[2 * h + 1]
        want = node[2 * h] / node[h] if node[h] else 0.0
        assert t.frac[h] == pytest.approx(want)
    covered = sorted(h for s, e in zip(t.starts, t.ends) for h in range(s, min(s + mn.CHUNK, e)))
    assert covered == list(range(1, k))                        # every internal node drawn once


@pytest.mark.parametrize("k", [1, 2, 7, 300, 600])
def test_multinomial_moments(k):
    """Mean M q, variance M q (1 - q), and the covariance -M q_i q_j through subset sums."""
    rng = np.random.default_rng(k)
    masses = rng.integers(0, 50, k).astype(np.float64)
    masses[0] += 1
    m = masses.sum()
    q = masses / m
    t = mn.tree(masses)
    num = 4000
    x = np.asarray(jax.jit(mn.multinomial, static_argnums=(5, 6))(
        jax.random.key(k), jnp.asarray(t.frac, jnp.float32), t.starts, t.ends, float(m), num, t.num_categories))
    assert x.shape == (num, k)
    np.testing.assert_array_equal(x.sum(1), m)
    assert np.all(x[:, masses == 0] == 0)
    sd = np.sqrt(m * q * (1 - q))
    assert np.all(np.abs(x.mean(0) - m * q) <= 5 * sd / np.sqrt(num) + 1e-9)
    live = q > 0.01
    np.testing.assert_allclose(x.var(0, ddof=1)[live], (sd**2)[live], rtol=0.15)
    if k > 1:
        # Var(sum over S) = M Q_S (1 - Q_S): independent counts would give M Q_S (twice as much at Q_S = 1/2)
        for seed in range(3):
            sub = np.random.default_rng(seed).random(k) < 0.5
            qs = q[sub].sum()
            if 0.2 < qs < 0.8:
                np.testing.assert_allclose(x[:, sub].sum(1).var(ddof=1), m * qs * (1 - qs), rtol=0.12)
        if k >= 2 and live[:2].all():
            cov = np.cov(x[:, 0], x[:, 1])[0, 1]
            assert abs(cov + m * q[0] * q[1]) < 5 * np.sqrt(m * q[0] * m * q[1] / num)


def test_prefix_count_and_compaction():
    rng = np.random.default_rng(0)
    for size in (5, 128, 1000, 70_001):
        todo = rng.random(size) < 0.3
        np.testing.assert_array_equal(mn._prefix_count(jnp.asarray(todo)), np.cumsum(todo))
        cap = max(1, size // 4)
        idx = np.asarray(mn._compact(jnp.asarray(todo), cap))
        want = np.nonzero(todo)[0][:cap]
        np.testing.assert_array_equal(idx[:len(want)], want)
        assert np.all(idx[len(want):] == size)
