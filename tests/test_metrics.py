"""jaxrank.metrics against SciPy / brute force (METHODS.md §7).

Every expected value is computed here independently: ``scipy.stats`` per row on
the real (unmasked) entries, or a plain double loop.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrank import metrics as M

ATOL = 2e-6  # float32 correlations in [-1, 1]


# ----------------------------------------------------------------- references
def _scipy_corr(name, x, y):
    """SciPy's value on the given (already unmasked) entries; NaN when undefined."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "spearman":
            return stats.spearmanr(x, y).statistic
        if name == "pearson":
            return stats.pearsonr(x, y).statistic
        if name == "kendall_tau":
            return stats.kendalltau(x, y, variant="b").statistic
    raise ValueError(name)


def _brute_pairwise_accuracy(x, y):
    right, total = 0.0, 0
    n = len(x)
    for a in range(n):
        for b in range(a + 1, n):
            if y[a] == y[b]:
                continue
            total += 1
            if x[a] == x[b]:
                right += 0.5
            elif (x[a] > x[b]) == (y[a] > y[b]):
                right += 1.0
    return right / total if total else np.nan


def _reference(name, x, y, where=None):
    x, y = np.asarray(x, float), np.asarray(y, float)
    if where is None:
        where = np.ones(x.shape, bool)
    out = np.empty(x.shape[:-1])
    for idx in np.ndindex(*x.shape[:-1]):
        m = where[idx]
        if name == "pairwise_accuracy":
            out[idx] = _brute_pairwise_accuracy(x[idx][m], y[idx][m])
        else:
            out[idx] = _scipy_corr(name, x[idx][m], y[idx][m])
    return out


def _data(seed, c=40, n=12):
    """Continuous predictions with some ties, integer (heavily tied) gold scores."""
    rng = np.random.default_rng(seed)
    gold = rng.integers(1, 6, size=(c, n)).astype(np.float32)          # Likert 1-5: many ties
    pred = (0.6 * gold + rng.normal(size=(c, n))).astype(np.float32)
    # a third of the rows get tied predictions too (rounded to a coarse grid)
    pred[::3] = np.round(pred[::3])
    return pred, gold


METRICS = {
    "spearman": M.spearman,
    "pearson": M.pearson,
    "kendall_tau": M.kendall_tau,
    "pairwise_accuracy": M.pairwise_accuracy,
}


# ------------------------------------------------------------ against SciPy
@pytest.mark.parametrize("name", list(METRICS))
def test_matches_reference_with_ties(name):
    pred, gold = _data(0)
    got = np.asarray(METRICS[name](pred, gold))
    want = _reference(name, pred, gold)
    assert got.shape == (pred.shape[0],)
    assert not np.isnan(want).any()
    np.testing.assert_allclose(got, want, atol=ATOL)


@pytest.mark.parametrize("name", list(METRICS))
def test_matches_reference_on_masked_subset(name):
    pred, gold = _data(1, c=60, n=10)
    rng = np.random.default_rng(11)
    where = rng.random(pred.shape) < 0.7
    where[0] = False                      # no real entry
    where[1] = False
    where[1, 3] = True                    # a single real entry
    where[2] = False
    where[2, [1, 7]] = True               # exactly two real entries
    # garbage in masked slots must not matter
    pred_pad = np.where(where, pred, rng.normal(size=pred.shape) * 3).astype(np.float32)
    gold_pad = np.where(where, gold, rng.integers(-9, 9, size=gold.shape)).astype(np.float32)
    got = np.asarray(METRICS[name](pred_pad, gold_pad, where=where))
    want = _reference(name, pred, gold, where)
    assert np.isnan(got[0]) and np.isnan(got[1])
    np.testing.assert_allclose(got, want, atol=ATOL)
    # the mask mixes defined and undefined rows; the NaN pattern must match exactly
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("name", ["spearman", "pearson", "kendall_tau"])
def test_nan_for_constant_rows(name):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 9)).astype(np.float32)
    y = rng.normal(size=(6, 9)).astype(np.float32)
    x[0] = 0.1                       # constant (not exactly representable)
    y[1] = 1.0 / 3.0
    x[2] = 1234.567                  # large constant
    y[3] = 4.0
    x[3] = 4.0                       # both constant
    got = np.asarray(METRICS[name](x, y))
    assert np.isnan(got[:4]).all(), got
    want = _reference(name, x[4:], y[4:])
    np.testing.assert_allclose(got[4:], want, atol=ATOL)


