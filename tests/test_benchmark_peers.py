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


def _selection(S=3, C=4, R=20, n=6, seed=2):
    """Nested selections as ``select_nested`` draws them: a random spanning chain first (every budget
    ``>= n - 1`` connects all items), then random pairs."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, (S, C, R))
    j = (i + rng.integers(1, n, (S, C, R))) % n
    order = rng.permuted(np.tile(np.arange(n), (S, C, 1)), axis=-1)
    i[..., :n - 1], j[..., :n - 1] = order[..., :-1], order[..., 1:]
    p = rng.uniform(0.05, 0.95, (S, C, R))
    p[..., n:n + 2] = 0.5                             # exact ties of decisions
    labels = rng.integers(1, 6, (C, n)).astype(np.float64)
    labels[1] = 2.0                                   # a constant human row: that context's Spearman is NaN
    return i, j, p, labels


@pytest.mark.parametrize("name", ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian",
                                  "poe_gaussian_hard", "poe_bradley_terry"])
def test_vectorised_curves_equal_the_per_problem_loop(name):
    """The efficiency sweep's baseline (one vectorised call per budget) = the papers' loop over (budget, subset,
    context) with ``scipy.stats.spearmanr``, on the same nested selections (PoE-BT: Newton to 1e-8 against BFGS
    at its default tolerance, so to 1e-6; the hard-decision scorers' exactly tied scores, which rounding splits
    either way, merged by rounding both to 1e-9)."""
    i, j, p, labels = _selection()
    budgets = [5, 6, 10, 20]
    dec = 9 if name in ("win_ratio", "bradley_terry", "poe_gaussian_hard") else None   # hard: exact ties merged
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loop = _vec_peers.loop_curves(name, i, j, p, labels, budgets, decimals=dec)
    vec = _vec_peers.vec_curves(name, i, j, p, labels, budgets, decimals=dec)
    assert vec.shape == (len(budgets), 3) and np.all(np.isfinite(loop))
    np.testing.assert_allclose(vec, loop, atol=1e-6 if name == "poe_bradley_terry" else 1e-9)


def test_vectorised_curves_equal_an_independent_spearman():
    """Closed form check of one curve cell: Pearson correlation of average ranks, mean over contexts."""
    i, j, p, labels = _selection()
    vec = _vec_peers.vec_curves("average_probability", i, j, p, labels, [20])
    s, rho = 2, []
    for c in range(labels.shape[0]):
        won = np.zeros(6)
        games = np.zeros(6)
        for a, b, q in zip(i[s, c], j[s, c], p[s, c]):
            won[a] += q
            won[b] += 1 - q
            games[a] += 1
            games[b] += 1
        score = np.where(games > 0, won / np.maximum(games, 1), 0.5)
        ra, rb = stats.rankdata(score), stats.rankdata(labels[c])
        if np.ptp(rb) > 0:
            rho.append(np.corrcoef(ra, rb)[0, 1])
    assert vec[0, s] == pytest.approx(np.mean(rho), abs=1e-12)


def test_bootstrap_scale_times_evalica_at_the_tolerance_matching_jaxrank():
    """bootstrap_scale's evalica loop runs at the loosest tolerance as accurate as jaxrank (not 1e-10)."""
    pytest.importorskip("evalica")
    import bootstrap_scale

    import jaxrank as jr

    a, b, y = _counts_raw()
    i, j, games, won, _ = _data.counts(a, b, y, 12)
    c = jr.Comparisons.from_pairs(i, j, (won / games).astype(np.float32), num_items=12,
                                  weight=games.astype(np.float32))
    tol, e_ev, e_jr = bootstrap_scale.evalica_tolerance(i, j, games, won, 12, jr.poe_bradley_terry(c, eps=0.0))
    ref = _data.ml_float64(i, j, games, won, np.zeros_like(won), 12)
    s, _ = _data.evalica_scores(*_data.evalica_inputs(i, j, games, won, np.zeros_like(won)), 12, tolerance=tol)
    assert 1e-8 <= tol <= 1e-4
    assert e_ev <= e_jr and np.abs(s - s.mean() - ref).max() == pytest.approx(e_ev)
    assert 0 < e_jr < 1e-4                                          # jaxrank's float32 error, measured


