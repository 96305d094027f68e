"""Property-based tests (hypothesis) of ``Comparisons`` and of every scorer in ``scorer_table.SCORERS``.

Random padded batches, always in one fixed padded shape ``[B, R_PAD]`` x
``N_PAD`` items (so each scorer compiles once and each property stays within
seconds), with probabilities that include the edges 0, 1/2 and 1. Properties:

* finite in, finite out: never a NaN or infinity from any scorer and debias choice;
* padding never changes a result: other garbage in the padded comparisons
  (indices, probabilities), the comparisons in another order, the padded slots
  interleaved with the real ones; padded items get the neutral score;
* permutation and shift invariance: relabelling the items (real items moved
  to any positions of the padded item axis, e.g. shifted past padded ones)
  permutes the scores the same way; a context's result does not depend on its
  position in the batch;
* bad input always raises a ``ValueError`` naming the argument (``Comparisons``
  constructors and every scorer's options).
"""

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as hst

import jaxrank as jr
from jaxrank import scorer_table

N_PAD, R_PAD, B = 6, 12, 2
NEUTRAL = {"win_ratio": 0.5, "average_probability": 0.5}       # the others give 0 to padded items
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)
SCORER_CASES = [(name, d) for name, e in scorer_table.SCORERS.items() for d in e.debias]


@hst.composite
def contexts(draw):
    """One context: ``n`` real items of ``N_PAD``, ``r`` real comparisons of ``R_PAD`` (rest padding)."""
    n = draw(hst.integers(2, N_PAD - 1))
    r = draw(hst.integers(1, R_PAD - 2))
    pairs = draw(hst.lists(hst.tuples(hst.integers(0, n - 1), hst.integers(0, n - 1)).filter(lambda t: t[0] != t[1]),
                           min_size=r, max_size=r))
    p = draw(hst.lists(hst.one_of(hst.sampled_from([0.0, 0.5, 1.0]), hst.floats(0.0, 1.0, width=32)),
                       min_size=r, max_size=r))
    w = draw(hst.lists(hst.sampled_from([1.0, 1.0, 0.5, 2.0]), min_size=r, max_size=r))
    return n, np.array([a for a, _ in pairs]), np.array([b for _, b in pairs]), np.array(p), np.array(w)


def _padded(ctx, rng, *, perm=None, order=None):
    """Arrays ``[R_PAD]`` / ``[N_PAD]`` of ``ctx``; padded slots hold garbage from ``rng``.

    ``perm`` relabels item ``a`` as ``perm[a]`` (a permutation of ``N_PAD``);
    ``order`` permutes the ``R_PAD`` comparison slots.
    """
    n, i, j, p, w = ctx
    r = len(i)
    perm = np.arange(N_PAD) if perm is None else perm
    gi, gj = rng.integers(0, N_PAD, R_PAD - r), rng.integers(0, N_PAD, R_PAD - r)
    ii = np.concatenate([perm[i], gi])
    jj = np.concatenate([perm[j], gj])
    pp = np.concatenate([p, rng.random(R_PAD - r)])
    ww = np.concatenate([w, np.zeros(R_PAD - r)])
    order = np.arange(R_PAD) if order is None else order
    mask = np.zeros(N_PAD, bool)
    mask[perm[:n]] = True
    return ii[order], jj[order], pp[order], ww[order], mask


def _batch(parts):
    i, j, p, w, m = (np.stack(x) for x in zip(*parts))
    return jr.Comparisons.from_pairs(i.astype(np.int32), j.astype(np.int32), p.astype(np.float32),
                                     num_items=N_PAD, weight=w.astype(np.float32), item_mask=m)


def _score(name, debias, c):
    return np.asarray(scorer_table.score(name, c, debias), np.float64)


