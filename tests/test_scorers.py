"""Every scorer against an independent NumPy/SciPy formulation (tests/reference.py)."""

import numpy as np
import jax
import jax.numpy as jnp
from scipy import optimize
from scipy.special import expit, log_expit
import pytest

import jaxrank as jr
import reference as ref

SEEDS = range(4)


def _case(seed, n=9, r=30, symmetric=False, weights=True, bias=0.0):
    rng = np.random.default_rng(seed)
    i, j, p, w, true = ref.random_context(rng, n, r, symmetric=symmetric, weights=weights, bias=bias)
    return (i, j, p, w, n), jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)


@pytest.mark.parametrize("seed", SEEDS)
def test_win_ratio_and_average_probability(seed):
    args, c = _case(seed)
    np.testing.assert_allclose(jr.win_ratio(c), ref.win_ratio(*args), atol=1e-6)
    np.testing.assert_allclose(jr.win_ratio(c, threshold=0.6), ref.win_ratio(*args, tau=0.6), atol=1e-6)
    np.testing.assert_allclose(jr.average_probability(c), ref.average_probability(*args), atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("hard", [False, True])
@pytest.mark.parametrize("debias", [False, True])
def test_poe_gaussian_matches_anchored_least_squares(seed, hard, debias):
    args, c = _case(seed)
    expect = ref.poe_gaussian(*args, beta="mean" if debias else 0.5, hard=hard)
    np.testing.assert_allclose(jr.poe_gaussian(c, debias=debias, hard=hard), expect, atol=2e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_poe_gaussian_covariance_is_laplacian_pseudo_inverse(seed):
    (i, j, p, w, n), c = _case(seed)
    post = jr.poe_gaussian_posterior(c)
    np.testing.assert_allclose(post.covariance, ref.poe_gaussian_covariance(i, j, w, n), atol=1e-4)
    np.testing.assert_allclose(post.mean, jr.poe_gaussian(c), atol=1e-6)


@pytest.mark.parametrize("n", [4, 10, 16])
def test_poe_gaussian_equals_average_probability_on_full_set(n):
    # PoE App. A.3: with all N(N-1) comparisons, s* = avg-prob up to shift and positive scale.
    rng = np.random.default_rng(n)
    i, j, p, w, _ = ref.random_context(rng, n)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    s, ap = np.asarray(jr.poe_gaussian(c)), np.asarray(jr.average_probability(c))
    np.testing.assert_allclose(s, (ap - ap.mean()) * (n - 1) / n, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("debias", [False, "mean", "learn"])
def test_poe_bradley_terry_matches_scipy(seed, debias):
    args, c = _case(seed, bias=0.4, symmetric=True)
    i, j, p, w, n = args
    pbar = np.sum(w * p) / np.sum(w)
    gamma = np.log((1 - pbar) / pbar) if debias == "mean" else 0.0
    expect, g = ref.soft_bt(*args, gamma=gamma, learn=debias == "learn")
    sol = jr.fit_poe_bradley_terry(c, debias=debias)
    assert bool(sol.converged)
    np.testing.assert_allclose(sol.scores, expect, atol=2e-4)
    np.testing.assert_allclose(sol.gamma, g, atol=2e-4)
    assert float(sol.grad_norm) < 1e-3


def test_debias_true_is_mean():
    _, c = _case(0, bias=0.5)
    np.testing.assert_array_equal(jr.poe_bradley_terry(c, debias=True), jr.poe_bradley_terry(c, debias="mean"))
    np.testing.assert_array_equal(jr.poe_gaussian(c, debias=True), jr.poe_gaussian(c, debias="mean"))


def test_learnt_gamma_recovers_planted_bias():
    rng = np.random.default_rng(7)
    n = 12
    true = rng.normal(size=n)
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    p = 1 / (1 + np.exp(-(true[a] - true[b] - 0.7)))       # gamma = 0.7 favours position B
    sol = jr.fit_poe_bradley_terry(jr.Comparisons.from_pairs(a, b, p, num_items=n), debias="learn")
    np.testing.assert_allclose(sol.gamma, 0.7, atol=1e-4)
    np.testing.assert_allclose(sol.scores, true - true.mean(), atol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ["newton", "newman", "zermelo"])
def test_bradley_terry_matches_scipy_maximum_likelihood(seed, method):
    args, c = _case(seed, n=8, r=40, weights=False)
    expect = ref.bradley_terry(*args, prior=1 / (args[4] - 1))
    sol = jr.fit_bradley_terry(c, method=method, tol=1e-5, max_iter=100_000)  # float32 resolution
    assert bool(sol.converged)
    np.testing.assert_allclose(sol.scores, expect, atol=5e-4)


def test_newman_needs_fewer_iterations_than_zermelo():
    _, c = _case(3, n=16, r=60, weights=False)
    newman = jr.fit_bradley_terry(c, method="newman", tol=1e-6)
    zermelo = jr.fit_bradley_terry(c, method="zermelo", tol=1e-6, max_iter=100_000)
    assert int(newman.iterations) * 3 < int(zermelo.iterations)
    np.testing.assert_allclose(newman.scores, zermelo.scores, atol=1e-3)
    newton = jr.fit_bradley_terry(c, tol=1e-6)
    assert int(newton.iterations) * 3 < int(newman.iterations)
    np.testing.assert_allclose(newton.scores, newman.scores, atol=1e-4)


def test_newton_bradley_terry_shares_the_soft_bt_program():
    """Hard BT (default method) runs soft BT's compiled solver: after soft BT it compiles nothing big."""
    import jax

    _, c = _case(4, n=9, r=30, weights=False)
    jr.fit_poe_bradley_terry(c, tol=1e-4)
    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, dur, **kw: compiled.append(dur) if name == "/jax/core/compile/backend_compile_duration" else None)
    jr.fit_bradley_terry(c, prior=0.3)
    jr.fit_bradley_terry(c)
    assert len(compiled) <= 2       # only the small smoothing transform (once per prior kind)


@pytest.mark.parametrize("name", ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian",
                                  "poe_gaussian_hard", "poe_bradley_terry"])
def test_relabelling_items_permutes_scores(name):
    args, c = _case(1)
    i, j, p, w, n = args
    perm = np.random.default_rng(0).permutation(n)     # item a becomes perm[a]
    c2 = jr.Comparisons.from_pairs(perm[i], perm[j], p, num_items=n, weight=w)
    f = jr.SCORERS[name]
    np.testing.assert_allclose(np.asarray(f(c2))[perm], f(c), atol=1e-4)


@pytest.mark.parametrize("name", ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian",
                                  "poe_bradley_terry"])
