"""Review: max_likelihood_ranking's options: eps = 0 refused (a judgement of p = 0 or 1 has an infinite
log-likelihood; the search returned a wrong ranking), init checked for NaN/inf, eps and tol traceable.
Yardstick: the best of all orders by brute force (float64 NumPy)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr


def _brute_force(i, j, p, n, eps):
    pc = np.clip(p, eps, 1 - eps)
    lp, lq = np.log(pc), np.log1p(-pc)

    def ll(order):
        pos = np.empty(n, int)
        pos[list(order)] = np.arange(n)
        return np.sum(np.where(pos[i] < pos[j], lp, lq))

    best = max(itertools.permutations(range(n)), key=ll)
    return ll(best), ll


def test_eps_zero_is_refused_naming_eps():
    a, b = np.nonzero(np.triu(np.ones((5, 5)), 1))
    c = jr.Comparisons.from_pairs(a, b, np.ones(len(a), np.float32), num_items=5)
    with pytest.raises(ValueError, match="eps"):
        jr.max_likelihood_ranking(c, eps=0.0, init=jnp.arange(5.0))


@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_init_must_be_finite(bad):
    a, b = np.nonzero(np.triu(np.ones((5, 5)), 1))
    c = jr.Comparisons.from_pairs(a, b, np.full(len(a), 0.9, np.float32), num_items=5)
    with pytest.raises(ValueError, match="init"):
        jr.max_likelihood_ranking(c, init=jnp.asarray([0.0, 0.0, bad, 0.0, 0.0]))


def test_traced_eps_and_tol_under_jit_find_the_brute_force_optimum():
    rng = np.random.default_rng(3)
    n, r = 6, 14
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0, 1, r)
    p[:2] = [0.0, 1.0]
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)
    eps = 1e-3
    out = jax.jit(lambda e, t: jr.max_likelihood_ranking(c, eps=e, tol=t))(jnp.float32(eps), jnp.float32(1e-6))
    best, ll = _brute_force(i, j, p, n, eps)
    assert ll(np.argsort(-np.asarray(out))) >= best - 1e-4
