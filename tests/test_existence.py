"""Maximum likelihood without a finite optimum (win graph not strongly connected): detected, warned, MAP.

References are independent: the MAP scores come from SciPy's BFGS on the float64 objective
``-log L(s) + lambda/2 |s|^2``, and strong connectivity from a NumPy transitive closure.
"""

import warnings

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy.special import expit, log_expit

import jaxrank as jr
from jaxrank.scoring import existence
from jaxrank.scoring.existence import AUTO_SCORE_PRIOR, NotStronglyConnectedWarning

import reference as ref


def _map_scores(i, j, p, w, n, lam):
    """float64 argmin of -sum w [p log sig(d) + (1 - p) log sig(-d)] + lam/2 |s|^2 (SciPy BFGS)."""
    i, j, p, w = (np.asarray(x) for x in (i, j, p, w))

    def f(s):
        d = s[i] - s[j]
        return -np.sum(w * (p * log_expit(d) + (1 - p) * log_expit(-d))) + 0.5 * lam * s @ s

    def g(s):
        r = w * (expit(s[i] - s[j]) - p)
        return np.bincount(i, r, n) - np.bincount(j, r, n) + lam * s

    return optimize.minimize(f, np.zeros(n), jac=g, method="BFGS", options=dict(gtol=1e-10, maxiter=10_000)).x


def _closure_ok(i, j, p, w, n):
    """Each connected component's win graph strongly connected, by boolean transitive closure."""
    arc = np.zeros((n, n), bool)
    live = w > 0
    arc[i[live & (p > 0)], j[live & (p > 0)]] = True      # A won some: A -> B
    arc[j[live & (p < 1)], i[live & (p < 1)]] = True      # B won some: B -> A
    reach = arc | np.eye(n, dtype=bool)
    und = arc | arc.T | np.eye(n, dtype=bool)
    for _ in range(max(1, int(np.ceil(np.log2(n))) + 1)):
        reach = (reach.astype(int) @ reach.astype(int)) > 0
        und = (und.astype(int) @ und.astype(int)) > 0
    return bool(np.all(reach[und]))


def _fit(c, **kw):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        sol = jr.fit_poe_bradley_terry(c, eps=0.0, **kw)
    return sol, [r for r in rec if issubclass(r.category, NotStronglyConnectedWarning)]


def _undefeated():
    """Items 0-2 compared softly both ways; item 3 beat items 0 and 1 (once in position B)."""
    i = np.array([0, 1, 2, 0, 3, 1])
    j = np.array([1, 2, 0, 2, 0, 3])
    p = np.array([0.6, 0.7, 0.4, 0.5, 1.0, 0.0], np.float32)
    w = np.array([3.0, 2.0, 4.0, 1.0, 2.0, 1.0], np.float32)
    return i, j, p, w, 4


def _blocks_joined_one_way():
    """Two strongly connected triangles (0-2 and 3-5); every cross comparison won by the first block."""
    i = np.array([0, 1, 2, 3, 4, 5, 0, 4, 2])
    j = np.array([1, 2, 0, 4, 5, 3, 3, 1, 5])
    p = np.array([0.7, 0.6, 0.3, 0.5, 0.8, 0.4, 1.0, 0.0, 1.0], np.float32)
    w = np.array([2.0, 3.0, 2.0, 2.0, 1.0, 3.0, 1.0, 2.0, 1.0], np.float32)
    return i, j, p, w, 6


@pytest.mark.parametrize("case, outside", [(_undefeated, [3]), (_blocks_joined_one_way, [3, 4, 5])])
def test_not_strongly_connected_gives_the_map_and_a_warning_that_names_the_items(case, outside):
    i, j, p, w, n = case()
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    sol, warned = _fit(c)
    assert len(warned) == 1
    msg = str(warned[0].message)
    assert "not strongly connected" in msg and f"score_prior={AUTO_SCORE_PRIOR:g}" in msg
    assert f"({', '.join(map(str, outside))})" in msg
    rep = existence.win_graph_report(i, j, p, w, n)
    assert rep["without_finite_score"] == outside
    expect = _map_scores(i, j, p, w, n, AUTO_SCORE_PRIOR)
    assert bool(sol.converged) and int(sol.iterations) < 20          # was 100 unconverged steps
    np.testing.assert_allclose(sol.scores, expect, atol=2e-3)
    assert abs(float(np.sum(sol.scores))) < 1e-3                      # the prior's MAP is centred
    if case is _undefeated:
        assert int(np.argmax(sol.scores)) == 3


def test_strongly_connected_eps_zero_is_plain_maximum_likelihood_without_warning():
    i, j, p, w, n = _undefeated()
    p = p.copy()
    p[4] = 0.9                                          # item 3 lost a little: strongly connected
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    sol, warned = _fit(c)
    assert warned == []
    expect, _ = ref.soft_bt(i, j, p, w, n)
    np.testing.assert_allclose(sol.scores, expect, atol=2e-4)


