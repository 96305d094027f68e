"""max_likelihood_ranking against a NumPy brute force (llm-comparative-assessment App. B).

log L(r) = sum_k w_k [z_k log p_k + (1 - z_k) log(1 - p_k)],  z_k = 1[i_k ranked above j_k].
"""

import itertools

import jax
import numpy as np
import pytest

from jaxrank import Comparisons, max_likelihood_ranking, poe_gaussian, stack_contexts

EPS = 1e-6


# ----------------------------------------------------------------- references
def _loglik_orders(orders, i, j, p, w):
    """log L of each order (rows of ``orders``, best first), straight from the comparisons."""
    orders = np.atleast_2d(orders)
    pos = np.empty_like(orders)
    pos[np.arange(len(orders))[:, None], orders] = np.arange(orders.shape[1])[None, :]
    z = pos[:, i] < pos[:, j]                                   # [P, R]
    pc = np.clip(np.asarray(p, float), EPS, 1 - EPS)
    return np.sum(w * np.where(z, np.log(pc), np.log1p(-pc)), axis=1)


def _brute_force_best(i, j, p, w, n):
    perms = np.array(list(itertools.permutations(range(n))))
    ll = _loglik_orders(perms, i, j, p, w)
    return ll.max(), perms[np.argmax(ll)]


def _insertion_neighbours(order):
    n = len(order)
    out = []
    for t in range(n):
        rest = list(order[:t]) + list(order[t + 1:])
        for u in range(n):
            if u != t:
                out.append(rest[:u] + [order[t]] + rest[u:])
    return np.array(out)


def _order_from_scores(s):
    return np.argsort(-np.asarray(s, float), kind="stable")


def _random_instance(rng, n, frac):
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    keep = rng.random(len(a)) < frac
    if keep.sum() < n:
        keep[:] = True
    i, j = a[keep], b[keep]
    p = rng.random(len(i)).astype(np.float32)
    return i, j, p