def test_swapping_positions_with_complemented_p_is_invariant(name):
    args, c = _case(2)
    f = jr.SCORERS[name]
    np.testing.assert_allclose(f(c.swapped()), f(c), atol=1e-4)


def test_weight_two_equals_duplicate_comparison():
    (i, j, p, w, n), _ = _case(5, weights=False)
    w2 = np.ones_like(p); w2[0] = 2.0
    c_w = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w2)
    c_d = jr.Comparisons.from_pairs(np.r_[i, i[0]], np.r_[j, j[0]], np.r_[p, p[0]], num_items=n)
    for name in ["average_probability", "poe_gaussian", "poe_bradley_terry", "bradley_terry"]:
        np.testing.assert_allclose(jr.SCORERS[name](c_w), jr.SCORERS[name](c_d), atol=1e-4, err_msg=name)


def test_soft_bt_on_saturated_bootstrap_like_data_converges_to_the_optimum():
    """Regression: p in {0, .25, .5, .75, 1} with integer multinomial weights (a bootstrap
    resample) once stopped after a failed line search while reporting convergence."""
    rng = np.random.default_rng(7)
    a, b = np.nonzero(~np.eye(16, dtype=bool))
    for _ in range(6):
        p = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=240).astype(np.float32)
        w = (4.0 * rng.multinomial(60, np.full(240, 1 / 240))).astype(np.float32)
        c = jr.Comparisons.from_pairs(a, b, p, num_items=16, weight=w)
        sol = jr.fit_poe_bradley_terry(c)
        live = np.bincount(a, w, 16) + np.bincount(b, w, 16) > 0
        expected, _ = ref.soft_bt(a, b, np.clip(p, 1e-6, 1 - 1e-6), w, 16)
        assert bool(sol.converged) and np.all(np.isfinite(sol.scores))
        if c.is_connected():
            got = np.asarray(sol.scores)[live]
            want = expected[live]
            np.testing.assert_allclose(got - got.mean(), want - want.mean(), atol=2e-3, rtol=1e-3)


