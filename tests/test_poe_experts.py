"""The general Product-of-Experts solver (jaxrank.scoring.poe) and its experts (jaxrank.scoring.experts).

Yardsticks: the specialised scorers (themselves tested against SciPy in test_scorers.py),
SciPy's optimiser on the same objective written in NumPy, closed forms, finite differences.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy.special import expit

import jaxrank as jr
from jaxrank.scoring import experts, poe

import reference as ref

N, R = 7, 16           # one padded shape for most tests (few compilations)


def _context(rng, n, r, bias=0.3):
    s = rng.normal(size=n)
    order = rng.permutation(n)
    a = list(order[:-1]) + list(rng.integers(0, n, r - n + 1))
    b = list(order[1:]) + [(x + rng.integers(1, n)) % n for x in a[n - 1:]]
    a, b = np.array(a), np.array(b)
    p = expit(s[a] - s[b] + bias + 0.7 * rng.normal(size=r))
    return a, b, np.clip(p, 0.02, 0.98), rng.uniform(0.5, 2.0, size=r)


def _padded_batch(seed, sizes=((7, 16), (5, 11), (6, 9), (4, 6)), dtype=np.float32):
    """A batch padded to [len(sizes), R] comparisons and N items, padding with odd values (p = 0 or 1, i = j)."""
    rng = np.random.default_rng(seed)
    I, J = np.zeros((len(sizes), R), int), np.zeros((len(sizes), R), int)
    P, W = np.zeros((len(sizes), R)), np.zeros((len(sizes), R))
    M = np.zeros((len(sizes), N), bool)
    raw = []
    for k, (n, r) in enumerate(sizes):
        a, b, p, w = _context(rng, n, r)
        I[k, :r], J[k, :r], P[k, :r], W[k, :r], M[k, :n] = a, b, p, w, True
        P[k, r:] = rng.integers(0, 2, R - r)          # padded comparisons: p exactly 0 or 1, weight 0
        raw.append((a, b, p, w, n))
    c = jr.Comparisons.from_pairs(I, J, P.astype(dtype), num_items=N, weight=W.astype(dtype), item_mask=M)
    return c, raw


def _solver(expert, **kw):
    return jr.ProductOfExpertsSolver(expert, **kw)


# ------------------------------------------------------------------ built-ins reproduce the scorers
@pytest.mark.parametrize("debias", ["none", "mean", "learn"])
def test_soft_bradley_terry_expert_equals_poe_bradley_terry_and_its_laplace_posterior(debias):
    c, raw = _padded_batch(0)
    solver = _solver(experts.soft_bradley_terry(debias))
    sol = jr.fit_poe(c, solver)
    want = jr.fit_poe_bradley_terry(c, debias=debias)
    assert np.all(np.asarray(sol.result) == jr.RESULTS.successful)
    np.testing.assert_allclose(sol.scores, want.scores, atol=2e-4)
    np.testing.assert_allclose(sol.theta["gamma"], want.gamma, atol=2e-4)
    # and SciPy on the first context (independent)
    a, b, p, w, n = raw[0]
    gamma = float(want.gamma[0]) if debias == "mean" else 0.0
    s_ref, g_ref = ref.soft_bt(a, b, p, w, n, gamma=gamma, learn=debias == "learn")
    np.testing.assert_allclose(sol.scores[0, :n], s_ref, atol=3e-4)
    if debias == "learn":
        np.testing.assert_allclose(sol.theta["gamma"][0], g_ref, atol=3e-4)
    fit = jr.laplace_posterior(c, solver)
    post = jr.laplace_bradley_terry(c, debias=debias)
    np.testing.assert_allclose(fit.posterior.covariance, post.covariance, atol=5e-4, rtol=1e-3)
    np.testing.assert_allclose(fit.posterior.mean, post.mean, atol=2e-4)


@pytest.mark.parametrize("debias", ["none", "mean"])
def test_gaussian_expert_equals_poe_gaussian_and_its_posterior(debias):
    c, raw = _padded_batch(1)
    solver = _solver(experts.gaussian(debias))
    sol = jr.fit_poe(c, solver)
    assert np.all(np.asarray(sol.result) == jr.RESULTS.successful)
    np.testing.assert_allclose(sol.scores, jr.poe_gaussian(c, debias=debias == "mean"), atol=2e-5)
    a, b, p, w, n = raw[1]
    np.testing.assert_allclose(sol.scores[1, :n], ref.poe_gaussian(a, b, p, w, n, beta="mean" if debias == "mean"
                                                                     else 0.5), atol=2e-5)
    post = jr.laplace_posterior(c, solver).posterior
    np.testing.assert_allclose(post.covariance, jr.poe_gaussian_posterior(c).covariance, atol=2e-5)
    np.testing.assert_allclose(post.covariance[1, :n, :n], ref.poe_gaussian_covariance(a, b, w, n), atol=1e-4)
    # sigma scales the covariance by sigma^2 and leaves the scores; alpha scales the scores (closed form)
    post2 = jr.laplace_posterior(c, solver, theta={"sigma": 2.0, "alpha": 3.0}).posterior
    np.testing.assert_allclose(post2.covariance, 4 * post.covariance, atol=1e-4)
    np.testing.assert_allclose(post2.mean, 3 * post.mean, atol=1e-4)


# ------------------------------------------------------------------ a custom expert against SciPy
def logcosh_expert(d, p, theta):
    """A smooth Huber-like expert: log q = -log cosh((d - alpha (p - beta)) / scale)."""
    r = (d - theta["alpha"] * (p - theta["beta"])) / theta["scale"]
    return -(jnp.logaddexp(r, -r) - jnp.log(2.0))


def _numpy_objective(a, b, p, w, n, alpha, scale, learn_beta, beta0, prior):
    def f(z):
        s = np.concatenate([[0.0], z[: n - 1]])
        beta = z[n - 1] if learn_beta else beta0
        r = (s[a] - s[b] - alpha * (p - beta)) / scale
        val = np.sum(w * (np.logaddexp(r, -r) - np.log(2)))
        return val + (0.5 * prior * (beta - beta0) ** 2 if learn_beta else 0.0)
    return f


@pytest.mark.parametrize("learn", [False, True])
def test_custom_expert_agrees_with_scipy_minimize(learn):
    expert = jr.Expert(logcosh_expert, {"alpha": 4.0, "beta": 0.5, "scale": 0.7}, name="logcosh",
                       learnt=("beta",) if learn else ())
    c, raw = _padded_batch(2)
    sol = jr.fit_poe(c, _solver(expert, theta_prior=0.5))
    assert np.all(np.asarray(sol.result) == jr.RESULTS.successful)
    for k, (a, b, p, w, n) in enumerate(raw):
        f = _numpy_objective(a, b, p, w, n, 4.0, 0.7, learn, 0.5, 0.5)
        res = optimize.minimize(f, np.zeros(n - 1 + learn), method="BFGS", options=dict(gtol=1e-10))
        s = ref.centre(np.concatenate([[0.0], res.x[: n - 1]]))
        np.testing.assert_allclose(sol.scores[k, :n], s, atol=3e-4)
        np.testing.assert_allclose(sol.scores[k, n:], 0)
        if learn:
            np.testing.assert_allclose(sol.theta["beta"][k], res.x[n - 1], atol=3e-4)


def test_thurstone_and_heteroscedastic_experts_agree_with_scipy():
    from scipy.special import log_ndtr
    c, raw = _padded_batch(3)
    a, b, p, w, n = raw[0]
    for expert, nll in [
        (experts.thurstone(scale=1.3),
         lambda d: -np.sum(w * (p * log_ndtr(d / 1.3) + (1 - p) * log_ndtr(-d / 1.3)))),
        (experts.heteroscedastic_gaussian(alpha=3.0, kappa=0.5),
         lambda d: np.sum(w * (0.5 * (d - 3 * (p - .5)) ** 2 / (1 + 0.5 * (3 * (p - .5)) ** 2)))),
    ]:
        sol = jr.fit_poe(c, _solver(expert))
        f = lambda z: nll(np.concatenate([[0.0], z])[a] - np.concatenate([[0.0], z])[b])
        res = optimize.minimize(f, np.zeros(n - 1), method="BFGS", options=dict(gtol=1e-10))
        np.testing.assert_allclose(sol.scores[0, :n], ref.centre(np.concatenate([[0.0], res.x])), atol=3e-4,
                                   err_msg=expert.name)


# ------------------------------------------------------------------ L-BFGS path
@pytest.mark.parametrize("expert", [experts.soft_bradley_terry("learn"), experts.thurstone("mean"),
                                    jr.Expert(logcosh_expert, {"alpha": 4.0, "beta": 0.5, "scale": 0.7})],
                         ids=lambda e: e.name)
def test_optax_lbfgs_and_newton_agree(expert):
    with jax.enable_x64(True):
        c, _ = _padded_batch(4, dtype=np.float64)
        newton = jr.fit_poe(c, _solver(expert))
        lbfgs = jr.fit_poe(c, _solver(expert, method="lbfgs", tol=1e-9, max_iter=500))
        assert np.all(np.asarray(lbfgs.result) == jr.RESULTS.successful)
        assert np.all(np.asarray(newton.result) == jr.RESULTS.successful)
        np.testing.assert_allclose(lbfgs.scores, newton.scores, atol=1e-6)
        for k in expert.learnt:
            np.testing.assert_allclose(lbfgs.theta[k], newton.theta[k], atol=1e-6)


# ------------------------------------------------------------------ gradients by implicit differentiation
def _fd(f, x, idx, h=1e-6):
    out = []
    for k in idx:
        e = np.zeros_like(x)
        e[k] = h
        out.append((f(x + e) - f(x - e)) / (2 * h))
    return np.array(out)


@pytest.mark.parametrize("expert,theta_key", [(experts.soft_bradley_terry("learn"), "gamma"),
                                              (experts.soft_bradley_terry("mean"), "gamma"),
                                              (experts.thurstone("none"), "scale"),
                                              (experts.gaussian("learn"), "alpha")],
                         ids=lambda v: getattr(v, "name", v))
def test_gradients_in_p_weight_and_theta_match_finite_differences(expert, theta_key):
    with jax.enable_x64(True):
        c, _ = _padded_batch(5, dtype=np.float64)
        solver = _solver(expert)
        v = np.random.default_rng(0).normal(size=(c.batch_shape[0], N))
        theta0 = float(expert.theta[theta_key]) + 0.3

        def loss(p, w, th):
            cc = dataclasses.replace(c, p=p, weight=w)
            sol = poe.solve(cc, solver, {theta_key: th})
            extra = sum(jnp.sum(sol.theta[k]) for k in expert.learnt)
            return jnp.sum(sol.scores * v) + 0.7 * extra

        p0, w0 = np.asarray(c.p), np.asarray(c.weight)
        gp, gw, gt = jax.grad(loss, argnums=(0, 1, 2))(p0, w0, theta0)
        idx = [(0, 0), (1, 3), (2, 5), (3, 1)]
        flat = lambda f, x0: lambda x: float(f(x.reshape(x0.shape)))
        fd_p = _fd(flat(lambda p: loss(p, w0, theta0), p0), p0.ravel(), [np.ravel_multi_index(k, p0.shape) for k in idx])
        fd_w = _fd(flat(lambda w: loss(p0, w, theta0), w0), w0.ravel(), [np.ravel_multi_index(k, w0.shape) for k in idx])
        np.testing.assert_allclose([gp[k] for k in idx], fd_p, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose([gw[k] for k in idx], fd_w, rtol=1e-4, atol=1e-6)
        fd_t = (float(loss(p0, w0, theta0 + 1e-6)) - float(loss(p0, w0, theta0 - 1e-6))) / 2e-6
        np.testing.assert_allclose(gt, fd_t, rtol=1e-4, atol=1e-6)
        # padded comparisons (p = 0 or 1 there) get exactly zero gradient
        assert float(jnp.abs(gp[3, 6:]).max()) == 0.0


# ------------------------------------------------------------------ non-concave experts
def double_well(d, p, theta):
    """Not concave: log q = -(d^2 - 1)^2 has a minimum at d = 0 between two maxima."""
    return -((d - theta["shift"] * (p - 0.5)) ** 2 - 1.0) ** 2


def test_a_non_concave_expert_at_a_saddle_is_reported_not_solved():
    c, _ = _padded_batch(6)
    c = dataclasses.replace(c, p=jnp.where(c.weight > 0, 0.5, c.p))      # every d = 0 is stationary
    expert = jr.Expert(double_well, {"shift": 0.0}, name="double_well", concave=False)
    sol = jr.fit_poe(c, _solver(expert))
    assert np.all(np.asarray(sol.result) == jr.RESULTS.nonconcave)
    assert not np.asarray(sol.converged).any()
    with pytest.raises(jr.SolverError, match="nonconcave"):
        jr.fit_poe(c, _solver(expert, throw=True))
    # from a start off the saddle the damped steps climb to a maximum: a maximum by its Hessian (NumPy)
    expert2 = expert.replace(start=lambda p, th: 3.0 * (p - 0.5))
    sol2 = jr.fit_poe(_padded_batch(6)[0], _solver(expert2))
    ok = np.asarray(sol2.result) == jr.RESULTS.successful
    assert ok.any()
    cc = _padded_batch(6)[0]
    for k in np.nonzero(ok)[0]:
        one = jax.tree.map(lambda x: x[k], cc)
        hess = np.asarray(jax.hessian(lambda s: -jnp.sum(one.weight * double_well(s[one.i] - s[one.j], one.p,
                                                                                   {"shift": 0.0})))(
            sol2.scores[k]))
        n = int(one.item_mask.sum())
        eig = np.linalg.eigvalsh(hess[:n, :n] + np.ones((n, n)) / n)     # + the projector on shifts
        assert eig.min() > 0


def test_an_unbounded_expert_is_not_reported_successful():
    convex = jr.Expert(lambda d, p, th: 0.5 * d**2, {}, name="convex")
    sol = jr.fit_poe(_padded_batch(7)[0], _solver(convex, max_iter=30))
    assert not np.any(np.asarray(sol.result) == jr.RESULTS.successful)


# ------------------------------------------------------------------ jit, vmap, grad, no recompilation
def test_jit_vmap_grad_and_no_recompilation():
    c, _ = _padded_batch(8)
    solver = _solver(experts.thurstone("learn"))
    batch = jr.fit_poe(c, solver)
    per = jax.jit(jax.vmap(lambda cc: poe.solve_context(cc, solver).scores))(c)
    np.testing.assert_allclose(per, batch.scores, atol=1e-5)
    g = jax.jit(jax.grad(lambda p: jnp.sum(poe.solve_context(dataclasses.replace(
        jax.tree.map(lambda x: x[0], c), p=p), solver).scores[:3])))(c.p[0])
    assert np.all(np.isfinite(np.asarray(g)))
    before = poe._fit._cache_size()
    for scale in (0.5, 2.0):
        jr.fit_poe(c, dataclasses.replace(solver, tol=1e-4, max_iter=50), {"scale": scale})
    jr.fit_poe(c, _solver(experts.thurstone("learn")))          # an equal solver, built anew
    assert poe._fit._cache_size() == before


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="log_density"):
        jr.Expert(3.0)
    with pytest.raises(ValueError, match="learnt"):
        jr.Expert(logcosh_expert, {"alpha": 1.0}, learnt=("beta",))
    with pytest.raises(ValueError, match="method"):
        _solver(experts.gaussian(), method="sgd")
    with pytest.raises(ValueError, match="expert"):
        jr.ProductOfExpertsSolver(lambda d, p, t: d)
    with pytest.raises(ValueError, match="theta"):
        jr.fit_poe(_padded_batch(0)[0], _solver(experts.gaussian()), {"gama": 1.0})
    with pytest.raises(ValueError, match="debias"):
        experts.soft_bradley_terry("threshold")
    with pytest.raises(ValueError, match="solver"):
        jr.fit_poe(_padded_batch(0)[0], jr.BradleyTerrySolver())
    assert hash(experts.gaussian("mean")) == hash(experts.gaussian("mean", alpha=2.0))


# ------------------------------------------------------------------ invariances (hypothesis)
_BT = _solver(experts.soft_bradley_terry("none"))


def _one(seed):
    a, b, p, w = _context(np.random.default_rng(seed), 6, 12, bias=0.0)
    return a, b, p.astype(np.float32), w.astype(np.float32)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), perm_seed=st.integers(0, 10_000))
def test_relabelling_items_and_reordering_comparisons_permute_the_scores(seed, perm_seed):
    a, b, p, w = _one(seed)
    rng = np.random.default_rng(perm_seed)
    pi, order = rng.permutation(6), rng.permutation(12)
    s = jr.fit_poe(jr.Comparisons.from_pairs(a, b, p, num_items=6, weight=w), _BT).scores
    s2 = jr.fit_poe(jr.Comparisons.from_pairs(pi[a][order], pi[b][order], p[order], num_items=6, weight=w[order]),
                    _BT).scores
    np.testing.assert_allclose(np.asarray(s2)[pi], s, atol=2e-4)
    # swapping positions (i, j, p) -> (j, i, 1 - p) leaves the scores of a symmetric expert without bias
    s3 = jr.fit_poe(jr.Comparisons.from_pairs(b, a, 1 - p, num_items=6, weight=w), _BT).scores
    np.testing.assert_allclose(s3, s, atol=2e-4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), pad_seed=st.integers(0, 10_000))
def test_padding_never_changes_the_result(seed, pad_seed):
    a, b, p, w = _one(seed)
    rng = np.random.default_rng(pad_seed)
    s = jr.fit_poe(jr.Comparisons.from_pairs(a, b, p, num_items=6, weight=w), _BT).scores
    # 4 padded comparisons with any p (0 and 1 included) between real items, 2 padded items
    pa, pb = rng.integers(0, 6, 4), rng.integers(0, 6, 4)
    pp = rng.choice([0.0, 1.0, 0.3], 4).astype(np.float32)
    cp = jr.Comparisons.from_pairs(np.concatenate([a, pa]), np.concatenate([b, pb]), np.concatenate([p, pp]),
                                   num_items=8, weight=np.concatenate([w, np.zeros(4, np.float32)]),
                                   item_mask=np.arange(8) < 6)
    sp = jr.fit_poe(cp, _BT).scores
    # each fit stops within about tol (1e-5) of the optimum, from its own float32 rounding: padding changes the
    # shapes and so the rounding, and the two can differ by up to ~2 tol (seed 2632: 1.1e-5)
    np.testing.assert_allclose(sp[:6], s, atol=3e-5)
    np.testing.assert_array_equal(sp[6:], 0)
    # a shift of every score leaves the objective unchanged: the solution is centred whatever the start
    assert abs(float(jnp.sum(sp[:6]))) < 1e-4


# ------------------------------------------------------------------ zero-curvature regions in float64 (review)
def huber_expert(d, p, th):
    r = d - th["alpha"] * (p - 0.5)
    a, k = jnp.abs(r), th["k"]
    return -jnp.where(a <= k, 0.5 * r ** 2, k * (a - 0.5 * k))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_newton_on_huber_with_flat_curvature_matches_scipy(dtype):
    """Huber's linear tails have curvature 0: the Newton system takes the dtype's floor (1e-12 w in float64) and
    the step is ~1e12 too long; the line search must halve it back (30 halvings ended float64 line_search_failed,
    objective 3.533 against SciPy's 2.912). Reference: SciPy BFGS on the same objective in NumPy float64."""
    rng = np.random.default_rng(4)
    n, r = 5, 20
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0.05, 0.95, r)
    th = {"alpha": 4.0, "k": 0.3}

    def f_np(s):
        res = s[i] - s[j] - th["alpha"] * (p - 0.5)
        a = np.abs(res)
        return np.sum(np.where(a <= th["k"], 0.5 * res ** 2, th["k"] * (a - 0.5 * th["k"])))

    def g_np(s):
        res = s[i] - s[j] - th["alpha"] * (p - 0.5)
        psi = np.clip(res, -th["k"], th["k"])
        return np.bincount(i, psi, n) - np.bincount(j, psi, n)

    best = optimize.minimize(f_np, np.zeros(n), jac=g_np, method="BFGS", options={"gtol": 1e-12})
    s_ref = best.x - best.x.mean()
    with jax.enable_x64(dtype == np.float64):
        c = jr.Comparisons.from_pairs(i, j, p.astype(dtype), num_items=n)
        assert c.p.dtype == dtype
        sol = jr.fit_poe(c, jr.ProductOfExpertsSolver(jr.Expert(huber_expert, th, name="huber")))
        assert int(sol.result) == jr.RESULTS.successful and bool(sol.converged)
        s = np.asarray(sol.scores, np.float64)
    assert f_np(s) == pytest.approx(best.fun, rel=1e-5 if dtype == np.float32 else 1e-10)
    np.testing.assert_allclose(s, s_ref, atol=1e-3 if dtype == np.float32 else 1e-6)