@pytest.mark.parametrize("name", ["spearman", "pearson", "kendall_tau"])
def test_nan_when_constant_on_real_entries_only(name):
    # not constant over the whole row, but constant over the unmasked entries
    x = np.array([[1.0, 1.0, 1.0, 5.0, -2.0]], np.float32)
    y = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    where = np.array([[True, True, True, False, False]])
    assert np.isnan(np.asarray(METRICS[name](x, y, where=where))).all()
    assert np.isnan(np.asarray(METRICS[name](y, x, where=where))).all()


def test_pairwise_accuracy_nan_without_gold_differences():
    x = np.array([[0.1, 0.5, 0.3], [1.0, 2.0, 3.0]], np.float32)
    y = np.array([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]], np.float32)
    assert np.isnan(np.asarray(M.pairwise_accuracy(x, y))).all()


def test_pairwise_accuracy_small_hand_example():
    # pairs with distinct gold: (0,1) right, (0,2) pred tie -> 0.5, (1,2) wrong; (2,3) gold tie excluded
    pred = np.array([3.0, 1.0, 3.0, 0.0], np.float32)
    gold = np.array([2.0, 1.0, 3.0, 3.0], np.float32)
    # pairs: (0,1) y+ x+ 1; (0,2) y- x0 .5; (0,3) y- x+ 0; (1,2) y- x- 1; (1,3) y- x+ 0 ; (2,3) excluded
    assert float(M.pairwise_accuracy(pred, gold)) == pytest.approx(2.5 / 5)


def test_perfect_and_reversed():
    rng = np.random.default_rng(3)
    y = rng.normal(size=(4, 8)).astype(np.float32)
    x = np.exp(y)                        # strictly monotone, non-linear transform
    for name in ("spearman", "kendall_tau", "pairwise_accuracy"):
        np.testing.assert_allclose(np.asarray(METRICS[name](x, y)), 1.0, atol=ATOL)
        np.testing.assert_allclose(np.asarray(METRICS[name](-x, y)),
                                   0.0 if name == "pairwise_accuracy" else -1.0, atol=ATOL)
    assert (np.asarray(M.pearson(x, y)) < 1 - 1e-3).all()   # not linear
    np.testing.assert_allclose(np.asarray(M.pearson(3 * y + 2, y)), 1.0, atol=ATOL)
    np.testing.assert_allclose(np.asarray(M.pearson(-0.5 * y + 7, y)), -1.0, atol=ATOL)


def test_shift_scale_and_permutation_invariance():
    pred, gold = _data(4, c=10, n=9)
    perm = np.random.default_rng(5).permutation(9)
    for name, f in METRICS.items():
        base = np.asarray(f(pred, gold))
        np.testing.assert_allclose(np.asarray(f(pred[:, perm], gold[:, perm])), base, atol=ATOL)
        np.testing.assert_allclose(np.asarray(f(2.5 * pred + 1.0, gold - 3.0)), base, atol=1e-5)


# ---------------------------------------------------------- average_ranks
def test_average_ranks_matches_rankdata_with_mask():
    pred, gold = _data(6, c=15, n=11)
    where = np.random.default_rng(7).random(pred.shape) < 0.75
    for x in (pred, gold):
        got = np.asarray(M.average_ranks(x, where=where))
        want = np.zeros_like(got)
        for r in range(x.shape[0]):
            if where[r].any():
                want[r, where[r]] = stats.rankdata(x[r, where[r]], method="average")
        np.testing.assert_allclose(got, want, atol=1e-6)
        np.testing.assert_allclose(np.asarray(M.average_ranks(x)),
                                   np.stack([stats.rankdata(row) for row in x]), atol=1e-6)