def test_soft_bt_with_eps_zero_and_all_win_pairs_stays_finite():
    """eps=0 (no clipping) with p exactly 0 or 1 on some pairs: finite scores, never a silent NaN."""
    i = np.array([0, 1, 2, 0, 1, 2, 1, 0])
    j = np.array([1, 2, 0, 2, 0, 1, 2, 1])
    p = np.array([1.0, 0.0, 0.5, 0.75, 0.25, 0.5, 1.0, 0.5], np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=3)
    sol = jr.fit_poe_bradley_terry(c, eps=0.0)
    assert np.all(np.isfinite(np.asarray(sol.scores))) and bool(sol.converged)
    expected, _ = ref.soft_bt(i, j, p, np.ones(8), 3)
    np.testing.assert_allclose(sol.scores, expected, atol=1e-4)


def test_football_bradley_terry_matches_a_float64_newton_solve():
    """49k real matches, 337 teams (two components): teams with a handful of games sit next to teams
    with a thousand. A stopping rule scaled by the busiest team stopped 0.08 short on a 4-game team."""
    from scipy.special import expit
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from jaxrank.data import data_dir
    from jaxrank.io import read_comparisons

    c = read_comparisons(data_dir() / "international_football" / "results.csv", item_a="home_team",
                         item_b="away_team", score_a="home_score", score_b="away_score").comparisons
    i, j = (np.asarray(x[0]) for x in (c.i, c.j))
    p, w = (np.asarray(x[0], np.float64) for x in (c.p, c.weight))
    n = c.num_items
    _, lab = connected_components(coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n)), directed=False)
    proj = (lab[:, None] == lab[None, :]).astype(float)
    proj /= proj.sum(1, keepdims=True)
    prior = 1 / (len(np.unique(np.r_[i, j])) - 1)
    y = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))
    a, b = w * (y + prior), w * (1 - y + prior)
    s = np.zeros(n)
    for _ in range(100):                                  # float64 Newton on the dense Hessian
        q = expit(s[i] - s[j])
        r, h = (a + b) * q - a, (a + b) * q * (1 - q)
        g = np.bincount(i, r, n) - np.bincount(j, r, n)
        hess = np.zeros((n, n))
        np.add.at(hess, (i, i), h); np.add.at(hess, (j, j), h); np.add.at(hess, (i, j), -h); np.add.at(hess, (j, i), -h)
        d = np.linalg.solve(hess + proj, -g)
        s += d
        if np.abs(d).max() < 1e-12:
            break
    s -= proj @ s
    sol = jr.fit_bradley_terry(c)
    assert bool(sol.converged[0])
    np.testing.assert_allclose(np.asarray(sol.scores)[0], s, atol=1e-3)


def test_rarely_seen_extreme_item_is_solved_to_its_own_precision():
    """An item with 3 lost games among items with thousands of games: hard and soft BT at the optimum."""
    rng = np.random.default_rng(5)
    n = 12
    a = rng.integers(1, n, 600)
    b = 1 + (a - 1 + rng.integers(1, n - 1, 600)) % (n - 1)       # items 1..11 among themselves
    p = (rng.random(600) < 0.5).astype(np.float32)
    w = np.full(600, 20.0, np.float32)                             # 20 games per pair: ~2000 per item
    a, b, p, w = np.r_[a, 0, 0, 0], np.r_[b, 1, 2, 3], np.r_[p, 0, 0, 0], np.r_[w, 1, 1, 1]
    c = jr.Comparisons.from_pairs(a, b, p.astype(np.float32), num_items=n, weight=w.astype(np.float32))
    expect = ref.bradley_terry(a, b, p, w, n, prior=1 / (n - 1))
    sol = jr.fit_bradley_terry(c)
    assert bool(sol.converged)
    np.testing.assert_allclose(sol.scores, expect, atol=2e-3)
    soft = jr.fit_poe_bradley_terry(c, eps=1e-3)
    expect_soft, _ = ref.soft_bt(a, b, np.clip(p, 1e-3, 1 - 1e-3), w, n)
    np.testing.assert_allclose(soft.scores, expect_soft, atol=2e-3)