def _ranking_loglik(ctx, scores, eps=1e-6):
    """log L(r) = sum_k w_k [z_k log p_k + (1 - z_k) log(1 - p_k)], z_k = 1[i_k ranked above j_k] (NumPy, LCA eq. 11)."""
    n, i, j, p, w = ctx
    z = (np.asarray(scores)[i] > np.asarray(scores)[j]).astype(np.float64)
    p = np.clip(np.asarray(p, np.float64), eps, 1 - eps)
    return float(np.sum(w * (z * np.log(p) + (1 - z) * np.log1p(-p))))


def _tol(name):
    return 2e-3 if name in ("poe_bradley_terry", "bradley_terry") else 1e-4


# ------------------------------------------------------------------------------------------ scorers
@pytest.mark.parametrize("name,debias", SCORER_CASES)
@SETTINGS
@given(a=contexts(), b=contexts(), seed=hst.integers(0, 2**31 - 1))
def test_scorer_finite_padding_permutation_and_batch_position(name, debias, a, b, seed):
    rng = np.random.default_rng(seed)
    base = _score(name, debias, _batch([_padded(a, rng), _padded(b, rng)]))
    assert np.isfinite(base).all(), base                                    # finite in, finite out
    n_a = a[0]
    neutral = NEUTRAL.get(name, 0.0)
    np.testing.assert_allclose(base[0, n_a:], neutral, atol=1e-6)           # padded items: neutral score

    # padding: other garbage, the comparison slots shuffled (padding interleaved with real ones)
    order = rng.permutation(R_PAD)
    again = _score(name, debias, _batch([_padded(a, rng, order=order), _padded(b, rng, order=rng.permutation(R_PAD))]))
    if name == "max_likelihood_ranking":      # ties: another ranking of the same likelihood (LCA eq. 11) is as right
        for ctx, sa, sb in zip((a, b), again, base):
            np.testing.assert_allclose(_ranking_loglik(ctx, sa), _ranking_loglik(ctx, sb), rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(again, base, atol=_tol(name), rtol=_tol(name))

    # batch position: the two contexts swapped
    swapped = _score(name, debias, _batch([_padded(b, rng), _padded(a, rng)]))
    np.testing.assert_allclose(swapped[::-1], base, atol=_tol(name), rtol=_tol(name))

    if name == "max_likelihood_ranking":
        return   # a local search: among equally likely rankings its tie-breaking follows the item labels
    # permutation / shift of item labels: real items moved anywhere on the padded item axis
    perm = rng.permutation(N_PAD)
    moved = _score(name, debias, _batch([_padded(a, rng, perm=perm), _padded(b, rng)]))
    np.testing.assert_allclose(moved[0, perm[:n_a]], base[0, :n_a], atol=_tol(name), rtol=_tol(name))
    np.testing.assert_allclose(moved[1], base[1], atol=_tol(name), rtol=_tol(name))


BAD_NUMBERS = [float("nan"), float("inf"), -float("inf"), "x", True, None, [0.1, 0.2]]
BAD_OPTIONS = {   # option -> values that must be refused (beyond BAD_NUMBERS), per scorer function
    "win_ratio": {"threshold": [-0.1, 1.5]},
    "poe_gaussian": {"alpha": [0.0, -1.0]},
    "poe_bradley_terry": {"eps": [-1e-3, 0.5], "tol": [0.0, -1.0], "score_prior": [-1.0], "max_iter": [0, 2.5]},
    "fit_poe_bradley_terry": {"gamma_prior": [0.0, -1.0]},
    "bradley_terry": {"prior": [0.0, -1.0], "tol": [0.0], "max_iter": [0, 1.5]},
    "max_likelihood_ranking": {"eps": [-1.0, 0.5], "tol": [-1.0], "max_moves": [-1, 1.5]},
}


NONE_IS_DEFAULT = {("poe_bradley_terry", "tol"), ("bradley_terry", "prior"), ("bradley_terry", "max_iter"),
                   ("max_likelihood_ranking", "max_moves")}


def _bad_cases():
    fns = {name: e.load() for name, e in scorer_table.SCORERS.items()}
    fns["fit_poe_bradley_terry"] = jr.fit_poe_bradley_terry
    out = []
    for fname, options in BAD_OPTIONS.items():
        for option, extra in options.items():
            values = extra + [v for v in BAD_NUMBERS if v is not None or (fname, option) not in NONE_IS_DEFAULT]
            out += [(fname, fns[fname], option, v) for v in values]
    return out


@pytest.mark.parametrize("fname,fn,option,value", _bad_cases())
def test_bad_options_raise_a_value_error_naming_the_argument(fname, fn, option, value):
    c = jr.Comparisons.from_pairs([0, 1, 2], [1, 2, 0], [0.7, 0.6, 0.2], num_items=3)
    with pytest.raises(ValueError, match=option):
        fn(c, **{option: value})


@pytest.mark.parametrize("name", list(scorer_table.SCORERS))
@pytest.mark.parametrize("bad", ["notc", None, np.ones((3, 2)), {"i": [0]}])
def test_every_scorer_refuses_what_is_not_comparisons(name, bad):
    with pytest.raises(ValueError, match=r"\bc must be a jaxrank.Comparisons"):
        scorer_table.SCORERS[name].load()(bad)


# -------------------------------------------------------------------------------------- Comparisons
@SETTINGS
@given(ctx=contexts(), seed=hst.integers(0, 2**31 - 1))
def test_comparisons_round_trip_and_graph_invariants(ctx, seed):
    rng = np.random.default_rng(seed)
    n, i, j, p, w = ctx
    perm = rng.permutation(N_PAD)
    c = _batch([_padded(ctx, rng, perm=perm)])
    real = np.asarray(c.weight[0]) > 0
    assert sorted(zip(np.asarray(c.i[0])[real], np.asarray(c.j[0])[real])) == sorted(zip(perm[i], perm[j]))
    np.testing.assert_allclose(np.sort(np.asarray(c.p[0])[real]), np.sort(p.astype(np.float32)))
    assert np.asarray(c.item_mask[0]).sum() == n
    # connectivity is a property of the graph, not of the labels or the padding
    c2 = _batch([_padded(ctx, rng)])
    assert bool(np.asarray(c.is_connected())[0]) == bool(np.asarray(c2.is_connected())[0])


@SETTINGS
@given(ctx=contexts(), where=hst.sampled_from(["p", "i", "j", "weight", "self", "mask"]),
       bad=hst.sampled_from([float("nan"), -0.5, 1.5, float("inf")]), k=hst.integers(0, 100))
def test_comparisons_refuse_bad_input_naming_the_argument(ctx, where, bad, k):
    n, i, j, p, w = ctx
    i, j, p, w = i.copy(), j.copy(), p.astype(np.float64), w.copy()
    k %= len(i)
    mask = None
    if where == "p":
        p[k] = bad
    elif where == "weight":
        w[k] = -abs(bad) if np.isfinite(bad) else bad
    elif where in ("i", "j"):
        (i if where == "i" else j)[k] = n + 3 if bad > 0 else -1
    elif where == "self":
        j[k] = i[k]
    else:
        mask = np.ones(n, bool)
        mask[i[k]] = False
    name = {"self": r"i and j", "mask": "item_mask"}.get(where, where)
    with pytest.raises(ValueError, match=name):
        jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w, item_mask=mask)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3", None])
