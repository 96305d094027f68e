"""The benchmarks' peers give real answers: evalica's constant output is caught, the vectorised NumPy peers equal
the per-problem loop of the papers' code, the float64 reference is the optimum, evalica's matched tolerance is as
accurate as asked."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _data  # noqa: E402
import _vec_peers  # noqa: E402


def _pool(B=40, R=20, n=8, seed=0):
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, (B, R))
    j = (i + rng.integers(1, n, (B, R))) % n
    p = rng.uniform(0.05, 0.95, (B, R))
    p[:, :3] = 0.5                                   # exact ties of decisions
    gold = rng.integers(1, 6, (B, n)).astype(np.float64)
    gold[0] = 3.0                                    # a constant human row: Spearman undefined
    return i, j, p, gold, n


@pytest.mark.parametrize("name", ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian",
                                  "poe_gaussian_hard"])
def test_vectorised_peer_equals_the_loop(name):
    i, j, p, gold, n = _pool()
    loop = np.stack([_vec_peers.np_scorer(name)(i[k], j[k], p[k], n) for k in range(len(i))])
    vec = _vec_peers.vec_scorer(name)(i, j, p, n)
    np.testing.assert_allclose(vec, loop, atol=1e-9)


def test_vectorised_spearman_equals_scipy():
    i, j, p, gold, n = _pool()
    scores = np.round(_vec_peers.vec_scorer("win_ratio")(i, j, p, n), 12)      # many exact ties
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = [stats.spearmanr(scores[k], gold[k])[0] for k in range(len(i))]
    np.testing.assert_allclose(_vec_peers.vec_spearman(scores, gold), ref, atol=1e-12, equal_nan=True)
    assert np.isnan(_vec_peers.vec_spearman(scores, gold)[0])


def test_vectorised_poe_bradley_terry_is_the_optimum():
    i, j, p, _, n = _pool(B=6)
    s = _vec_peers.vec_poe_bradley_terry(i, j, p, n)
    for k in range(len(i)):
        def f(x):
            d = x[i[k]] - x[j[k]]
            return -np.sum(p[k] * np.log(1 / (1 + np.exp(-d))) + (1 - p[k]) * np.log(1 / (1 + np.exp(d))))
        ref = optimize.minimize(f, np.zeros(n), method="BFGS", options={"gtol": 1e-10}).x
        # components centred: compare differences along the comparisons
        np.testing.assert_allclose(s[k, i[k]] - s[k, j[k]], ref[i[k]] - ref[j[k]], atol=1e-5)


def _counts(n=12, m=3000, seed=1):
    rng = np.random.default_rng(seed)
    strength = rng.standard_normal(n)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    u = rng.random(m)
    q = 1 / (1 + np.exp(-(strength[a] - strength[b])))
    outcome = np.where(u < 0.8 * q, 1.0, np.where(u < 0.8 * q + 0.2, 0.5, 0.0))
    return _data.counts(a.astype(np.int32), b.astype(np.int32), outcome, n), n


def test_ml_float64_is_the_likelihood_maximum():
    (i, j, games, won, drawn), n = _counts()
    y = (won + drawn / 2) / games
    s = _data.ml_float64(i, j, games, won, drawn, n)

    def f(x):
        d = x[i] - x[j]
        return -np.sum(games * (y * np.log(1 / (1 + np.exp(-d))) + (1 - y) * np.log(1 / (1 + np.exp(d)))))
    ref = optimize.minimize(f, np.zeros(n), method="BFGS", options={"gtol": 1e-9}).x
    np.testing.assert_allclose(s, ref - ref.mean(), atol=1e-5)
    assert abs(s.mean()) < 1e-12


def test_no_answer_flags_constant_and_non_finite_scores():
    assert _data.no_answer(np.full(5, -23.0258), 2) == "no answer (constant scores after 2 iterations)"
    assert _data.no_answer([0.1, np.nan, 0.3]).startswith("no answer (1 non-finite")
    assert _data.no_answer([0.1, 0.2], 100, 100) == "no answer (iteration cap 100 reached)"
    assert _data.no_answer([0.1, 0.2], 7, 100) == ""


def test_evalica_on_a_pool_that_is_not_strongly_connected_is_no_answer():
    pytest.importorskip("evalica")
    (i, j, games, won, drawn), n = _counts()
    won[i == 0], drawn[i == 0] = games[i == 0], 0          # item 0 never loses: no finite ML scores
    won[j == 0], drawn[j == 0] = 0, 0
    s, it = _data.evalica_scores(*_data.evalica_inputs(i, j, games, won, drawn), n, tolerance=1e-6)
    assert _data.no_answer(s, it).startswith("no answer")


def test_matched_tolerance_is_at_least_as_accurate_as_asked():
    pytest.importorskip("evalica")
    (i, j, games, won, drawn), n = _counts()
    ref = _data.ml_float64(i, j, games, won, drawn, n)
    ins = _data.evalica_inputs(i, j, games, won, drawn)
    tol, err = _data.matched_tolerance(*ins, n, ref, 1e-4)
    s, _ = _data.evalica_scores(*ins, n, tolerance=tol)
    assert err <= 1e-4 and np.abs(s - s.mean() - ref).max() <= 1e-4
    assert tol >= 1e-8