def _newton64(i, j, p, w, n, learn=False):
    """Float64 Newton on the dense Hessian of the soft-BT likelihood (plus gamma if learnt), centred."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.special import expit

    _, lab = connected_components(coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n)), directed=False)
    proj = (lab[:, None] == lab[None, :]).astype(float)
    proj /= proj.sum(1, keepdims=True)
    m = n + learn
    x = np.zeros(m)
    for _ in range(100):
        s, g = x[:n], (x[n] if learn else 0.0)
        q = expit(s[i] - s[j] - g)
        r, h = w * (q - p), w * q * (1 - q)
        grad = np.zeros(m)
        grad[:n] = np.bincount(i, r, n) - np.bincount(j, r, n)
        hess = np.zeros((m, m))
        np.add.at(hess, (i, i), h); np.add.at(hess, (j, j), h); np.add.at(hess, (i, j), -h); np.add.at(hess, (j, i), -h)
        hess[:n, :n] += proj
        if learn:
            grad[n] = -r.sum() + 1e-6 * x[n]
            col = -(np.bincount(i, h, n) - np.bincount(j, h, n))
            hess[:n, n] = hess[n, :n] = col
            hess[n, n] = h.sum() + 1e-6
        d = np.linalg.solve(hess, -grad)
        x += d
        if np.abs(d).max() < 1e-12:
            break
    x[:n] -= proj @ x[:n]
    return x[:n], (x[n] if learn else 0.0)


@pytest.mark.parametrize("graph", ["near_chain", "two_components"])
@pytest.mark.parametrize("debias", [False, "learn"])
def test_large_sparse_pools_solve_newton_systems_by_cg(graph, debias):
    """From _graph.CG_MIN_ITEMS items, Newton systems are solved matrix-free by preconditioned CG
    (no N x N Laplacian): the optimum must still be the exact one, also on badly conditioned graphs
    (a near-chain: comparisons only between neighbours at most 3 apart) and disconnected ones."""
    from jaxrank import _graph

    rng = np.random.default_rng(11)
    n, r = 560, 6000
    assert n >= _graph.CG_MIN_ITEMS and not _graph.use_dense(n, r)
    if graph == "near_chain":
        i = rng.integers(0, n - 3, r); j = i + rng.integers(1, 4, r)
    else:
        half = n // 2
        i = rng.integers(0, half, r); j = (i + rng.integers(1, half, r)) % half
        i[r // 2:] += half; j[r // 2:] += half
    s = 1.5 * rng.normal(size=n)
    p = np.clip(1 / (1 + np.exp(-(s[i] - s[j] + 0.3))) + rng.normal(0, 0.05, r), 0.01, 0.99)
    w = rng.uniform(0.5, 2.0, r)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    sol = jr.fit_poe_bradley_terry(c, debias=debias)
    expected, gamma = _newton64(i, j, np.asarray(c.p, np.float64), np.asarray(c.weight, np.float64), n,
                                learn=debias == "learn")
    assert bool(sol.converged) and int(sol.iterations) <= 10      # Newton's steps, not a gradient crawl
    # padded to its bucket (560 -> 640 items, 6000 -> 6144 comparisons) the near-chain with a learnt bias
    # reaches its gradient's float32 rounding level 2.5e-3 from the optimum (its slowest mode is that flat):
    # the solve must take that last Newton step, and must not stop on a contraction estimate from a CG
    # step solved too loosely to show it (issue 33; padding only changes the rounding of CG's sums)
    np.testing.assert_allclose(np.asarray(sol.scores), expected, atol=1e-3)
    if debias == "learn":
        assert abs(float(sol.gamma) - gamma) < 1e-3


def test_newman_update_in_the_log_domain_matches_the_strength_form_and_stays_finite():
    """``_mm.newman_update`` against Newman's eq. 13 written in strengths r = exp(s) with NumPy float64,
    on scores spread over 200 log-units (exp(s) overflows float32 there; the log form must not)."""
    from jaxrank import _graph
    from jaxrank.scoring import _mm

    rng = np.random.default_rng(0)
    n, r = 7, 30
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    a, b = rng.uniform(0.1, 2.0, r), rng.uniform(0.1, 2.0, r)
    s = np.linspace(-100, 100, n)[rng.permutation(n)]
    c = jr.Comparisons.from_pairs(i, j, np.full(r, 0.5, np.float32), num_items=n)
    e = _graph.edges(c, dense=False)
    got = _mm.newman_update(e, a.astype(np.float32), b.astype(np.float32), s.astype(np.float32), np.ones(n, bool))
    rr = np.exp(s)                                          # float64: exp(100) is fine here
    num = np.bincount(i, a * rr[j] / (rr[i] + rr[j]), n) + np.bincount(j, b * rr[i] / (rr[i] + rr[j]), n)
    den = np.bincount(i, b / (rr[i] + rr[j]), n) + np.bincount(j, a / (rr[i] + rr[j]), n)
    assert np.all(np.isfinite(np.asarray(got)))
    np.testing.assert_allclose(np.asarray(got), np.log(num / den), rtol=1e-5, atol=1e-3)


def test_newman_step_with_bias_and_prior_vanishes_at_the_map_and_matches_the_strength_form():
    """``_mm.newman_step`` with a positional bias ``gamma`` and a score prior ``lambda``: equal to
    ``log`` of Newman's eq. 13 in strengths (NumPy float64, the prior's ``lambda max(-s, 0)`` wins and
    ``lambda max(s, 0)`` losses added), zero at SciPy's float64 MAP, and the capped polish of
    ``soft_bt``'s start leaves that MAP where it is."""
    from jaxrank import _graph
    from jaxrank.scoring import _mm

    rng = np.random.default_rng(3)
    n, r, gamma, lam = 8, 40, 0.4, 0.05
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0.05, 0.95, r)
    a, b = p, 1 - p
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)
    e = _graph.edges(c, dense=False)

    def f(s):
        d = s[i] - s[j] - gamma
        return -np.sum(a * log_expit(d) + b * log_expit(-d)) + 0.5 * lam * s @ s

    smap = optimize.minimize(f, np.zeros(n), method="BFGS", options=dict(gtol=1e-12)).x
    s = rng.normal(size=n) * 2
    rr, rg = np.exp(s), np.exp(gamma)
    den_ij = rr[i] + rg * rr[j]                                # P(i beats j) = r_i / (r_i + e^gamma r_j)
    won = np.bincount(i, a * rg * rr[j] / den_ij, n) + np.bincount(j, b * rr[i] / den_ij, n) + lam * np.maximum(-s, 0)
    lost = (np.bincount(i, b * rr[i] / den_ij, n) + np.bincount(j, a * rg * rr[j] / den_ij, n)
            + lam * np.maximum(s, 0))
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    got = _mm.newman_step(e, f32(a), f32(b), f32(s), gamma, lam)
    np.testing.assert_allclose(np.asarray(got), np.log(won / lost), rtol=1e-4, atol=1e-5)
    at_map = _mm.newman_step(e, f32(a), f32(b), f32(smap), gamma, lam)
    np.testing.assert_allclose(np.asarray(at_map), 0.0, atol=2e-5)
    labels = jnp.zeros(n, jnp.int32)
    polished = _mm.newman_polish(e, f32(a), f32(b), f32(smap - smap.mean()), gamma, lam, labels, 3, 2.0)
    np.testing.assert_allclose(np.asarray(polished), smap - smap.mean(), atol=1e-4)