def test_comparisons_refuse_a_bad_num_items(bad):
    with pytest.raises(ValueError, match="num_items"):
        jr.Comparisons.from_pairs([0], [1], [0.5], num_items=bad)


def _other_cases():
    """Options of the statistics and selection floors: (label, call(value), option, bad values)."""
    c = jr.Comparisons.from_pairs([0, 1, 2, 0], [1, 2, 0, 2], [0.8, 0.6, 0.3, 0.7], num_items=3)
    post = jr.laplace_bradley_terry(c)
    key = jax.random.key(0)
    probs = np.full((4, 4), 0.5, np.float32)
    judge = lambda i, j: np.full(len(i), 0.5)
    bad = [float("nan"), float("inf"), "x", True]
    rows = [
        ("positional_bias", lambda v: jr.positional_bias(c, threshold=v), "threshold", bad + [-0.5, 2.0, [0.5, 0.5]]),
        ("threshold_debias", lambda v: jr.threshold_debias(c, tau=v), "tau", bad + [0.0, 1.0, -1.0]),
        ("score_intervals", lambda v: jr.score_intervals(post, level=v), "level", bad + [0.0, 1.0]),
        ("rank_intervals", lambda v: jr.rank_intervals(post, key=key, num_samples=v), "num_samples", bad + [0, 2.5]),
        ("ranking_confidence", lambda v: jr.ranking_confidence(post, key=key, num_samples=v), "num_samples", [0, -3]),
        ("laplace", lambda v: jr.laplace_bradley_terry(c, gamma_prior=v, debias="learn"), "gamma_prior", bad + [0.0]),
        ("pairs_rank", lambda v: jr.pairs_rank(probs, prune=v), "prune", bad + [-0.1, 0.5]),
        ("pairs_rank", lambda v: jr.pairs_rank(probs, beam_size=v), "beam_size", [0, -1, 1.5, float("nan")]),
        ("active_assess", lambda v: jr.active_assess(judge, 4, batch_size=2, budget=8, key=key, rank_confidence=v),
         "rank_confidence", bad + [1.0, -1.0]),
        ("random_comparisons", lambda v: jr.random_comparisons(key, 4, v), "budget", [float("nan"), -1, 2.5]),
        ("spearman", lambda v: jr.metrics.spearman(np.array([1.0, v, 3.0]), np.array([1.0, 2.0, 3.0])), "pred",
         [float("nan")]),
        ("pearson", lambda v: jr.metrics.pearson(np.array([1.0, 2.0, 3.0]), np.array([1.0, v, 3.0])), "gold",
         [float("nan"), float("inf")]),
        ("kendall_tau", lambda v: jr.metrics.kendall_tau(np.array([1.0, v, 3.0]), np.array([1.0, 2.0, 3.0])), "pred",
         [float("nan")]),
        ("pairwise_accuracy", lambda v: jr.metrics.pairwise_accuracy(np.array([1.0, 2.0, 3.0]),
                                                                      np.array([1.0, v, 3.0])), "gold", [float("nan")]),
    ]
    return [(label, call, option, v) for label, call, option, values in rows for v in values]


