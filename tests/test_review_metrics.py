"""Review fixes in ``jaxrank.metrics``: infinite ties, scale-invariant constancy, float64 precision.

Independent references: ``scipy.stats`` (``kendalltau``, ``spearmanr``, ``pearsonr``, ``rankdata``; SciPy
ranks ``+-inf`` as the largest/smallest values) and a hand count of the pairs for pairwise accuracy.
Every metric is checked on both paths: concrete input (ranked / centred on the host in float64) and
traced input (inside ``jax.jit``, in float32).
"""

import warnings

import jax
import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as st_h

from jaxrank import metrics as M
from test_metrics import _brute_pairwise_accuracy

INF = np.inf


def _jit(name):
    f = getattr(M, name)
    return jax.jit(lambda a, b: f(a, b))


def _scipy(name, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"kendall_tau": lambda: st.kendalltau(x, y)[0], "spearman": lambda: st.spearmanr(x, y)[0],
                "pearson": lambda: st.pearsonr(x, y)[0]}[name]()


# ------------------------------------------------------------------ infinite ties (_sign_diff)
INF_CASES = [
    ([INF, INF, 1.0, 2.0], [4.0, 3.0, 1.0, 2.0]),
    ([-INF, -INF, -1.0, -2.0], [4.0, 3.0, 1.0, 2.0]),
    ([INF, -INF, INF, 0.0, -INF], [1.0, 2.0, 3.0, 4.0, 5.0]),
    ([1.0, 2.0, 3.0, 4.0], [INF, INF, -INF, 0.0]),
]


@pytest.mark.parametrize("x, y", INF_CASES)
@pytest.mark.parametrize("path", ["host", "jit"])
def test_kendall_tau_with_infinite_ties_matches_scipy(x, y, path):
    x, y = np.array(x), np.array(y)
    f = M.kendall_tau if path == "host" else _jit("kendall_tau")
    got = float(f(np.float32(x) if path == "jit" else x, np.float32(y) if path == "jit" else y))
    assert np.isfinite(got)
    np.testing.assert_allclose(got, st.kendalltau(x, y)[0], rtol=1e-5)


@pytest.mark.parametrize("x, y", INF_CASES)
def test_spearman_with_infinite_ties_matches_scipy(x, y):
    x, y = np.array(x), np.array(y)
    np.testing.assert_allclose(float(M.spearman(x, y)), st.spearmanr(x, y)[0], rtol=1e-5)
    np.testing.assert_allclose(float(_jit("spearman")(np.float32(x), np.float32(y))), st.spearmanr(x, y)[0],
                               rtol=1e-5)


@pytest.mark.parametrize("x, y", INF_CASES)
@pytest.mark.parametrize("path", ["host", "jit"])
def test_pairwise_accuracy_counts_an_infinite_tie_as_half(x, y, path):
    x, y = np.array(x), np.array(y)
    f = M.pairwise_accuracy if path == "host" else _jit("pairwise_accuracy")
    np.testing.assert_allclose(float(f(x, y)), _brute_pairwise_accuracy(x, y), rtol=1e-6)
    if path == "host" and x[0] == x[1] == INF:
        assert _brute_pairwise_accuracy(x, y) == pytest.approx(5.5 / 6)         # the reviewer's case: 5 right + a half