def test_batch_warns_once_and_applies_the_prior_only_where_needed():
    cases = [_undefeated(), _undefeated(), _undefeated()]
    i, j, p, w, n = cases[0]
    ps = np.stack([p, np.where(p == 1.0, 0.9, p), np.where(p == 0.0, 0.2, p)]).astype(np.float32)
    c = jr.Comparisons.from_pairs(np.stack([i] * 3), np.stack([j] * 3), ps, num_items=n,
                                  weight=np.stack([w] * 3))
    sol, warned = _fit(c)
    assert len(warned) == 1 and "1 of 3 contexts" in str(warned[0].message)
    np.testing.assert_allclose(sol.scores[0], _map_scores(i, j, ps[0], w, n, AUTO_SCORE_PRIOR), atol=2e-3)
    for b in (1, 2):
        np.testing.assert_allclose(sol.scores[b], ref.soft_bt(i, j, ps[b], w, n)[0], atol=2e-4)


def test_inside_jit_the_prior_still_applies_silently():
    i, j, p, w, n = _blocks_joined_one_way()
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = jax.jit(lambda cc: jr.poe_bradley_terry(cc, eps=0.0))(c)
    np.testing.assert_allclose(got, _map_scores(i, j, p, w, n, AUTO_SCORE_PRIOR), atol=2e-3)


def test_a_score_prior_or_eps_skips_the_check():
    i, j, p, w, n = _undefeated()
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = jr.poe_bradley_terry(c, eps=0.0, score_prior=0.5)
        jr.poe_bradley_terry(c)                          # eps = 1e-6: finite, no check
        jr.bradley_terry(c)                              # hard BT: its virtual wins keep it finite
    np.testing.assert_allclose(got, _map_scores(i, j, p, w, n, 0.5), atol=2e-3)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_finite_ml_matches_a_transitive_closure(seed, sparse):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 10))
    r = int(rng.integers(1, 3 * n))
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.choice([0.0, 1.0, 0.5], size=r, p=[0.45, 0.45, 0.1]).astype(np.float32)
    w = rng.choice([0.0, 1.0, 2.0], size=r, p=[0.1, 0.6, 0.3]).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    old = existence.DENSE_MAX_ITEMS
    existence.DENSE_MAX_ITEMS = 0 if sparse else old
    try:
        got = bool(jax.jit(lambda cc: existence.finite_ml(cc, cc.components(), 0.0))(c))
    finally:
        existence.DENSE_MAX_ITEMS = old
    want = _closure_ok(i, j, p, w, n)
    assert got == want
    assert (existence.win_graph_report(i, j, p, w, n)["without_finite_score"] == []) == want


def test_all_football_teams_warn_and_converge_at_once():
    """337 teams (49,520 matches; 21 outside the 316-team strongly connected set): detected up front."""
    from jaxrank.data import data_dir
    from jaxrank.io import read_comparisons

    c = read_comparisons(data_dir() / "international_football" / "results.csv", item_a="home_team",
                         item_b="away_team", score_a="home_score", score_b="away_score").comparisons
    sol, warned = _fit(c)
    assert len(warned) == 1 and "not strongly connected" in str(warned[0].message)
    assert bool(sol.converged[0]) and int(sol.iterations[0]) < 20
    i, j, p, w = (np.asarray(x[0]) for x in (c.i, c.j, c.p, c.weight))
    assert not _closure_ok(i, j, p, w, c.num_items)
    s = np.asarray(sol.scores[0], np.float64)
    r = w * (expit(s[i] - s[j]) - p)                   # stationarity of the MAP objective (float32 fit)
    g = np.bincount(i, r, c.num_items) - np.bincount(j, r, c.num_items) + AUTO_SCORE_PRIOR * s
    games = np.bincount(i, w, c.num_items) + np.bincount(j, w, c.num_items)
    assert np.all(np.abs(g) <= 1e-3 * (games + 1))


def _report_by_closure(i, j, p, w, n):
    """``win_graph_report``'s fields from NumPy transitive closures (independent of SciPy's graph code)."""
    live = w > 0
    arc = np.zeros((n, n), bool)
    arc[i[live & (p > 0)], j[live & (p > 0)]] = True
    arc[j[live & (p < 1)], i[live & (p < 1)]] = True
    reach, und = arc | np.eye(n, dtype=bool), arc | arc.T | np.eye(n, dtype=bool)
    for _ in range(int(np.ceil(np.log2(n))) + 1):
        reach = (reach.astype(int) @ reach.astype(int)) > 0
        und = (und.astype(int) @ und.astype(int)) > 0
    strong = reach & reach.T
    compared = np.zeros(n, bool)
    compared[i[live]] = compared[j[live]] = True
    outside, weak_seen, strong_seen = [], set(), set()
    for v in np.flatnonzero(compared):
        weak_seen.add(int(np.flatnonzero(und[v])[0]))
        strong_seen.add(int(np.flatnonzero(strong[v])[0]))
    for root in sorted(weak_seen):
        members = np.flatnonzero(und[root] & compared)
        groups = {int(np.flatnonzero(strong[m])[0]) for m in members}      # smallest item of each strong set
        keep = min(groups, key=lambda g: (-int(strong[g].sum()), g))
        outside += [int(m) for m in members if not strong[keep, m]]
    return {"compared": int(compared.sum()), "components": len(weak_seen), "strong_components": len(strong_seen),
            "without_finite_score": sorted(outside)}