@pytest.mark.parametrize("label,call,option,value", _other_cases())
def test_statistics_and_selection_options_refuse_bad_values_naming_them(label, call, option, value):
    with pytest.raises(ValueError, match=option):
        call(value)


def test_metrics_nan_inside_jit_gives_nan_for_that_context_only():
    """Under jit the values cannot be inspected: the context with a NaN gives NaN, the others their value."""
    pred = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, np.nan, 3.0, 4.0]], np.float32)
    gold = np.array([[1.0, 2.0, 4.0, 3.0], [1.0, 2.0, 4.0, 3.0]], np.float32)
    from scipy import stats
    for fn, ref in ((jr.metrics.spearman, stats.spearmanr), (jr.metrics.kendall_tau, stats.kendalltau),
                    (jr.metrics.pearson, stats.pearsonr)):
        out = np.asarray(jax.jit(fn)(pred, gold))
        assert np.isnan(out[1]) and abs(out[0] - ref(pred[0], gold[0])[0]) < 1e-6
    acc = np.asarray(jax.jit(jr.metrics.pairwise_accuracy)(pred, gold))
    assert np.isnan(acc[1]) and acc[0] == 5 / 6
    masked = np.asarray(jr.metrics.spearman(pred, gold, where=~np.isnan(pred)))   # NaN masked out: defined
    assert abs(masked[1] - stats.spearmanr([1, 3, 4], [1, 4, 3])[0]) < 1e-6
