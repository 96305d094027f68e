"""Comparison selection (METHODS.md §5): random, greedy Gaussian, Laplace-BT, PairS, active assessment.

Independent NumPy references, written from the papers' equations, live in this file:

* greedy D-optimal selection by brute force: every candidate pair is scored by the
  determinant ratio ``det(M + v v^T) / det(M) - 1`` of the anchored information
  matrix ``M = W~^T W~`` (PoE eq. 13-16), computed with ``np.linalg.slogdet`` (no
  Sherman-Morrison); by the matrix determinant lemma this is the package's
  ``A_aa + A_bb - 2 A_ab``;
* Laplace-BT selection the same way with weights ``q (1 - q)`` (PoE App. A.6);
* PairS: a plain recursive-free merge sort over Python lists with a beam of
  merge paths (Liu et al. 2024).
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit

import jaxrank as jr
from compile_log import CompileLog
from jaxrank.selection import (active_assess, gather_comparisons, greedy_comparisons, laplace_comparisons,
                               pairs_rank, random_comparisons)
from jaxrank.selection.greedy import TIE_TOL, chain_inverse


def _graph_connected(i, j, n, items=None):
    items = set(range(n)) if items is None else set(items)
    adj = {a: set() for a in items}
    for a, b in zip(i, j):
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    start = next(iter(items))
    seen, stack = {start}, [start]
    while stack:
        for nb in adj[stack.pop()]:
            if nb not in seen:
                seen.add(nb)
                stack.append(nb)
    return seen == items


def _logdet_information(i, j, n, w=None):
    """log det of the anchored information matrix W~^T W~ (Laplacian + e_0 e_0^T), PoE eq. 13-15."""
    m = np.zeros((n, n))
    w = np.ones(len(i)) if w is None else w
    for a, b, wk in zip(i, j, w):
        m[a, a] += wk; m[b, b] += wk; m[a, b] -= wk; m[b, a] -= wk
    m[0, 0] += 1.0
    sign, ld = np.linalg.slogdet(m)
    return ld if sign > 0 else -np.inf


# ======================================================================= random
@pytest.mark.parametrize("mode", ["random", "no_repeat", "symmetric"])
def test_random_schemes_properties(mode):
    n, r = 9, 24
    kw = dict(symmetric=mode == "symmetric", no_repeat=mode == "no_repeat")
    keys = jax.random.split(jax.random.key(0), 50)
    i, j = (np.asarray(x) for x in random_comparisons(keys, n, r, **kw))
    assert i.shape == j.shape == (50, r) and i.dtype == np.int32
    for a, b in zip(i, j):
        assert np.all(a != b) and a.min() >= 0 and a.max() < n and b.max() < n
        ordered = set(zip(a.tolist(), b.tolist()))
        assert len(ordered) == r                                     # never the same ordered pair twice
        unordered = {frozenset(p) for p in ordered}
        if mode == "no_repeat":
            assert len(unordered) == r                               # never both orders
        if mode == "symmetric":
            assert len(unordered) == r // 2 and all((y, x) in ordered for x, y in ordered)
        assert _graph_connected(a, b, n)                             # ensure_coverage: connected
    # (batched keys == one key at a time: test_selection_under_jit_vmap_and_without_recompilation)


def test_random_without_coverage_is_uniform_over_ordered_pairs():
    n, r, reps = 6, 10, 3000
    i, j = (np.asarray(x) for x in random_comparisons(jax.random.split(jax.random.key(1), reps), n, r,
                                                       ensure_coverage=False))
    counts = np.zeros((n, n))
    np.add.at(counts, (i.ravel(), j.ravel()), 1)
    off = counts[~np.eye(n, dtype=bool)]
    expect = reps * r / (n * (n - 1))
    sd = np.sqrt(expect * (1 - r / (n * (n - 1))))
    assert np.max(np.abs(off - expect)) < 5 * sd
    # positions balanced: every item is in position A about as often as in B
    assert np.abs(np.bincount(i.ravel(), minlength=n) - np.bincount(j.ravel(), minlength=n)).max() < 6 * np.sqrt(
        reps * r / n)


def test_random_minimal_budget_is_a_spanning_tree_and_masks():
    n = 10
    i, j = random_comparisons(jax.random.split(jax.random.key(2), 20), n, n - 1)
    for a, b in zip(np.asarray(i), np.asarray(j)):
        assert _graph_connected(a, b, n)
    # padded items: only real ones are selected; spare slots hold i == j
    mask = np.array([True] * 4 + [False] * 6)
    i, j = (np.asarray(x) for x in random_comparisons(jax.random.key(3), n, 15, item_mask=mask))
    live = i != j
    assert live.sum() == 12 and np.all(mask[i[live]]) and np.all(mask[j[live]])
    assert _graph_connected(i[live], j[live], n, items=range(4))


def test_random_bad_arguments():
    k = jax.random.key(0)
    with pytest.raises(ValueError, match="exceeds"):
        random_comparisons(k, 5, 21)
    with pytest.raises(ValueError, match="exceeds"):
        random_comparisons(k, 5, 11, no_repeat=True)
    with pytest.raises(ValueError, match="even"):
        random_comparisons(k, 5, 9, symmetric=True)
    with pytest.raises(ValueError, match="below 4"):
        random_comparisons(k, 5, 3)
    with pytest.raises(ValueError, match="below 8"):
        random_comparisons(k, 5, 6, symmetric=True)
    random_comparisons(k, 5, 3, ensure_coverage=False)                 # fine without coverage
    with pytest.raises(ValueError, match="exclusive"):
        random_comparisons(k, 5, 6, symmetric=True, no_repeat=True)
    with pytest.raises(ValueError, match="num_items"):
        random_comparisons(k, 1, 1)
    with pytest.raises(ValueError, match="budget"):
        random_comparisons(k, 5, 2.5)
    with pytest.raises(ValueError, match="key"):
        random_comparisons(np.zeros(3, np.uint32), 5, 6)


def test_gather_comparisons_from_dense_matrix():
    rng = np.random.default_rng(0)
    probs = rng.uniform(size=(3, 6, 6)).astype(np.float32)
    probs[:, np.arange(6), np.arange(6)] = np.nan              # the diagonal is never read
    i, j = random_comparisons(jax.random.key(4), 6, 12)         # one selection for every context
    c = gather_comparisons(probs, i, j)
    assert c.batch_shape == (3,) and c.num_items == 6
    np.testing.assert_array_equal(c.p, probs[:, np.asarray(i), np.asarray(j)])
    full = jr.Comparisons.from_matrix(probs[0] * 0 + np.nan_to_num(probs[0]))
    lookup = {(a, b): p for a, b, p in zip(np.asarray(full.i), np.asarray(full.j), np.asarray(full.p))}
    assert all(lookup[(a, b)] == p for a, b, p in zip(np.asarray(c.i[0]), np.asarray(c.j[0]), np.asarray(c.p[0])))
    # one selection per context, padding slots (i == j) and masked items get weight 0
    mask = np.ones((3, 6), bool)
    mask[2, 4:] = False
    i, j = random_comparisons(jax.random.split(jax.random.key(5), 3), 6, 20, item_mask=mask)
    c = gather_comparisons(probs, i, j, item_mask=mask)
    w = np.asarray(c.weight)
    assert w[:2].sum() == 40 and w[2].sum() == 12
    assert np.all(np.asarray(c.p)[w == 0] == 0.5)
    s = jr.poe_gaussian(c)                                      # usable by every scorer
    assert np.all(np.isfinite(s)) and np.all(np.asarray(s)[2, 4:] == 0)
    with pytest.raises(ValueError, match="broadcast"):
        gather_comparisons(probs, np.zeros((2, 4), int), np.ones((2, 4), int))


# ======================================================================= greedy (Gaussian)
def reference_greedy(chain_pairs, n, num_pairs, weight=1.0, tie_tol=TIE_TOL):
    """Brute-force greedy D-optimal selection (PoE eq. 16): determinant ratios, no Sherman-Morrison."""
    m = np.zeros((n, n))
    m[chain_pairs[0][0], chain_pairs[0][0]] = 1.0               # anchor (any item: det ratios do not depend on it)
    chosen = []

    def add(mat, a, b, w):
        v = np.zeros(n)
        v[a], v[b] = 1.0, -1.0
        return mat + w * np.outer(v, v)

    for a, b in chain_pairs:
        m = add(m, a, b, weight)
        chosen.append(frozenset((a, b)))
    ta, tb = np.triu_indices(n, 1)
    while len(chosen) < num_pairs:
        _, base = np.linalg.slogdet(m)
        crit = np.full(len(ta), -np.inf)
        for k, (a, b) in enumerate(zip(ta, tb)):
            if frozenset((a, b)) in chosen:
                continue
            _, ld = np.linalg.slogdet(add(m, a, b, weight))
            crit[k] = (np.exp(ld - base) - 1) / weight          # = v^T A v
        best = crit.max()
        k = int(np.argmax(crit >= best - tie_tol * max(1.0, abs(best))))
        chosen.append(frozenset((ta[k], tb[k])))
        m = add(m, ta[k], tb[k], weight)
    return chosen


@pytest.mark.parametrize("n,r,symmetric", [(7, 15, False), (10, 30, False), (8, 24, True)])
def test_greedy_matches_bruteforce_reference(n, r, symmetric):
    keys = jax.random.split(jax.random.key(10 + n), 3)
    i, j = (np.asarray(x) for x in greedy_comparisons(keys, n, r, symmetric=symmetric))
    step = 2 if symmetric else 1
    for a, b in zip(i, j):
        if symmetric:          # both orders of every pair, adjacent
            np.testing.assert_array_equal(a[0::2], b[1::2])
            np.testing.assert_array_equal(b[0::2], a[1::2])
        a, b = a[::step], b[::step]
        chain = list(zip(a[: n - 1].tolist(), b[: n - 1].tolist()))
        # the start is a chain (a path visiting every item): degrees 1, 2, ..., 2, 1
        deg = np.bincount(np.concatenate([a[: n - 1], b[: n - 1]]), minlength=n)
        assert sorted(deg.tolist()) == [1, 1] + [2] * (n - 2) and _graph_connected(a[: n - 1], b[: n - 1], n)
        got = [frozenset(p) for p in zip(a.tolist(), b.tolist())]
        want = reference_greedy(chain, n, len(got), weight=float(step))
        assert got == want


def test_chain_inverse_closed_form():
    n = 6
    order = np.array([3, 0, 5, 1, 4, 2])
    for w in (1.0, 2.0):
        m = np.zeros((n, n))
        m[order[0], order[0]] = 1
        for a, b in zip(order[:-1], order[1:]):
            m[a, a] += w; m[b, b] += w; m[a, b] -= w; m[b, a] -= w
        np.testing.assert_allclose(chain_inverse(jnp.asarray(order), n, n, w), np.linalg.inv(m), atol=1e-5)
    pos = np.argsort(order) + 1                                   # A_ab = min(pos(a), pos(b)) (App. A.7 eq. 60)
    np.testing.assert_allclose(chain_inverse(jnp.asarray(order), n, n), np.minimum.outer(pos, pos), atol=1e-6)


def test_greedy_beats_random_in_log_det():
    """PoE eq. 13-15: greedy maximises log det(W~^T W~); compare with random (connected) selections."""
    n, r, reps = 16, 48, 30
    keys = jax.random.split(jax.random.key(20), reps)
    gi, gj = (np.asarray(x) for x in greedy_comparisons(keys, n, r))
    ri, rj = (np.asarray(x) for x in random_comparisons(keys, n, r))
    g = np.array([_logdet_information(a, b, n) for a, b in zip(gi, gj)])
    rnd = np.array([_logdet_information(a, b, n) for a, b in zip(ri, rj)])
    print(f"\nlog det, N={n}, R={r}: greedy {g.mean():.3f} +- {g.std():.3f}, random {rnd.mean():.3f} +- {rnd.std():.3f}")
    assert g.mean() > rnd.mean() + 1.0
    assert np.mean(g > rnd) >= 0.95
    assert g.std() < 0.05            # greedy reaches (almost) the same optimum from every chain start


def test_greedy_masks_and_errors():
    mask = np.zeros((2, 9), bool)
    mask[0, :5] = True
    mask[1, :9] = True
    i, j = (np.asarray(x) for x in greedy_comparisons(jax.random.split(jax.random.key(3), 2), 9, 12, item_mask=mask))
    live = i[0] != j[0]
    assert live.sum() == 10 and np.all(i[0][live] < 5) and np.all(j[0][live] < 5)   # all 10 pairs of 5 items
    assert np.all(i[1] != j[1])
    k = jax.random.key(0)
    with pytest.raises(ValueError, match="below 5"):
        greedy_comparisons(k, 6, 4)
    with pytest.raises(ValueError, match="exceeds"):
        greedy_comparisons(k, 6, 16)
    with pytest.raises(ValueError, match="even"):
        greedy_comparisons(k, 6, 11, symmetric=True)


# ======================================================================= Laplace-BT selection
def reference_laplace_selection(c, post, num_pairs):
    """Brute force: Laplace precision H (+ anchor), criterion det(H + h vv^T)/det(H) - 1, h = q(1-q)."""
    n = c.num_items
    mean = np.asarray(post.mean, float)
    h_mat = np.asarray(post.precision, float) + np.ones((n, n)) / n        # anchored (connected graph)
    used = {(a, b) for a, b, w in zip(np.asarray(c.i), np.asarray(c.j), np.asarray(c.weight)) if w > 0}
    q = expit(mean[:, None] - mean[None, :])
    gain = q * (1 - q)
    chosen = []
    ta, tb = np.triu_indices(n, 1)
    for _ in range(num_pairs):
        _, base = np.linalg.slogdet(h_mat)
        crit = np.full(len(ta), -np.inf)
        for k, (a, b) in enumerate(zip(ta, tb)):
            if ((a, b) in used and (b, a) in used) or frozenset((a, b)) in chosen:
                continue
            v = np.zeros(n); v[a], v[b] = 1, -1
            _, ld = np.linalg.slogdet(h_mat + gain[a, b] * np.outer(v, v))
            crit[k] = np.exp(ld - base) - 1
        best = crit.max()
        k = int(np.argmax(crit >= best - TIE_TOL * max(1.0, abs(best))))
        a, b = ta[k], tb[k]
        chosen.append(frozenset((a, b)))
        v = np.zeros(n); v[a], v[b] = 1, -1
        h_mat = h_mat + gain[a, b] * np.outer(v, v)
    return chosen


def test_laplace_selection_matches_bruteforce_reference():
    rng = np.random.default_rng(7)
    n = 9
    true = rng.normal(scale=1.5, size=n)
    for seed in (7, 8):
        i, j = (np.asarray(x) for x in random_comparisons(jax.random.key(seed), n, 16))
        p = expit(true[i] - true[j] + 0.3 * rng.normal(size=len(i))).astype(np.float32)
        c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
        post = jr.laplace_bradley_terry(c)
        ni, nj = (np.asarray(x) for x in laplace_comparisons(c, 4, key=jax.random.key(8)))
        want = reference_laplace_selection(c, post, 4)
        assert [frozenset(x) for x in zip(ni.tolist(), nj.tolist())] == want
    assert [frozenset(x) for x in zip(ni.tolist(), nj.tolist())] == want
    old = set(zip(i.tolist(), j.tolist()))
    assert not old & set(zip(ni.tolist(), nj.tolist()))             # never repeats an ordered pair
    # favours close pairs: the selected pairs are closer in fitted score than the average pair
    s = np.asarray(post.mean)
    assert np.mean(np.abs(s[ni] - s[nj])) < np.mean(np.abs(s[:, None] - s[None, :])[np.triu_indices(n, 1)])


def test_laplace_selection_batched_symmetric_and_exhaustion():
    rng = np.random.default_rng(9)
    ctxs = []
    for _ in range(3):
        i, j = (np.asarray(x) for x in random_comparisons(jax.random.key(int(rng.integers(1e6))), 6, 10))
        ctxs.append(jr.Comparisons.from_pairs(i, j, rng.uniform(0.2, 0.8, 10).astype(np.float32), num_items=6))
    b = jr.stack_contexts(ctxs, num_comparisons=14)
    ni, nj = laplace_comparisons(b, 4, key=jax.random.key(0), symmetric=True)
    assert ni.shape == (3, 4)
    ni, nj = np.asarray(ni), np.asarray(nj)
    for k, c in enumerate(ctxs):
        np.testing.assert_array_equal(ni[k, 0::2], nj[k, 1::2])
        old = set(zip(np.asarray(c.i).tolist(), np.asarray(c.j).tolist()))
        for a, bb in zip(ni[k], nj[k]):
            assert (a, bb) not in old and (bb, a) not in old          # symmetric: pairs with neither order judged
    # all ordered pairs of 3 items judged but (2, 0): only its reverse order is left
    c = jr.Comparisons.from_pairs([0, 1, 1, 2, 0], [1, 0, 2, 1, 2], [0.6, 0.4, 0.7, 0.3, 0.8], num_items=3)
    ni, nj = (np.asarray(x) for x in laplace_comparisons(c, 2, key=jax.random.key(1)))
    assert (ni[0], nj[0]) == (2, 0) and ni[1] == nj[1]              # then nothing: padding slot i == j


# ======================================================================= PairS
def reference_pairs(probs, beam, mask=None):
    """PairS merge sort (bottom-up, Python lists) with a beam of merge paths; returns order, count."""
    n = probs.shape[0]
    mask = np.ones(n, bool) if mask is None else mask
    levels = max(1, int(np.ceil(np.log2(n))))
    items = list(range(2**levels))
    real = lambda x: x < n and mask[x]
    asked = set()
    w = 1
    while w < len(items):
        out = []
        for s in range(0, len(items), 2 * w):
            left, right = items[s:s + w], items[s + w:s + 2 * w]
            paths = [(0.0, 0, [])]                                  # (log-lik, a, merged)
            for t in range(2 * w):
                cands = [], []
                for logp, a, merged in paths:
                    b = t - a
                    if a < w and b < w and real(left[a]) and real(right[b]):
                        p = probs[left[a], right[b]]
                        asked.add((left[a], right[b]))
                    elif a < w and (real(left[a]) or not (b < w and real(right[b]))):
                        p = 1.0
                    else:
                        p = 0.0
                    with np.errstate(divide="ignore"):
                        if a < w:
                            cands[0].append((logp + np.log(p), a + 1, merged + [left[a]]))
                        else:
                            cands[0].append((-np.inf, a, merged))
                        if b < w:
                            cands[1].append((logp + np.log1p(-p), a, merged + [right[b]]))
                        else:
                            cands[1].append((-np.inf, a, merged))
                allc = cands[0] + cands[1]
                order = np.argsort([-x[0] for x in allc], kind="stable")[:beam]
                paths = [allc[k] for k in order if allc[k][0] > -np.inf]
            out += paths[0][2]
        items = out
        w *= 2
    return [x for x in items if x < n and mask[x]], len(asked)


def test_pairs_perfect_judge_sorts_with_about_n_log_n_comparisons():
    rng = np.random.default_rng(0)
    for n, beams in ((2, (1,)), (13, (1, 4)), (32, (1,))):
        h = rng.permutation(n).astype(float)
        probs = (h[:, None] > h[None, :]).astype(np.float32)       # p = 1 if A is better
        for beam in beams:
            for key in (None, jax.random.key(n)):                  # item order, or shuffled start
                res = pairs_rank(probs, beam_size=beam, key=key)
                np.testing.assert_array_equal(res.order, np.argsort(-h))
                np.testing.assert_array_equal(res.scores, h)       # rank scores n-1 .. 0
                lg = int(np.ceil(np.log2(n)))
                count = int(res.num_comparisons)
                print(f"\nPairS perfect judge N={n} beam={beam}: {count} comparisons, N log2 N = {n * np.log2(n):.0f}")
                assert n * np.log2(n) / 2 <= count <= (n - 1) * lg       # at most n - 1 per level
                if n == 32:                                        # merge sort: N log2 N - O(N)
                    assert n * np.log2(n) - 1.5 * n <= count <= n * np.log2(n) - n + 1


@pytest.mark.parametrize("beam", [1, 4])
def test_pairs_matches_reference_on_noisy_judge(beam):
    # float32 judge (the reference sums its logs in float64: beam ties closer than float32
    # rounding would be needed to tell them apart, improbable with continuous p)
    rng = np.random.default_rng(beam)
    n = 13
    true = rng.normal(size=n)
    probs = expit(true[:, None] - true[None, :] + 0.8 * rng.normal(size=(n, n))).astype(np.float32)
    mask = np.ones(n, bool)
    mask[[3, 8]] = False
    res = pairs_rank(probs, beam_size=beam, item_mask=mask)
    order, count = reference_pairs(probs.astype(np.float64), beam, mask)
    np.testing.assert_array_equal(np.asarray(res.order)[:11], order)
    assert set(np.asarray(res.order)[11:].tolist()) == {3, 8}
    assert int(res.num_comparisons) == count
    c = res.comparisons
    live = np.asarray(c.weight) > 0
    pairs = list(zip(np.asarray(c.i)[live].tolist(), np.asarray(c.j)[live].tolist()))
    assert len(pairs) == count == len(set(pairs))
    np.testing.assert_array_equal(np.asarray(c.p)[live], probs[np.asarray(c.i)[live], np.asarray(c.j)[live]])
    assert np.all(mask[np.asarray(c.i)[live]]) and np.all(mask[np.asarray(c.j)[live]])


def test_pairs_beam_finds_more_likely_merges_and_symmetric_counts():
    rng = np.random.default_rng(3)
    n = 13
    true = rng.normal(size=n)
    probs = expit(true[:, None] - true[None, :] + 1.0 * rng.normal(size=(n, n))).astype(np.float32)
    greedy, beam = pairs_rank(probs, beam_size=1), pairs_rank(probs, beam_size=4)
    counts = [int(greedy.num_comparisons), int(beam.num_comparisons)]
    assert counts[1] > counts[0]                          # the beam asks about alternatives
    sym = pairs_rank(probs, symmetric=True)
    assert int(sym.num_comparisons) % 2 == 0 and int(sym.num_comparisons) <= 2 * (n - 1) * 4
    # uncertainty pruning only removes branches: fewer comparisons than the plain beam
    pruned = pairs_rank(probs, beam_size=4, prune=0.2)
    assert int(pruned.num_comparisons) <= counts[1]
    print(f"\nPairS N={n}: log-lik greedy {float(greedy.log_likelihood):.2f}, beam-4 {float(beam.log_likelihood):.2f}; "
          f"comparisons {counts}, symmetric {int(sym.num_comparisons)}, pruned beam {int(pruned.num_comparisons)}")
    # the comparisons PairS made score with a PoE scorer
    s = jr.poe_bradley_terry(greedy.comparisons)
    assert np.all(np.isfinite(s))


def test_pairs_callable_judge_batches_and_errors():
    rng = np.random.default_rng(4)
    probs = rng.uniform(size=(3, 13, 13)).astype(np.float32)
    batched = pairs_rank(probs, beam_size=4)              # contexts in one call
    assert batched.order.shape == (3, 13) and batched.num_comparisons.shape == (3,)
    table = jnp.asarray(probs[1])

    def judge(a, b):
        return table[a, b]

    one = pairs_rank(judge, num_items=13, beam_size=4)
    np.testing.assert_array_equal(one.order, batched.order[1])
    assert int(one.num_comparisons) == int(batched.num_comparisons[1])
    np.testing.assert_array_equal(pairs_rank(probs[2], beam_size=4).order, batched.order[2])
    with pytest.raises(ValueError, match="num_items"):
        pairs_rank(judge)
    with pytest.raises(ValueError, match="beam_size"):
        pairs_rank(probs, beam_size=0)
    with pytest.raises(ValueError, match="prune"):
        pairs_rank(probs, prune=0.7)
    with pytest.raises(ValueError, match="N, N"):
        pairs_rank(np.zeros((3, 4)))


# ======================================================================= active assessment
@pytest.fixture(scope="module")
def simulated():
    """A simulated FlanT5-3B-like judge on SummEval coherence (synthetic labels if the data is missing)."""
    from jaxrank import simulate
    try:
        lab = jr.data.label_matrix(jr.data.load_dataset("summeval"), "coherence")
        labels, mask = lab.labels[:12], lab.mask[:12]
    except (FileNotFoundError, ValueError):
        rng = np.random.default_rng(0)
        labels, mask = np.round(rng.normal(3, 1, size=(12, 16)) * 3) / 3, np.ones((12, 16), bool)
    params = simulate.calibrate_judge(labels, mask, accuracy=0.686, p_a=0.37)
    judge = simulate.simulate_judge(jax.random.key(0), labels, mask, params=params)
    return np.asarray(judge.probs), np.asarray(judge.latent), labels


def _first_reaching(budgets, values, target):
    ok = np.nonzero(np.asarray(values) >= target)[0]
    return budgets[ok[0]] if len(ok) else np.inf


def test_active_reaches_target_spearman_with_fewer_comparisons_than_random(simulated):
    """Spearman with the judge's own latent scores (what comparisons can reveal), mean over 12 contexts.

    Random: 8 random selections per context of the largest budget; random selections
    are nested (a prefix of >= N - 1 slots is a selection of that budget), so every
    budget is a prefix, and all budgets x repeats x contexts are scored in ONE call.
    """
    probs, latent, labels = simulated
    c_count, n = probs.shape[:2]
    budget, batch, target, reps = 71, 4, 0.95, 8
    budgets = np.arange(n - 1, budget + 1, batch)             # 15, 19, ..., 71: the active rounds
    prefix = (np.arange(budget)[None, :] < budgets[:, None]).astype(np.float32)      # [B, R]

    def curve(c):          # c: [..., R] -> mean Spearman per budget with latent and human scores
        b = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(budgets),) + x.shape), c)
        w = jnp.broadcast_to(prefix.reshape((len(budgets),) + (1,) * (c.i.ndim - 1) + (budget,)), b.i.shape)
        s = jr.poe_bradley_terry(jr.Comparisons(b.i, b.j, b.p, w * b.weight, b.item_mask, n), debias="mean")
        axes = tuple(range(1, s.ndim - 1))
        lat = np.broadcast_to(latent, s.shape[-2:])
        return (np.nanmean(jr.metrics.spearman(s, jnp.broadcast_to(lat, s.shape)), axis=axes),
                np.nanmean(jr.metrics.spearman(s, jnp.broadcast_to(np.broadcast_to(labels, s.shape[-2:]), s.shape)),
                           axis=axes))

    bufs = []
    for ctx in range(c_count):
        table = probs[ctx]
        out = active_assess(lambda i, j: table[i, j], n, batch_size=batch, budget=budget,
                            key=jax.random.key(100 + ctx), debias="mean")
        assert out.num_comparisons == budget and out.stopped == "budget"
        np.testing.assert_array_equal(out.history[:, 0], budgets)
        bufs.append(out.comparisons)
    act, act_h = curve(jr.stack_contexts(bufs))
    i, j = random_comparisons(jax.random.split(jax.random.key(5), (reps, c_count)), n, budget)
    rand, rand_h = curve(gather_comparisons(probs, i, j))
    r_active, r_random = _first_reaching(budgets, act, target), _first_reaching(budgets, rand, target)
    print("\nR       " + " ".join(f"{r:6d}" for r in budgets))
    print("active  " + " ".join(f"{v:6.3f}" for v in act))
    print("random  " + " ".join(f"{v:6.3f}" for v in rand))
    print("active-h" + " ".join(f"{v:6.3f}" for v in act_h))
    print("random-h" + " ".join(f"{v:6.3f}" for v in rand_h))
    print(f"comparisons to mean Spearman {target} with the judge's scores: active {r_active}, random {r_random}")
    assert r_active < r_random
    assert r_active <= 0.8 * min(r_random, budget + batch)
    assert np.mean(act[2:] - rand[2:]) > 0.01                 # better all along the curve


def test_active_stops_on_confidence_and_does_not_recompile(simulated):
    probs = simulated[0]
    n = probs.shape[1]
    kw = dict(batch_size=4, budget=71, rank_confidence=0.85, debias="mean")
    out = active_assess(lambda i, j: probs[0][i, j], n, key=jax.random.key(1), **kw)
    assert out.stopped == "confidence" and out.confidence >= 0.85 and out.num_comparisons < 71
    assert np.all(out.history[:-1, 1] < 0.85)
    assert int(np.sum(np.asarray(out.comparisons.weight))) == out.num_comparisons
    assert out.posterior.covariance.shape == (n, n) and out.scores.shape == (n,)
    seen = set()
    live = np.asarray(out.comparisons.weight) > 0
    for a, b in zip(np.asarray(out.comparisons.i)[live], np.asarray(out.comparisons.j)[live]):
        assert a != b and (a, b) not in seen
        seen.add((a, b))
    with CompileLog() as log:                 # a second run, other judge and key: no compilation at all
        out2 = active_assess(lambda i, j: probs[1][i, j], n, key=jax.random.key(2), **kw)
    assert log.records == [] and out2.num_comparisons > n
    adj = active_assess(lambda i, j: probs[0][i, j], n, key=jax.random.key(1), stop_rule="adjacent",
                        batch_size=4, budget=71, rank_confidence=0.9)
    assert adj.stopped in ("confidence", "budget") and 0.5 <= adj.history[0, 1] <= 1


def test_active_arguments():
    judge = lambda i, j: np.full(len(i), 0.5)
    k = jax.random.key(0)
    with pytest.raises(ValueError, match="starting spanning tree"):
        active_assess(judge, 10, batch_size=2, budget=8, key=k)
    with pytest.raises(ValueError, match="exceeds"):
        active_assess(judge, 4, batch_size=2, budget=13, key=k)
    with pytest.raises(ValueError, match="stop_rule"):
        active_assess(judge, 4, batch_size=2, budget=6, key=k, stop_rule="kendall")
    with pytest.raises(ValueError, match="rank_confidence"):
        active_assess(judge, 4, batch_size=2, budget=6, key=k, rank_confidence=1.5)
    with pytest.raises(ValueError, match="probabilities"):
        active_assess(lambda i, j: np.full(len(i), 2.0), 4, batch_size=2, budget=6, key=k)
    out = active_assess(judge, 4, batch_size=5, budget=12, key=k)     # runs out of pairs: all 12 used
    assert out.num_comparisons == 12 and out.stopped in ("budget", "exhausted")


# ======================================================================= jit / vmap / no recompilation
def _selectors():
    probs = jnp.asarray(np.random.default_rng(0).uniform(size=(9, 9)), jnp.float32)
    probs13 = jnp.asarray(np.random.default_rng(0).uniform(size=(13, 13)), jnp.float32)
    c = jr.Comparisons.from_pairs(*[np.asarray(x) for x in random_comparisons(jax.random.key(0), 9, 16)],
                                  np.random.default_rng(1).uniform(0.1, 0.9, 16).astype(np.float32), num_items=9)
    return {
        "random": lambda k: random_comparisons(k, 9, 20),
        "no_repeat": lambda k: random_comparisons(k, 9, 20, no_repeat=True),
        "symmetric": lambda k: random_comparisons(k, 9, 20, symmetric=True),
        "greedy": lambda k: greedy_comparisons(k, 9, 20),
        "laplace": lambda k: laplace_comparisons(c, 4, key=k),
        "pairs": lambda k: pairs_rank(probs13, beam_size=4, key=k).order,
        "gather": lambda k: gather_comparisons(probs, *random_comparisons(k, 9, 20)).p,
    }


@pytest.mark.parametrize("name", list(_selectors()))
def test_selection_under_jit_vmap_and_without_recompilation(name):
    """f(key) eagerly, jit(vmap(f)) over a batch of keys (its first key the same), then no recompilation."""
    f = _selectors()[name]
    keys = jax.random.split(jax.random.key(3), 4)
    eager = f(keys[0])
    jf = jax.jit(jax.vmap(f))
    batched = jf(keys)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(eager)):
        np.testing.assert_array_equal(a[0], b)
    assert any(np.any(np.asarray(a[1]) != np.asarray(a[0])) for a in jax.tree.leaves(batched))  # keys matter
    if name in ("random", "greedy"):           # batched keys natively == vmap
        for a, b in zip(jax.tree.leaves(f(keys)), jax.tree.leaves(batched)):
            np.testing.assert_array_equal(a, b)
    keys2 = jax.random.split(jax.random.key(4), 4)
    with CompileLog() as log:
        jax.block_until_ready(f(keys2[1]))
        jax.block_until_ready(jf(keys2))
    assert log.records == [], log.records