def _draw_multigraph(data):
    """A random multigraph ``(i, j, p, w, n)``: repeated pairs, draws, hard outcomes, zero weights, isolated items."""
    n = data.draw(st.integers(2, 12))
    r = data.draw(st.integers(1, 3 * n))
    i = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=r, max_size=r)))
    j = (i + np.array(data.draw(st.lists(st.integers(1, n - 1), min_size=r, max_size=r)))) % n
    p = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, 0.3]), min_size=r, max_size=r)))
    w = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=r, max_size=r)))
    return i, j, p, w, n


@pytest.mark.parametrize("bitmap", [True, False])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_win_graph_report_matches_transitive_closures(data, bitmap):
    """Random multigraphs with repeated pairs, draws, zero weights and isolated items; both de-duplication paths."""
    i, j, p, w, n = _draw_multigraph(data)
    old = existence.BITMAP_MAX_PAIRS
    existence.BITMAP_MAX_PAIRS = old if bitmap else 0
    try:
        got = existence.win_graph_report(i, j, p, w, n)
    finally:
        existence.BITMAP_MAX_PAIRS = old
    assert got == _report_by_closure(i, j, p, w, n)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_host_check_matches_transitive_closures(data):
    """The single-context host path (SciPy): component labels = the smallest item reachable
    undirected (isolated and zero-weight items alone), finite = the closure condition, and a report
    exactly when not finite."""
    i, j, p, w, n = _draw_multigraph(data)
    got = existence.host_check(i, j, p, w, n)
    live = w > 0
    und = np.eye(n, dtype=bool)
    und[i[live], j[live]] = und[j[live], i[live]] = True
    for _ in range(int(np.ceil(np.log2(n))) + 1):
        und = (und.astype(int) @ und.astype(int)) > 0
    np.testing.assert_array_equal(got.labels, np.argmax(und, axis=1))
    assert got.finite == _closure_ok(i, j, p, w, n)
    assert (got.report is None) == got.finite
    if not got.finite:
        assert got.report == _report_by_closure(i, j, p, w, n)
        later = existence.host_check(i, j, p, w, n, report=False)     # the report made afterwards (soft_bt)
        assert later.report is None and later.finite == got.finite
        assert existence.check_report(i, w, j, n, later) == got.report


@pytest.mark.parametrize("seed", [0, 1, 4])    # seed 4: not strongly connected
def test_single_context_host_check_fits_as_the_batched_device_check(seed):
    """One concrete context takes the host path, a batch the device path: same scores, same warning."""
    rng = np.random.default_rng(seed)
    n = 9
    i = rng.integers(0, n, 30)
    j = (i + rng.integers(1, n, 30)) % n
    p = rng.choice([0.0, 1.0, 0.5, 0.8], size=30).astype(np.float32)
    one = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    sol1, w1 = _fit(one)
    sol2, w2 = _fit(jr.stack_contexts([one, one]))
    np.testing.assert_allclose(sol1.scores, sol2.scores[0], atol=1e-5)
    assert len(w1) == len(w2) == (0 if _closure_ok(i, j, p, np.ones(30), n) else 1)


@pytest.mark.parametrize("seed", [2, 3])
def test_single_context_on_many_items_overlaps_its_start_and_fits_as_the_batch(seed):
    """150 items (dense Newton systems, LAPACK single-threaded): the host path dispatches its label-free
    least-squares start before the host check (``soft_bt.OVERLAP_MIN_ITEMS``); same scores as the batched
    device path, which does not."""
    from jaxrank.scoring import soft_bt

    rng = np.random.default_rng(seed)
    n, r = 150, 900
    assert n >= soft_bt.OVERLAP_MIN_ITEMS
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    s = rng.normal(size=n)
    p = (rng.random(r) < 1 / (1 + np.exp(-(s[i] - s[j])))).astype(np.float32)   # hard outcomes
    one = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=rng.integers(1, 4, r).astype(np.float32))
    sol1, w1 = _fit(one)
    sol2, w2 = _fit(jr.stack_contexts([one, one]))
    assert bool(sol1.converged)
    np.testing.assert_allclose(sol1.scores, sol2.scores[0], atol=2e-5)
    assert len(w1) == len(w2)