def _counts_raw(n=12, m=3000, seed=1):
    rng = np.random.default_rng(seed)
    strength = rng.standard_normal(n)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    y = (rng.random(m) < 1 / (1 + np.exp(-(strength[a] - strength[b])))).astype(np.float64)
    return a.astype(np.int32), b.astype(np.int32), y


def test_first_call_table_reads_no_answer_instead_of_evalica_times():
    """A peer's constant output is never shown as a time: the first-call and steady cells name why."""
    import first_call

    why = "no answer (constant scores after 2 iterations)"
    runs = [{"first": 0.01, "steady": 0.0004, "answer": why}, {"first": 0.02, "steady": 0.0005, "answer": "yes"}]
    assert first_call.answer_or(runs, "0.01 [0.01-0.02]") == why
    assert first_call.answer_or([{"first": 0.5, "answer": "yes"}], "0.50") == "0.50"
    assert first_call.answer_or([{"first": 0.5}], "0.50") == "0.50"                 # jaxrank rows: no answer key


def test_first_call_flags_evalica_reaching_its_iteration_cap():
    import first_call

    assert _data.no_answer([0.1, 0.3, 0.2], 100, first_call.EVALICA_LIMIT) == "no answer (iteration cap 100 reached)"


def test_arena_scale_times_choix_at_the_tolerance_matching_jaxrank():
    """choix runs at the loosest tolerance as accurate as the target (not a fixed 1e-10), and its answer is real."""
    pytest.importorskip("choix")
    import arena_scale

    a, b, y = _counts_raw()
    ref = _data.ml_float64(*_data.counts(a, b, y, 12), 12)
    data = arena_scale.choix_prepare(a, b, y)
    tol, err = arena_scale.choix_tolerance(data, 12, ref, 1e-5)
    s = arena_scale.choix_fit(data, 12, tol)[0]
    assert 1e-8 <= tol <= 1e-4 and err <= 1e-5
    assert np.abs(s - s.mean() - ref).max() == pytest.approx(err) and _data.no_answer(s) == ""


def test_vectorised_poe_bradley_terry_centres_every_component():
    """Two components and two unjudged items: the minimum-norm optimum (each component centred, unjudged 0)."""
    rng = np.random.default_rng(3)
    B, n = 4, 8
    i = np.concatenate([rng.integers(0, 4, (B, 12)), rng.integers(4, 6, (B, 4))], 1)
    j = np.concatenate([(i[:, :12] + rng.integers(1, 4, (B, 12))) % 4, 9 - i[:, 12:]], 1)
    p = rng.uniform(0.1, 0.9, i.shape)
    s = _vec_peers.vec_poe_bradley_terry(i, j, p, n)
    for k in range(B):
        def f(x):
            d = x[i[k]] - x[j[k]]
            return -np.sum(p[k] * np.log(1 / (1 + np.exp(-d))) + (1 - p[k]) * np.log(1 / (1 + np.exp(d))))
        ref = optimize.minimize(f, np.zeros(n), method="BFGS", options={"gtol": 1e-10}).x
        ref[:4] -= ref[:4].mean()
        ref[4:6] -= ref[4:6].mean()
        np.testing.assert_allclose(s[k, :6], ref[:6], atol=1e-5)
        assert np.all(s[k, 6:] == 0)


def test_newton_bradley_terry_peer_is_the_mm_fixed_point():
    """The Newton peer of hard BT reaches the fixed point the papers' Zermelo/MM approaches (run here to 1e-12)."""
    i, j, p, _, n = _pool()
    vec = _vec_peers.vec_bradley_terry_newton(i, j, p, n)
    mm = np.stack([_vec_peers.np_bradley_terry(i[k], j[k], p[k], n, tol=1e-12, max_iter=100_000)[0]
                   for k in range(len(i))])
    np.testing.assert_allclose(vec, mm, atol=1e-6)
    assert _vec_peers.vec_scorer("bradley_terry", "newton") is _vec_peers.vec_bradley_terry_newton
