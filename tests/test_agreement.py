"""The field's three correlations (Spearman, Kendall tau-b, Pearson) per context and at system level,
against ``scipy.stats`` on the real entries, for padded batches drawn by hypothesis."""


import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrank import metrics as M
from reference import SCIPY_CORRELATIONS, scipy_correlation

ATOL = 5e-5   # float32 sums of up to a few dozen entries


@st.composite
def padded(draw):
    """``(pred, gold, where)`` ``[C, N]``: Likert-like gold (ties), pred on a coarse or fine grid, a mask."""
    c = draw(st.integers(1, 6))
    n = draw(st.integers(2, 9))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    gold = rng.integers(1, draw(st.integers(2, 6)), size=(c, n)).astype(np.float32)
    pred = (draw(st.floats(-2, 2)) * gold + rng.normal(size=(c, n))).astype(np.float32)
    if draw(st.booleans()):
        pred = np.round(pred)                       # ties in pred too
    where = rng.random((c, n)) < draw(st.floats(0.3, 1.0))
    garbage = rng.normal(size=(c, n)).astype(np.float32) * 100
    return np.where(where, pred, garbage), np.where(where, gold, -garbage), where


@pytest.mark.parametrize("name", list(M.CORRELATIONS))
@settings(max_examples=30, deadline=None)
@given(data=padded())
def test_masked_per_context_matchesscipy_correlation(name, data):
    """Each context's value is SciPy's on its real entries (NaN where SciPy's is undefined), whatever the
    masked slots hold; the batch equals jit(vmap) of one context."""
    pred, gold, where = data
    fn = M.CORRELATIONS[name]
    got = np.asarray(fn(pred, gold, where=where))
    want = np.array([scipy_correlation(name, p[w], g[w]) for p, g, w in zip(pred, gold, where)])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], atol=ATOL)
    one = jax.jit(jax.vmap(lambda p, g, w: fn(p, g, where=w)))(pred, gold, where)
    np.testing.assert_allclose(np.asarray(one), got, atol=1e-6)


def _system_reference(pred, gold, system, where):
    """Per-system means by a dict, then SciPy."""
    sums: dict[int, list[float]] = {}
    for p, g, s, w in zip(pred.ravel(), gold.ravel(), system.ravel(), where.ravel()):
        if w and s >= 0:
            sums.setdefault(int(s), []).append((p, g))
    m = np.array([np.mean([p for p, _ in v]) for v in sums.values()])
    h = np.array([np.mean([g for _, g in v]) for v in sums.values()])
    return {name: scipy_correlation(name, m, h) for name in SCIPY_CORRELATIONS}


@settings(max_examples=30, deadline=None)
@given(data=padded(), systems=st.integers(1, 7), seed=st.integers(0, 1000))
def test_system_level_matches_means_thenscipy_correlation(data, systems, seed):
    pred, gold, where = data
    rng = np.random.default_rng(seed)
    system = rng.integers(-1, systems, size=pred.shape)
    got = M.system_level(pred, gold, system, where=where)
    want = _system_reference(pred, gold, system, where)
    for name in SCIPY_CORRELATIONS:
        assert np.isnan(got[name]) == np.isnan(want[name]), name
        if not np.isnan(want[name]):
            assert float(got[name]) == pytest.approx(want[name], abs=ATOL), name


def test_system_level_weights_are_repeated_contexts():
    """Integer context weights (a bootstrap resample) equal the contexts repeated; a batch of weights gives
    one value per row."""
    rng = np.random.default_rng(3)
    pred, gold = rng.normal(size=(5, 4)), rng.integers(1, 6, size=(5, 4)).astype(float)
    system = np.tile(np.arange(4), (5, 1))
    w = np.array([[2, 0, 1, 0, 3], [1, 1, 1, 1, 1]])
    got = M.system_level(pred, gold, system, weights=w)
    rep = np.repeat(np.arange(5), w[0])
    again = M.system_level(pred[rep], gold[rep], system[rep])
    plain = M.system_level(pred, gold, system)
    for name in SCIPY_CORRELATIONS:
        assert got[name].shape == (2,)
        assert got[name][0] == pytest.approx(float(again[name]), abs=1e-6)
        assert got[name][1] == pytest.approx(float(plain[name]), abs=1e-6)


def test_system_level_refuses_bad_input():
    with pytest.raises(ValueError, match="shape"):
        M.system_level(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 2), int))
    with pytest.raises(ValueError, match="weights"):
        M.system_level(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3), int), weights=[1, -1])
    with pytest.raises(ValueError, match="pred"):
        M.system_level(np.full((2, 3), np.nan), np.zeros((2, 3)), np.zeros((2, 3), int))