@pytest.mark.parametrize("noise", [0.0, 1.5])
def test_hard_bt_on_a_large_sparse_pool_starts_from_newman_and_reaches_the_same_fixed_point(noise):
    """From 512 items hard BT starts Newton from Newman's updates (``start="mm"``); the fixed point is the
    one the least-squares start reaches, on separable decisions (noise 0) and on noisy ones."""
    from jaxrank import _graph
    from jaxrank.scoring import soft_bt

    n = _graph.CG_MIN_ITEMS
    rng = np.random.default_rng(1)
    i = rng.integers(0, n, 8 * n)
    j = (i + rng.integers(1, n, 8 * n)) % n
    t = rng.normal(size=n)
    p = expit(t[i] - t[j] + noise * rng.normal(size=i.shape)).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    prior = 1.0 / (n - 1)                 # hard BT = soft BT on smoothed decisions (PoE eq. 1-2 with the prior)
    y = (p > 0.5).astype(np.float32)
    smooth = jr.Comparisons.from_pairs(i, j, ((y + prior) / (1 + 2 * prior)).astype(np.float32), num_items=n,
                                       weight=np.full(i.shape, 1 + 2 * prior, np.float32))
    solver = jr.BradleyTerrySolver(eps=0.0, tol=1e-3)
    ls = soft_bt.solve(smooth, solver, check=False, start="least_squares")
    mm = soft_bt.solve(smooth, solver, check=False, start="mm")
    top = jr.fit_bradley_terry(c)
    assert bool(ls.converged) and bool(mm.converged) and bool(top.converged)
    np.testing.assert_allclose(mm.scores, ls.scores, atol=1e-3)
    assert int(mm.iterations) < int(ls.iterations)          # the point of the start: fewer Newton steps
    np.testing.assert_allclose(np.asarray(top.scores), np.asarray(mm.scores), atol=1e-4)