# ------------------------------------------------------------------ "mean" debias without live comparisons (review)
def test_mean_debias_of_a_context_without_weight_is_neutral():
    """A context whose comparisons all have weight 0 has no positional bias to measure: gamma = 0 (beta = 0.5), not
    the gamma of mean p = 0 (+13.8 soft BT, 4.75 Thurstone). Beside it a live context gets the closed form
    gamma = log((1 - pbar) / pbar) (soft BT), -ndtri(pbar) (Thurstone), beta = pbar (Gaussian)."""
    from scipy.special import ndtri

    p = np.array([[0.7, 0.4, 0.8], [0.7, 0.4, 0.8]], np.float32)
    w = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 1.0]], np.float32)
    c = jr.Comparisons.from_pairs([[0, 1, 2]] * 2, [[1, 2, 0]] * 2, p, weight=w, num_items=3)
    pbar = np.sum(w[1] * p[1].astype(np.float64)) / np.sum(w[1])
    want = {"soft_bradley_terry": ("gamma", [0.0, np.log((1 - pbar) / pbar)]),
            "thurstone": ("gamma", [0.0, -ndtri(pbar)]), "gaussian": ("beta", [0.5, pbar])}
    for name, (key, ref_theta) in want.items():
        sol = jr.fit_poe(c, jr.ProductOfExpertsSolver(getattr(experts, name)("mean")))
        np.testing.assert_allclose(np.asarray(sol.theta[key]), ref_theta, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(np.asarray(sol.scores[0]), 0)
    fit = jr.laplace_posterior(c, jr.BradleyTerrySolver(debias="mean"))
    np.testing.assert_allclose(np.asarray(fit.solution.gamma), [0.0, np.log((1 - pbar) / pbar)], rtol=1e-5, atol=1e-6)