def _instances(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        n = int(rng.integers(5, 8))
        frac = 1.0 if k % 3 == 0 else float(rng.uniform(0.4, 0.9))
        out.append((n,) + _random_instance(rng, n, frac))
    return out


INSTANCES = _instances(30, 0)


@pytest.fixture(scope="module")
def solved():
    """Solve every instance (unit weights) in ONE padded batched call (one compilation).

    Returns [(n, i, j, p, scores, init)] with the padding stripped; padded items must score 0.
    """
    ctxs = [Comparisons.from_pairs(i, j, p, num_items=n) for n, i, j, p in INSTANCES]
    batch = stack_contexts(ctxs, num_items=7, num_comparisons=42)
    scores = np.asarray(max_likelihood_ranking(batch))
    inits = np.asarray(poe_gaussian(batch))
    res = []
    for k, (n, i, j, p) in enumerate(INSTANCES):
        np.testing.assert_array_equal(scores[k, n:], 0.0)
        res.append((n, i, j, p, scores[k, :n], inits[k, :n]))
    return res


# ----------------------------------------------------------------- properties
def test_scores_are_centred_permutation_ranks(solved):
    for n, *_, s, _ in solved:
        want = np.arange(n) - (n - 1) / 2
        np.testing.assert_allclose(np.sort(s), want, atol=1e-6)


def test_not_worse_than_poe_gaussian_start(solved):
    for n, i, j, p, s, init in solved:
        w = np.ones(len(i))
        ll = _loglik_orders(_order_from_scores(s), i, j, p, w)[0]
        ll0 = _loglik_orders(_order_from_scores(init), i, j, p, w)[0]
        assert ll >= ll0 - 1e-4


def test_is_local_optimum_under_insertion_moves(solved):
    for n, i, j, p, s, _ in solved:
        w = np.ones(len(i))
        order = _order_from_scores(s)
        ll = _loglik_orders(order, i, j, p, w)[0]
        nb = _loglik_orders(_insertion_neighbours(order), i, j, p, w)
        assert nb.max() <= ll + 1e-5, (n, nb.max() - ll)


def test_mostly_matches_brute_force_optimum(solved):
    hits = 0
    for n, i, j, p, s, _ in solved:
        w = np.ones(len(i))
        best, _ = _brute_force_best(i, j, p, w, n)
        ll = _loglik_orders(_order_from_scores(s), i, j, p, w)[0]
        assert ll <= best + 1e-9
        hits += ll >= best - 1e-4
    frac = hits / len(solved)
    print(f"\nML ranking equals the brute-force optimum on {hits}/{len(solved)} = {frac:.0%} instances")
    assert frac >= 0.8


def test_weights_act_as_repeats():
    rng = np.random.default_rng(5)
    n = 6
    i, j, p = _random_instance(rng, n, 0.7)
    w = rng.integers(1, 4, len(i)).astype(np.float32)
    c = Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    s = np.asarray(max_likelihood_ranking(c))
    order = _order_from_scores(s)
    ll = _loglik_orders(order, i, j, p, w)[0]
    assert _loglik_orders(_insertion_neighbours(order), i, j, p, w).max() <= ll + 1e-5
    # the same comparisons written out as repeats give the same ranking
    rep = np.repeat(np.arange(len(i)), w.astype(int))
    c_rep = Comparisons.from_pairs(i[rep], j[rep], p[rep], num_items=n)
    np.testing.assert_array_equal(np.asarray(max_likelihood_ranking(c_rep)), s)


@pytest.mark.parametrize("seed", range(4))
def test_perfect_judge_recovers_true_order(seed):
    rng = np.random.default_rng(20 + seed)
    n = 7
    true = rng.permutation(n).astype(float)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    p = np.where(true[a] > true[b], 0.9, 0.1).astype(np.float32)
    c = Comparisons.from_pairs(a, b, p, num_items=n)
    want = true - (n - 1) / 2
    np.testing.assert_array_equal(np.asarray(max_likelihood_ranking(c)), want)
    # also from an adversarial start: the reversed order
    np.testing.assert_array_equal(np.asarray(max_likelihood_ranking(c, init=-true)), want)
    # and from a random start
    np.testing.assert_array_equal(np.asarray(max_likelihood_ranking(c, init=rng.normal(size=n))), want)


def test_padding_batch_jit_and_vmap():
    rng = np.random.default_rng(30)
    sizes = (5, 7, 6)
    ctxs, singles = [], []
    for n in sizes:
        i, j, p = _random_instance(rng, n, 0.8)
        c = Comparisons.from_pairs(i, j, p, num_items=n)
        ctxs.append(c)
        singles.append(np.asarray(max_likelihood_ranking(c)))
    batch = stack_contexts(ctxs)
    got = np.asarray(max_likelihood_ranking(batch))
    assert got.shape == (3, 7)
    for k, n in enumerate(sizes):
        np.testing.assert_array_equal(got[k, :n], singles[k])
        np.testing.assert_array_equal(got[k, n:], 0.0)
        np.testing.assert_allclose(np.sort(got[k, :n]), np.arange(n) - (n - 1) / 2)
    got_j = np.asarray(jax.jit(lambda cc: max_likelihood_ranking(cc))(batch))
    np.testing.assert_array_equal(got_j, got)
    got_v = np.asarray(jax.vmap(lambda cc: max_likelihood_ranking(cc))(batch))
    np.testing.assert_array_equal(got_v, got)


def test_padded_item_in_the_middle_is_ignored():
    # item 2 is padding (mask False, in no live comparison); real items are 0, 1, 3, 4
    rng = np.random.default_rng(31)
    real = np.array([0, 1, 3, 4])
    a, b = np.nonzero(~np.eye(4, dtype=bool))
    p = rng.random(len(a)).astype(np.float32)
    c4 = Comparisons.from_pairs(a, b, p, num_items=4)
    c5 = Comparisons.from_pairs(real[a], real[b], p, num_items=5,
                                item_mask=np.array([True, True, False, True, True]))
    s4, s5 = np.asarray(max_likelihood_ranking(c4)), np.asarray(max_likelihood_ranking(c5))
    assert s5[2] == 0.0
    np.testing.assert_array_equal(s5[real], s4)
    best, best_order = _brute_force_best(a, b, p, np.ones(len(a)), 4)
    assert _loglik_orders(_order_from_scores(s4), a, b, p, np.ones(len(a)))[0] >= best - 1e-4


def test_bad_init_shape_raises():
    c = Comparisons.from_pairs([0, 1], [1, 2], [0.7, 0.6], num_items=3)
    with pytest.raises(ValueError):
        max_likelihood_ranking(c, init=np.zeros(4))