def test_start_option_is_validated():
    from jaxrank.scoring import soft_bt

    c = jr.Comparisons.from_pairs([0, 1], [1, 2], [0.7, 0.4], num_items=3)
    with pytest.raises(ValueError, match="start"):
        soft_bt.solve(c, jr.BradleyTerrySolver(), start="newman")
    with pytest.raises(ValueError, match="start='mm'"):
        soft_bt.solve(c, jr.BradleyTerrySolver(debias="learn"), start="mm")


def test_hard_bt_on_separable_decisions_in_the_cg_path_matches_a_float64_optimum():
    """Separable hard decisions (every one follows a latent order) on a pool above CG_MIN_ITEMS: the
    inexact Newton steps (CG residual floor at the solver's tol) still land on the exact MAP of the
    smoothed decisions, computed here in float64 by SciPy's trust-region Newton on the dense Hessian."""
    from scipy import optimize
    from scipy.special import log_expit

    from jaxrank import _graph

    rng = np.random.default_rng(5)
    n, r = 560, 5600
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    t = rng.normal(size=n)
    p = expit(t[i] - t[j]).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    assert _graph.use_cg(_graph.edges(c))
    prior = 1.0 / (n - 1)                                 # PoE eq. 1-2 with the 1/(N-1) prior
    y = (p > 0.5).astype(float)
    ps, w = (y + prior) / (1 + 2 * prior), np.full(r, 1 + 2 * prior)

    def f(s):    # + n/2 mean(s)^2 pins the shift, leaving the centred optimum unchanged
        d = s[i] - s[j]
        return -np.sum(w * (ps * log_expit(d) + (1 - ps) * log_expit(-d))) + 0.5 * n * s.mean() ** 2

    def grad(s):
        rr = w * (expit(s[i] - s[j]) - ps)
        return np.bincount(i, rr, n) - np.bincount(j, rr, n) + s.mean()

    def hess(s):
        q = expit(s[i] - s[j])
        h, m = w * q * (1 - q), np.zeros((n, n))
        np.add.at(m, (i, i), h); np.add.at(m, (j, j), h); np.add.at(m, (i, j), -h); np.add.at(m, (j, i), -h)
        return m + 1.0 / n

    ref = optimize.minimize(f, np.zeros(n), jac=grad, hess=hess, method="trust-exact",
                            options=dict(gtol=1e-10, maxiter=500))
    assert ref.success and np.ptp(ref.x) > 30                 # saturated: scores spread far
    sol = jr.fit_bradley_terry(c)
    got = np.asarray(sol.scores, np.float64)
    assert bool(sol.converged)
    np.testing.assert_allclose(got - got.mean(), ref.x - ref.x.mean(), atol=2e-3)


def _newman_root(i, j, a, b, others, moved, lo=-6000.0, hi=6000.0):
    """float64 root of ``log A(x) - log B(x)`` for the items ``moved`` (a 0/1 mask over all items)
    translated together by ``x``, the others held; comparisons inside the moved set cancel."""
    from scipy.optimize import brentq
    from scipy.special import log_expit, logsumexp

    def phi(x):
        s = others + x * moved
        d = s[i] - s[j]
        head, tail = moved[i] > moved[j], moved[j] > moved[i]          # leaving the moved set
        won = np.r_[np.log(a[head]) + log_expit(-d[head]), np.log(b[tail]) + log_expit(d[tail])]
        lost = np.r_[np.log(b[head]) + log_expit(d[head]), np.log(a[tail]) + log_expit(-d[tail])]
        return logsumexp(won) - logsumexp(lost)

    return brentq(phi, lo, hi, xtol=1e-12)


