"""Review fixes in jaxrank.bootstrap: one program per shape for bootstrap_outcomes, NaN for an item a
replicate drops, a warning counting the replicates fitted under the automatic prior (eps=0)."""

import importlib
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from jaxrank.scoring.existence import NotStronglyConnectedWarning

sys.path.insert(0, str(Path(__file__).parent))
from compile_log import CompileLog  # noqa: E402

B = importlib.import_module("jaxrank.bootstrap")       # the module (jaxrank.bootstrap is also the function)

_I, _J = np.array([0, 1, 2, 3, 0, 1]), np.array([1, 2, 3, 0, 2, 3])


def _counts(wins):
    w = np.full(6, 4.0, np.float32)
    return jr.Comparisons.from_pairs(_I, _J, np.float32(wins) / w, num_items=4, weight=w)


def _cells(cc):
    return jnp.stack([cc.weight, cc.p * cc.weight], -1)


def test_bootstrap_outcomes_compiles_once_whatever_categories_are_empty():
    first = _counts([1, 2, 3, 1, 2, 3])
    jax.block_until_ready(B.bootstrap_outcomes(_cells, first, num_replicates=8, key=jax.random.key(0)))
    with CompileLog() as log:                       # fewer non-empty categories, same shapes: no compilation
        for wins in ([0, 2, 3, 1, 2, 3], [0, 2, 3, 1, 2, 4], [4, 0, 0, 4, 4, 4]):
            out = B.bootstrap_outcomes(_cells, _counts(wins), num_replicates=8, key=jax.random.key(1))
            jax.block_until_ready(out)
    assert log.records == []


def test_bootstrap_outcomes_with_empty_categories_is_still_multinomial():
    wins = np.array([0, 2, 4, 1, 2, 3], np.float64)                 # A never won comparison 0, always won 2
    c = _counts(wins)
    rep = np.asarray(B.bootstrap_outcomes(_cells, c, num_replicates=4000, key=jax.random.key(2)), np.float64)
    games, won = rep[..., 0], rep[..., 1]
    np.testing.assert_array_equal(won[:, 0], 0)                     # an empty category is never drawn
    np.testing.assert_array_equal(won[:, 2], games[:, 2])
    m, q = 24.0, np.stack([wins, 4 - wins], -1).reshape(-1) / 24.0  # Multinomial(M, n / M), closed form
    cat = np.stack([won, games - won], -1).reshape(len(rep), -1)
    np.testing.assert_allclose(cat.mean(0), m * q, atol=4 * np.sqrt(m * q.max() / len(rep)))
    np.testing.assert_allclose(cat.var(0, ddof=1), m * q * (1 - q), rtol=0.15, atol=1e-9)


def _star():
    """Item 0 in two comparisons of 30: a replicate leaves it out with probability (28/30)^30, about 1/8."""
    rng = np.random.default_rng(0)
    i = list(rng.integers(1, 6, 28))
    j = [(a - 1 + rng.integers(1, 5)) % 5 + 1 for a in i]
    p = list(rng.uniform(0.3, 0.7, 28))
    return jr.Comparisons.from_pairs(i + [0, 2], j + [1, 0], np.float32(p + [0.95, 0.05]), num_items=6)


def test_bootstrap_gives_nan_to_an_item_a_replicate_drops():
    c = _star()
    s = np.asarray(B.bootstrap(jr.poe_bradley_terry, c, key=0, num_replicates=400))
    games = np.asarray(B.bootstrap(lambda cc: cc.games(), c, key=0, num_replicates=400, missing="keep"))
    dropped = games == 0
    assert 0 < dropped[:, 0].sum() < 400
    np.testing.assert_array_equal(np.isnan(s), dropped)             # NaN exactly where the item is in no comparison
    kept = np.asarray(B.bootstrap(jr.poe_bradley_terry, c, key=0, num_replicates=400, missing="keep"))
    np.testing.assert_array_equal(kept[dropped], 0.0)               # the old output: a neutral 0 as a measurement
    np.testing.assert_array_equal(s[~dropped], kept[~dropped])
    lo, hi = B.percentile_intervals(s)                               # intervals of the replicates that saw item 0
    np.testing.assert_allclose(lo[0], np.quantile(kept[~dropped[:, 0], 0], 0.025), rtol=1e-5)
    np.testing.assert_allclose(hi[0], np.quantile(kept[~dropped[:, 0], 0], 0.975), rtol=1e-5)
    with pytest.raises(ValueError, match="missing"):
        B.bootstrap(jr.poe_bradley_terry, c, key=0, num_replicates=4, missing="zero")