# ---------------------------------------------------------- context_mean
def test_context_mean_skips_nan():
    v = np.array([0.5, np.nan, 0.1, np.nan, -0.3], np.float32)
    assert float(M.context_mean(v)) == pytest.approx(np.nanmean(v))
    assert np.isnan(float(M.context_mean(np.full(4, np.nan, np.float32))))
    v2 = np.array([[0.2, np.nan, 0.4], [np.nan, np.nan, np.nan], [1.0, 0.0, 0.5]], np.float32)
    got = np.asarray(M.context_mean(v2, axis=-1))
    np.testing.assert_allclose(got[[0, 2]], [0.3, 0.5], atol=1e-7)
    assert np.isnan(got[1])
    np.testing.assert_allclose(np.asarray(M.context_mean(v2, axis=0)), [0.6, 0.0, 0.45], atol=1e-7)


def test_context_mean_of_spearman_skips_undefined_contexts():
    pred, gold = _data(8, c=20, n=7)
    gold[::4] = 3.0                      # every 4th context has constant gold -> undefined
    per = _reference("spearman", pred, gold)
    assert np.isnan(per).sum() == 5
    got = float(M.context_mean(M.spearman(pred, gold)))
    assert got == pytest.approx(np.nanmean(per), abs=1e-6)


# ---------------------------------------------------------- batching, jit, vmap
@pytest.mark.parametrize("name", list(METRICS))
def test_batched_equals_per_row_and_jit_vmap(name):
    f = METRICS[name]
    pred, gold = _data(9, c=12, n=8)
    where = np.random.default_rng(10).random(pred.shape) < 0.8
    batched = np.asarray(f(pred, gold, where=where))
    rows = np.array([float(f(pred[r], gold[r], where=where[r])) for r in range(len(pred))])
    np.testing.assert_allclose(batched, rows, atol=1e-6)
    jitted = np.asarray(jax.jit(lambda a, b, m: f(a, b, where=m))(pred, gold, where))
    np.testing.assert_allclose(jitted, batched, atol=1e-6)
    vmapped = np.asarray(jax.vmap(lambda a, b, m: f(a, b, where=m))(pred, gold, where))
    np.testing.assert_allclose(vmapped, batched, atol=1e-6)
    # two leading axes [B, C, N]
    p3, g3, w3 = (a.reshape(3, 4, 8) for a in (pred, gold, where))
    np.testing.assert_allclose(np.asarray(f(p3, g3, where=w3)), batched.reshape(3, 4), atol=1e-6)
    # a mask broadcast over the batch
    np.testing.assert_allclose(np.asarray(f(pred, gold, where=where[0])),
                               _reference(name, pred, gold, np.broadcast_to(where[0], pred.shape)),
                               atol=ATOL)


def test_single_context_and_integer_inputs():
    rng = np.random.default_rng(12)
    x = rng.integers(0, 4, 9)
    y = rng.integers(0, 4, 9)
    for name, f in METRICS.items():
        got = f(x, y)
        assert got.shape == () and jnp.issubdtype(got.dtype, jnp.floating)
        assert float(got) == pytest.approx(_reference(name, x[None], y[None])[0], abs=ATOL)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError):
        M.spearman(np.zeros((2, 3)), np.zeros((2, 4)))


@pytest.mark.parametrize("pad", [np.nan, np.inf, 1e8])
def test_pearson_ignores_masked_values(pad):
    x = np.array([1.0, 2.0, 3.0, 4.0, pad], np.float32)
    y = np.array([1.0, 3.0, 2.0, 4.0, 0.0], np.float32)
    where = np.array([True, True, True, True, False])
    want = stats.pearsonr(x[:4], y[:4]).statistic
    assert float(M.pearson(x, y, where=where)) == pytest.approx(want, abs=1e-6)
    assert float(M.pearson(y, x, where=where)) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("name", ["spearman", "kendall_tau", "pairwise_accuracy"])
def test_rank_metrics_ignore_nonfinite_masked_values(name):
    x = np.array([1.0, 2.0, 3.0, 4.0, np.nan, np.inf], np.float32)
    y = np.array([1.0, 3.0, 2.0, 4.0, np.nan, -np.inf], np.float32)
    where = np.array([True, True, True, True, False, False])
    want = _reference(name, x[None, :4], y[None, :4])[0]
    assert float(METRICS[name](x, y, where=where)) == pytest.approx(want, abs=1e-6)