def test_saturation_step_is_exact_wherever_the_items_comparisons_are_saturated():
    """``_mm.saturation_step`` against the float64 root (SciPy ``brentq``) of Newman's equation
    ``log A_n(x) - log B_n(x) = 0`` for item 0, the others held: exact in one step when all its
    comparisons stay saturated, whichever side (wins far below only; wins far below and losses far
    above; held loosely between the two with prior mass both ways, where Newton's step on
    ``log A - log B`` is unbounded because both are flat; and 2,000 log-units below everything, where
    the sigmoids underflow), and within 5% of the distance for a mildly off item."""
    from jaxrank import _graph
    from jaxrank.scoring import _mm

    def check(i, j, a, b, others, x0, rel=2e-3):
        n = len(others)
        c = jr.Comparisons.from_pairs(i, j, np.full(len(i), 0.5, np.float32), num_items=n)
        e = _graph.edges(c, dense=False)
        moved = (np.arange(n) == 0).astype(float)
        root = _newman_root(i, j, a, b, np.r_[0.0, others[1:]], moved)
        s = jnp.asarray(np.r_[x0, others[1:]], jnp.float32)
        step = float(jax.jit(_mm.saturation_step)(e, jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), s)[0])
        assert abs(x0 + step - root) <= rel * abs(root - x0) + 1e-4, (x0 + step, root)
        return step, float(_mm.newman_step(e, jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), s)[0])

    # one-sided: item 0 beat items 1..3, all far below it (edges 0 -> k); b: a small prior of wins back
    i, j = np.array([0, 0, 0]), np.array([1, 2, 3])
    step, newman = check(i, j, np.array([1.0, 2.0, 1.0]), np.full(3, 1e-3), np.r_[0, -30.0, -31, -29], 0.0)
    assert abs(step - newman) < 1e-3 * abs(newman)
    # two-sided: also lost to items 4..6 far above (edges k -> 0); no prior mass that would not saturate
    i, j = np.array([0, 0, 0, 4, 5, 6]), np.array([1, 2, 3, 0, 0, 0])
    a, b = np.array([1.0, 2.0, 1.0, 1.0, 1.5, 1.0]), np.full(6, 1e-12)
    step, newman = check(i, j, a, b, np.r_[0, -12.0, -13, -11, 10, 11, 12], 0.0)
    assert abs(newman - 2 * step) < 1e-3 * abs(newman)
    # loosely held: 3 wins far below, 2 losses far above, prior mass 1e-4 both ways on every comparison;
    # the net prior pull sends it down until the nearest wins' tail balances it, 17 log-units away
    i, j = np.array([0, 0, 0, 4, 5]), np.array([1, 2, 3, 0, 0])
    a, b = np.full(5, 1.0001), np.full(5, 1e-4)
    check(i, j, a, b, np.r_[0, -40.0, -45, -50, 40, 45], 0.0)
    # far below every opponent: one-sided, exact from 60 below; from 150 below (its sigmoids underflow
    # float32: summed as sigmoids, B_n was 0 and the step came out wrong by thousands) the largest
    # step, MODEL_STEP_MAX, straight up
    far = (np.array([1, 2, 3]), np.array([0, 0, 0]), np.full(3, 1.0), np.full(3, 1e-3), np.r_[0, 1.0, 2, 3])
    check(*far, -60.0)
    with pytest.raises(AssertionError):
        check(*far, -150.0)
    c = jr.Comparisons.from_pairs(far[0], far[1], np.full(3, 0.5, np.float32), num_items=4)
    s = jnp.asarray([-150.0, 1, 2, 3], jnp.float32)
    step = _mm.saturation_step(_graph.edges(c, dense=False), jnp.asarray(far[2], jnp.float32),
                               jnp.asarray(far[3], jnp.float32), s)
    assert float(step[0]) == _mm.MODEL_STEP_MAX
    # near its root: Newton's accuracy
    i, j = np.array([0, 0, 0, 4, 5, 6]), np.array([1, 2, 3, 0, 0, 0])
    check(i, j, a[:1].repeat(6), np.full(6, 1e-12), np.r_[0, -2.0, -1.5, -1.0, 1.0, 2.0, 0.5], 0.3, rel=0.05)


def test_saturation_step_of_a_linked_group_is_its_exact_translation():
    """Items 0 and 1 linked by a close comparison, every other comparison of theirs saturated: with
    ``groups`` putting them together, both take the same step, the float64 root of the pair's
    translation equation (the comparison inside the pair cancels); alone, each item is held by the
    other and moves far less."""
    from jaxrank import _graph
    from jaxrank.scoring import _mm

    i = np.array([0, 0, 0, 5, 1, 1, 6, 7])
    j = np.array([1, 2, 3, 0, 4, 3, 1, 1])
    a, b = np.full(8, 1.0002), np.full(8, 2e-4)
    others = np.r_[0.0, -6.0, -40, -45, -50, 40, 45, 50]
    moved = (np.arange(8) < 2).astype(float)
    root = _newman_root(i, j, a, b, others, moved)
    c = jr.Comparisons.from_pairs(i, j, np.full(8, 0.5, np.float32), num_items=8)
    e = _graph.edges(c, dense=False)
    args = (e, jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), jnp.asarray(others, jnp.float32))
    groups = jnp.asarray([0, 0, 2, 3, 4, 5, 6, 7], jnp.int32)
    step = np.asarray(_mm.saturation_step(*args, groups=groups))
    assert step[0] == step[1] and abs(step[0] - root) < 2e-3 * abs(root), (step[:2], root)
    alone = np.asarray(_mm.saturation_step(*args))
    assert np.all(np.abs(alone[:2]) < 0.5 * abs(root))
    # the groups come from label propagation over the linked comparisons
    linked = jnp.abs(jnp.asarray(others[i] - others[j])) < 14
    assert np.array_equal(np.asarray(_graph.merge_labels(e, linked, 3)), np.asarray(groups))