def test_bootstrap_outcomes_gives_nan_to_an_item_without_drawn_outcomes():
    # item 3 in one comparison of one outcome among 40: left out of a replicate with probability (39/40)^40
    c = jr.Comparisons.from_pairs([0, 1, 2, 3], [1, 2, 0, 0], [6 / 13, 7 / 13, 6 / 13, 1.0], num_items=4,
                                  weight=[13.0, 13.0, 13.0, 1.0])
    s = np.asarray(B.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=200, key=jax.random.key(0)))
    g = np.asarray(B.bootstrap_outcomes(lambda cc: cc.games(), c, num_replicates=200, key=jax.random.key(0),
                                        missing="keep"))
    assert 0 < (g[:, 3] == 0).sum() < 200
    np.testing.assert_array_equal(np.isnan(s), g == 0)


def _ml_fraction(c, reps):
    """Fraction of replicates whose win graph is strongly connected (SciPy, independent of jaxrank)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    ok = 0
    for w in reps:
        live = w > 0                                 # arcs winner -> loser of the replicate's comparisons
        arcs = [(x, y) for x, y, pp in zip(np.asarray(c.i)[live], np.asarray(c.j)[live], np.asarray(c.p)[live])
                for x, y in ([(x, y)] if pp >= 1 else [(y, x)] if pp <= 0 else [(x, y), (y, x)])]
        x, y = np.array(arcs).T
        n = c.num_items
        k, _ = connected_components(coo_matrix((np.ones(len(x)), (x, y)), (n, n)), directed=True, connection="strong")
        ok += k == 1
    return ok / len(reps)


def test_bootstrap_warns_once_counting_replicates_without_finite_ml_scores():
    c = jr.Comparisons.from_decisions([0, 1, 2, 0, 1, 2], [1, 2, 0, 2, 0, 1], [1, 1, 1, 0, 1, 0], num_items=3)
    counts = np.asarray(B.bootstrap(lambda cc: cc.weight, c, key=3, num_replicates=200, missing="keep"))
    expected_bad = int(round(200 * (1 - _ml_fraction(c, counts))))
    assert expected_bad > 0
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        B.bootstrap(jr.poe_bradley_terry, c, key=3, num_replicates=200, eps=0.0)
    ours = [w for w in rec if issubclass(w.category, NotStronglyConnectedWarning)]
    assert len(ours) == 1 and f"{expected_bad} of 200 replicates" in str(ours[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # a score prior: no fallback, no warning
        B.bootstrap(jr.poe_bradley_terry, c, key=3, num_replicates=20, eps=0.0, score_prior=0.1)


def test_bootstrap_outcomes_warns_counting_replicates_without_finite_ml_scores():
    w = np.array([5, 5, 3], np.float32)
    wins = np.array([4, 1, 2], np.float32)
    c = jr.Comparisons.from_pairs([0, 1, 2], [1, 2, 0], wins / w, num_items=3, weight=w)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        B.bootstrap_outcomes(jr.poe_bradley_terry, c, num_replicates=300, key=jax.random.key(0), eps=0.0)
    ours = [x for x in rec if issubclass(x.category, NotStronglyConnectedWarning)]
    assert len(ours) == 1 and "of 300 replicates" in str(ours[0].message)