def test_context_mean_keeps_a_context_with_infinite_ties():
    x = np.array([[-INF, -INF, -1.0, -2.0], [1.0, 2.0, 3.0, 4.0]])
    y = np.array([[4.0, 3.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    want = np.mean([st.kendalltau(x[0], y[0])[0], 1.0])
    np.testing.assert_allclose(float(M.context_mean(M.kendall_tau(x, y))), want, rtol=1e-5)


# ------------------------------------------------------------------ scale invariance and constancy
def test_the_reviewers_pearson_cases():
    x, y = np.array([0.5, 0.50001, 0.50002, 0.50003]), np.array([10.0, 20.0, 30.0, 95.0])
    want = st.pearsonr(x, y)[0]
    for gold in (y, y / 100, y * 1e6):                                   # the gold's units do not matter
        np.testing.assert_allclose(float(M.pearson(x, gold)), want, rtol=1e-5)
    x, g = np.array([1e-7, 2e-7, 3e-7, 4e-7]), np.array([1.0, 2.0, 3.0, 5.0])
    for f in (M.pearson, _jit("pearson")):
        np.testing.assert_allclose(float(f(x, g)), st.pearsonr(x, g)[0], rtol=1e-5)
        np.testing.assert_allclose(float(f(x * 1e7, g)), st.pearsonr(x, g)[0], rtol=1e-5)


@pytest.mark.parametrize("name", ["pearson", "spearman", "kendall_tau"])
@pytest.mark.parametrize("scale", [1e-7, 1e7])
def test_scaling_either_side_leaves_the_correlation(name, scale):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    want = [_scipy(name, a, b) for a, b in zip(x, y)]
    for a, b in ((x * scale, y), (x, y * scale), (x * scale, y / scale)):
        np.testing.assert_allclose(np.asarray(getattr(M, name)(a, b)), want, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(_jit(name)(np.float32(a), np.float32(b))), want,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["pearson", "spearman"])
@pytest.mark.parametrize("scale", [1e-7, 1.0, 1e7])
def test_a_constant_side_is_nan_at_any_scale(name, scale):
    f = getattr(M, name)
    const = np.full(5, 0.1 * scale)
    varied = np.array([1.0, 2.0, 3.0, 5.0, 8.0])
    for path in (f, _jit(name)):
        assert np.isnan(float(path(const, varied))) and np.isnan(float(path(varied * scale, const)))
    assert np.isnan(float(f(np.full(5, -1234.567), varied)))


@settings(max_examples=60, deadline=None)
@given(st_h.lists(st_h.floats(-1e3, 1e3, allow_nan=False), min_size=3, max_size=9),
       st_h.sampled_from([1e-7, 1e-3, 1.0, 1e4, 1e7]), st_h.integers(0, 2**31 - 1))
def test_correlations_match_scipy_at_any_scale(values, scale, seed):
    x = np.array(values)
    y = np.random.default_rng(seed).permutation(len(x)) + np.random.default_rng(seed).normal(size=len(x))
    for name in ("spearman", "kendall_tau", "pearson"):
        want = _scipy(name, x, y)
        got = float(getattr(M, name)(x * scale, y))
        if np.ptp(x) <= len(x) * np.finfo(float).eps * np.max(np.abs(x)):   # constant: undefined on both sides
            assert np.isnan(got)
        elif name != "pearson" or np.ptp(x) > 1e-6 * np.max(np.abs(x)):    # Pearson: a spread SciPy resolves
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ float64 beyond float32 precision
def test_float64_values_closer_than_float32_stay_distinct():
    x, g = np.array([-1234.56700, -1234.56701, -1234.56702]), np.array([1.0, 2.0, 3.0])
    assert float(M.spearman(x, g)) == pytest.approx(st.spearmanr(x, g)[0]) == -1.0
    assert float(M.kendall_tau(x, g)) == pytest.approx(st.kendalltau(x, g)[0]) == -1.0
    assert float(M.pearson(x, g)) == pytest.approx(st.pearsonr(x, g)[0], rel=1e-5)
    assert float(M.pairwise_accuracy(x, g)) == 0.0
    np.testing.assert_array_equal(np.asarray(M.average_ranks(x)), st.rankdata(x))


@settings(max_examples=40, deadline=None)
@given(st_h.lists(st_h.sampled_from([-INF, INF, 0.0, 1.0, 1.0 + 1e-12, -3.5, 7.0]), min_size=1, max_size=8),
       st_h.lists(st_h.booleans(), min_size=8, max_size=8))
def test_host_average_ranks_match_rankdata_with_a_mask(values, mask):
    x = np.array(values)
    where = np.array(mask[:len(x)])
    got = np.asarray(M.average_ranks(np.stack([x, x[::-1]]), where=np.stack([where, where[::-1]])))
    for row, (v, w) in enumerate(((x, where), (x[::-1], where[::-1]))):
        want = np.zeros(len(v))
        want[w] = st.rankdata(v[w]) if w.any() else []
        np.testing.assert_array_equal(got[row], want)