def test_hard_bt_on_20000_separable_items_converges_to_a_stationary_point():
    """20,000 items, 200,000 decisions that all follow one latent order (the memory benchmark's pool):
    before the group steps and the damped, clipped Newton system the fit ended unconverged after 100
    steps with one item 2,000+ log-units out and a float64 gradient of 1e-3. Now it converges, and
    the gradient of the smoothed objective recomputed in float64 NumPy at its scores is at float32's
    level everywhere."""
    n = 20_000
    rng = np.random.default_rng(0)
    i = rng.integers(0, n, 10 * n)
    j = (i + rng.integers(1, n, 10 * n)) % n
    t = rng.normal(size=n)
    p = (1.0 / (1.0 + np.exp(-(t[i] - t[j])))).astype(np.float32)
    sol = jr.fit_bradley_terry(jr.Comparisons.from_pairs(i, j, p, num_items=n))
    assert bool(sol.converged) and int(sol.iterations) < 60
    s = np.asarray(sol.scores, np.float64)
    prior = 1.0 / (n - 1)
    y = (p > 0.5).astype(float)
    a, b = y + prior, 1 - y + prior
    r = (a + b) * expit(s[i] - s[j]) - a
    g = np.bincount(i, r, n) - np.bincount(j, r, n)
    assert np.abs(g).max() < 1e-5
    assert 100 < np.ptp(s) < 300                 # saturated, and no item sent thousands of units out


def test_hard_bt_on_the_5000_item_separable_pool_is_close_to_a_float64_optimum():
    """The memory benchmark's 5,000 items with 50,000 decisions that all follow one latent order: hard
    BT (Newman start, Newton with per-item log-domain steps and loose CG far out) against a float64
    Newton-CG solve of the same smoothed problem in NumPy/SciPy. Before the per-item steps the
    float32 fit stopped 0.096 off (loosely held mid-ranked items); float32 resolves these items to a
    few hundredths."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.linalg import LinearOperator, cg

    rng = np.random.default_rng(0)
    n = 5000
    r = 10 * n
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    t = rng.normal(size=n)
    p = (1.0 / (1.0 + np.exp(-(t[i] - t[j])))).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    sol = jr.fit_bradley_terry(c)
    assert bool(sol.converged)

    prior = 1.0 / (n - 1)
    y = (p > 0.5).astype(float)
    a, b = y + prior, 1 - y + prior
    rows = np.r_[np.arange(r), np.arange(r)]
    inc = csr_matrix((np.r_[np.ones(r), -np.ones(r)], (rows, np.r_[i, j])), shape=(r, n))
    f = lambda s: np.sum(a * np.logaddexp(0, -(inc @ s)) + b * np.logaddexp(0, inc @ s))
    s = np.zeros(n)
    for _ in range(200):                       # float64 Newton, Jacobi-CG to 1e-12, Armijo backtracking
        d = inc @ s
        q = expit(d)
        g = inc.T @ ((a + b) * q - a)
        h = (a + b) * q * (1 - q)
        diag = np.bincount(i, h, n) + np.bincount(j, h, n) + 1.0 / n
        op = LinearOperator((n, n), matvec=lambda v: inc.T @ (h * (inc @ v)) + v.mean())
        step, _ = cg(op, -(g - g.mean()), rtol=1e-12, maxiter=5 * n, M=LinearOperator((n, n), matvec=lambda v: v / diag))
        fs, tt = f(s), 1.0
        while f(s + tt * step) > fs + 1e-4 * tt * (g @ step):
            tt *= 0.5
        s = s + tt * step
        if np.abs(tt * step).max() < 1e-9:
            break
    got = np.asarray(sol.scores, np.float64)
    assert np.ptp(s) > 100                      # saturated: the scores spread over 100+ log-units
    assert np.abs((got - got.mean()) - (s - s.mean())).max() < 0.05
