"""Learnt calibration (jaxrank.calibration) and its fit with optax (jaxrank.learning).

Every loss is checked against an independent NumPy/SciPy formulation: the Gaussian
evidence against ``scipy.stats.multivariate_normal`` on the dense ``R x R``
covariance, the ranking losses against explicit loops, the soft Spearman against
``scipy.stats.spearmanr`` in its hard limit. Gradients against central finite
differences in float64. Learning recovers a simulated judge's known temperature
and bias (:mod:`jaxrank.simulate`).
"""

import functools
from jax.flatten_util import ravel_pytree

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from compile_log import CompileLog
from jaxrank import calibration as cal
from jaxrank import learning, simulate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import experts, poe_bradley_terry, poe_gaussian

floats = st.floats(-3, 3, allow_nan=False, width=32)


def _spline(raw, bias, knots=(-2.0, -0.5, 0.0, 1.0, 3.0)):
    return cal.MonotoneSpline(jnp.asarray(raw, jnp.float32), jnp.asarray(bias, jnp.float32), knots)


# ------------------------------------------------------------------ the maps
@settings(max_examples=25, deadline=None)
@given(raw=st.lists(floats, min_size=6, max_size=6), bias=floats, a_raw=floats,
       x=st.lists(st.floats(-8, 8, allow_nan=False), min_size=2, max_size=12))
def test_maps_are_increasing(raw, bias, a_raw, x):
    x = np.sort(np.asarray(x, np.float32))
    for params in (_spline([raw], [bias]), cal.TemperatureBias(jnp.asarray([a_raw]), jnp.asarray([bias]))):
        f = np.asarray(cal.calibrate_logits(params, x))
        assert np.all(np.diff(f) >= -1e-5 * (1 + np.abs(f[1:])))
        strict = np.diff(x) > 1e-3
        assert np.all(np.diff(f)[strict] > 0)


@settings(max_examples=20, deadline=None)
@given(x=st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=10))
def test_identity_at_init(x):
    x = np.asarray(x, np.float32)
    for params in (cal.identity_temperature_bias(3), cal.identity_spline(3)):
        for judge in range(3):
            np.testing.assert_allclose(cal.calibrate_logits(params, x, np.full(x.shape, judge)), x,
                                       rtol=1e-5, atol=1e-5)
    c = Comparisons.from_pairs([0, 1], [1, 2], [0.2, 0.9], num_items=3)
    np.testing.assert_allclose(cal.calibrate(cal.identity_spline(), c).p, c.p, atol=1e-6)


def test_spline_against_numpy_interpolation():
    """Eq. (3) is the piecewise-linear interpolation of its values at the knots, extrapolated by the end slopes."""
    knots = np.array([-2.0, -0.5, 0.0, 1.0, 3.0])
    raw = np.array([[0.3, -1.0, 2.0, 0.1, -0.4, 1.2]])
    params = _spline(raw, [0.7], tuple(knots))
    slopes = np.log1p(np.exp(raw[0]))
    # values at the knots: f(0) = 0.7 and integrate the slopes outward from 0 (a knot)
    vals = np.empty(len(knots))
    k0 = 2
    vals[k0] = 0.7
    for k in range(k0 + 1, len(knots)):
        vals[k] = vals[k - 1] + slopes[k] * (knots[k] - knots[k - 1])
    for k in range(k0 - 1, -1, -1):
        vals[k] = vals[k + 1] - slopes[k + 1] * (knots[k + 1] - knots[k])
    x = np.linspace(-5, 6, 101)
    want = np.interp(x, knots, vals)
    want = np.where(x < knots[0], vals[0] + slopes[0] * (x - knots[0]), want)
    want = np.where(x > knots[-1], vals[-1] + slopes[-1] * (x - knots[-1]), want)
    np.testing.assert_allclose(cal.calibrate_logits(params, x.astype(np.float32)), want, rtol=1e-5, atol=1e-5)


def test_log_derivative_matches_finite_differences():
    params = _spline([[0.3, -1.0, 2.0, 0.1, -0.4, 1.2], [1.0, 0.0, -2.0, 0.5, 0.4, 0.2]], [0.7, -0.3])
    x = np.array([-4.0, -1.0, -0.2, 0.4, 2.0, 5.0, -4.0, 0.4], np.float32)
    judge = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    h = 1e-3
    fd = (np.asarray(cal.calibrate_logits(params, x + h, judge)) - np.asarray(cal.calibrate_logits(params, x - h, judge))) / (2 * h)
    np.testing.assert_allclose(np.exp(cal.log_derivative(params, x, judge)), fd, rtol=1e-3)
    tb = cal.TemperatureBias(jnp.array([0.4, -1.0]), jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(np.exp(cal.log_derivative(tb, x, judge)), np.log1p(np.exp([0.4, -1.0]))[judge], rtol=1e-6)


def test_per_judge_maps_and_concatenation():
    rng = np.random.default_rng(0)
    n, r = 5, 7
    mk = lambda: Comparisons.from_pairs(rng.integers(0, 3, (4, r)), rng.integers(3, n, (4, r)),
                                        rng.uniform(0.05, 0.95, (4, r)), num_items=n)
    c1, c2 = mk(), mk()
    both, judge = cal.concatenate_judges([c1, c2])
    assert both.p.shape == (4, 2 * r) and judge.shape == (4, 2 * r)
    np.testing.assert_array_equal(judge[:, :r], 0)
    np.testing.assert_array_equal(judge[:, r:], 1)
    params = cal.TemperatureBias(jnp.array([0.2, 1.5]), jnp.array([-0.4, 0.8]))
    out = cal.calibrate(params, both, judge)
    for k, ck in enumerate((c1, c2)):
        a, b = np.log1p(np.exp(float(params.raw_scale[k]))), float(params.bias[k])
        x = np.log(np.asarray(ck.p, np.float64)) - np.log1p(-np.asarray(ck.p, np.float64))
        np.testing.assert_allclose(out.p[:, k * r:(k + 1) * r], 1 / (1 + np.exp(-(a * x + b))), rtol=1e-5)


def test_bad_input():
    params = cal.identity_temperature_bias(2)
    with pytest.raises(ValueError, match="judge"):
        cal.calibrate_logits(params, np.zeros(3), np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="judge"):
        cal.calibrate_logits(params, np.zeros(3), np.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="knots"):
        cal.identity_spline(1, knots=(0.0, -1.0))
    with pytest.raises(ValueError, match="num_judges"):
        cal.identity_temperature_bias(0)
    with pytest.raises(ValueError, match="judged"):
        cal.concatenate_judges([])
    with pytest.raises(ValueError, match="steps"):
        learning.fit(learning.marginal_nll, None, steps=0)
    with pytest.raises(ValueError, match="optimizer"):
        learning.fit(learning.marginal_nll, None, optimizer="adam")
    c = Comparisons.from_pairs([[0]], [[1]], [[0.6]], num_items=2)
    with pytest.raises(ValueError, match="kind"):
        learning.ranking_loss(params, c, None, jnp.ones((1, 2)), jnp.ones((1, 2), bool), kind="listwise")
    with pytest.raises(ValueError, match="test_fraction"):
        learning.split_contexts(10, 1.0)


# ------------------------------------------------------------------ the losses
def _padded_batch(seed, contexts=3, n=6, r=12):
    """Random contexts with padded comparisons (weight 0), weights 1 and 2, and a padded item."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n - 1, (contexts, r))
    j = (i + rng.integers(1, n - 1, (contexts, r))) % (n - 1)
    w = rng.choice([0.0, 1.0, 1.0, 2.0], (contexts, r))
    mask = np.ones((contexts, n), bool)
    mask[:, -1] = False
    return Comparisons.from_pairs(i, j, rng.uniform(0.02, 0.98, (contexts, r)), num_items=n, weight=w,
                                  item_mask=mask)


def _evidence_numpy(c, y, tau, sigma):
    """-log N(y_live; 0, sigma^2 D^-1 + tau^2 W W^T) per context, by SciPy on the dense R x R covariance."""
    out = []
    for k in range(c.p.shape[0]):
        w = np.asarray(c.weight[k], np.float64)
        live = w > 0
        W = np.zeros((live.sum(), c.num_items))
        W[np.arange(live.sum()), np.asarray(c.i[k])[live]] += 1
        W[np.arange(live.sum()), np.asarray(c.j[k])[live]] -= 1
        cov = sigma**2 * np.diag(1 / w[live]) + tau**2 * W @ W.T
        out.append(-stats.multivariate_normal(np.zeros(live.sum()), cov).logpdf(np.asarray(y[k], np.float64)[live]))
    return np.array(out)


def test_gaussian_evidence_against_scipy():
    with jax.enable_x64(True):
        c = _padded_batch(0)
        c = Comparisons.from_pairs(c.i, c.j, np.asarray(c.p, np.float64), num_items=c.num_items,
                                   weight=np.asarray(c.weight, np.float64), item_mask=c.item_mask)
        y = np.random.default_rng(1).normal(size=c.p.shape)
        for tau, sigma in ((1.0, 1.0), (0.3, 2.0), (5.0, 0.5)):
            got = learning.gaussian_evidence_nll(c, jnp.asarray(y), np.log(tau), sigma)
            np.testing.assert_allclose(got, _evidence_numpy(c, y, tau, sigma), rtol=1e-9)


def test_marginal_nll_against_numpy():
    """(E1) = evidence of y = f(x) minus the log-Jacobian, per live comparison."""
    with jax.enable_x64(True):
        c = _padded_batch(2)
        c = Comparisons.from_pairs(c.i, c.j, np.asarray(c.p, np.float64), num_items=c.num_items,
                                   weight=np.asarray(c.weight, np.float64), item_mask=c.item_mask)
        a, b, tau = 1.7, -0.4, 0.8
        params = learning.EvidenceParams(
            cal.TemperatureBias(jnp.array([np.log(np.expm1(a))]), jnp.array([b])), jnp.array(np.log(tau)))
        p = np.asarray(c.p, np.float64)
        x = np.log(p / (1 - p))
        live = np.asarray(c.weight) > 0
        want = (_evidence_numpy(c, a * x + b, tau, 1.0).sum() - live.sum() * np.log(a)) / live.sum()
        np.testing.assert_allclose(learning.marginal_nll(params, c), want, rtol=1e-9)


def test_evidence_ignores_padding():
    """Padded comparisons (weight 0, any p) and padded items leave the evidence unchanged."""
    c = _padded_batch(3)
    y = jnp.asarray(np.random.default_rng(4).normal(size=c.p.shape), jnp.float32)
    base = learning.gaussian_evidence_nll(c, y, 0.1)
    y2 = jnp.where(c.weight > 0, y, 123.0)
    np.testing.assert_allclose(learning.gaussian_evidence_nll(c, y2, 0.1), base, rtol=1e-5)


def test_pairwise_logistic_loss_against_loops():
    rng = np.random.default_rng(5)
    s, h = rng.normal(size=(4, 7)), rng.integers(1, 4, (4, 7)).astype(float)
    mask = np.ones((4, 7), bool)
    mask[1, 5:] = False
    got = learning.pairwise_logistic_loss(jnp.asarray(s, jnp.float32), jnp.asarray(h, jnp.float32), jnp.asarray(mask),
                                          temperature=0.5)
    for k in range(4):
        z = s[k][mask[k]]
        z = (z - z.mean()) / z.std()
        hk = h[k][mask[k]]
        terms = [np.log1p(np.exp(-(z[a] - z[b]) / 0.5)) for a in range(len(z)) for b in range(len(z)) if hk[a] > hk[b]]
        np.testing.assert_allclose(got[k], np.mean(terms), rtol=1e-5)


def test_soft_spearman_tends_to_spearman():
    rng = np.random.default_rng(6)
    s, h = rng.normal(size=(5, 9)), rng.integers(1, 5, (5, 9)).astype(float)
    mask = np.ones((5, 9), bool)
    got = learning.soft_spearman(jnp.asarray(s, jnp.float32), jnp.asarray(h, jnp.float32), jnp.asarray(mask),
                                 temperature=1e-4)
    want = [stats.spearmanr(s[k], h[k]).statistic for k in range(5)]
    np.testing.assert_allclose(got, want, atol=1e-4)


# ------------------------------------------------------------------ gradients
def test_gradients_match_finite_differences():
    with jax.enable_x64(True):
        c = _padded_batch(7)
        c = Comparisons.from_pairs(c.i, c.j, np.asarray(c.p, np.float64), num_items=c.num_items,
                                   weight=np.asarray(c.weight, np.float64), item_mask=c.item_mask)
        labels = jnp.asarray(np.random.default_rng(8).normal(size=(3, 6)))
        mask = c.item_mask
        spline = cal.identity_spline(1, dtype=jnp.float64)
        spline = cal.MonotoneSpline(spline.raw_slopes + jnp.linspace(-0.5, 0.5, spline.raw_slopes.size).reshape(1, -1),
                                    spline.bias + 0.2, spline.knots)
        cases = [
            (learning.marginal_nll, learning.EvidenceParams(spline, jnp.array(0.3)), (c, None)),
            (functools.partial(learning.ranking_loss, score_fn=learning.calibrated(poe_gaussian)),
             cal.TemperatureBias(jnp.array([0.2]), jnp.array([0.3])), (c, None, labels, mask)),
            (functools.partial(learning.ranking_loss, score_fn=learning.calibrated(poe_bradley_terry), kind="spearman",
                               temperature=0.5),
             cal.TemperatureBias(jnp.array([0.2]), jnp.array([0.3])), (c, None, labels, mask)),
        ]
        for loss, params, args in cases:
            g = jax.grad(loss)(params, *args)
            loss = jax.jit(loss)
            flat, unravel = ravel_pytree(params)
            gflat = ravel_pytree(g)[0]
            h = 1e-6
            for k in range(flat.size):
                e = jnp.zeros_like(flat).at[k].set(h)
                fd = (loss(unravel(flat + e), *args) - loss(unravel(flat - e), *args)) / (2 * h)
                np.testing.assert_allclose(gflat[k], fd, rtol=2e-4, atol=1e-7)


# ------------------------------------------------------------------ learning
def _simulated(temperature, bias, contexts=60, n=12, seed=0):
    """A simulate.py judge whose logit margin is (s_a - s_b + bias + e) / temperature, e ~ N(0, 1), s ~ N(0, 1)."""
    h = np.random.default_rng(seed).normal(size=(contexts, n))
    params = simulate.JudgeParams(slope=1 / temperature, bias=bias / temperature, item_noise=0.0,
                                  pair_noise=1 / temperature, scale=1.0)
    sim = simulate.simulate_judge(jax.random.key(seed), h, params=params)
    return Comparisons.from_matrix(np.asarray(sim.probs)), h


@pytest.mark.parametrize("temperature,bias", [(2.0, -0.6), (0.5, 0.3)])
def test_unsupervised_fit_recovers_temperature_and_bias(temperature, bias):
    """Tolerance: 5% on the slope a = temperature, 0.05 on the bias b = -bias (60 contexts x 132 comparisons)."""
    c, _ = _simulated(temperature, bias)
    p0 = learning.EvidenceParams(cal.identity_temperature_bias(1), jnp.zeros(()))
    res = learning.fit(learning.marginal_nll, p0, c, None, steps=300)
    assert float(res.losses[-1]) < float(res.losses[0])
    np.testing.assert_allclose(res.params.calibration.scale[0], temperature, rtol=0.05)
    np.testing.assert_allclose(res.params.calibration.bias[0], -bias, atol=0.05)
    np.testing.assert_allclose(np.exp(res.params.log_prior_scale), 1.0, rtol=0.15)   # the scores' std
    # lbfgs reaches the same optimum
    lb = learning.fit(learning.marginal_nll, p0, c, None, optimizer=optax.lbfgs(), steps=30)
    np.testing.assert_allclose(lb.params.calibration.scale, res.params.calibration.scale, rtol=1e-2)


def test_joint_fit_of_two_judges():
    """Two judges of the same contexts, each with its own temperature and bias, recovered jointly."""
    c1, _ = _simulated(2.0, -0.6, seed=0)
    c2, _ = _simulated(0.5, 0.3, seed=0)          # same latent scores (same seed), another judge
    both, judge = cal.concatenate_judges([c1, c2])
    p0 = learning.EvidenceParams(cal.identity_temperature_bias(2), jnp.zeros(()))
    res = learning.fit(learning.marginal_nll, p0, both, judge, steps=300)
    np.testing.assert_allclose(res.params.calibration.scale, [2.0, 0.5], rtol=0.05)
    np.testing.assert_allclose(res.params.calibration.bias, [0.6, -0.3], atol=0.05)


def test_supervised_fit_improves_heldout_and_evaluates_correctly():
    """A judge with a strong positional bias: learning its bias on train contexts lifts held-out Spearman."""
    c, h = _simulated(1.0, -2.5, contexts=40, n=8, seed=3)
    labels, mask = jnp.asarray(h, jnp.float32), c.item_mask
    train, test = learning.split_contexts(40, 0.5, seed=0)
    assert len(np.intersect1d(train, test)) == 0 and len(train) + len(test) == 40
    take = lambda x, idx: jax.tree.map(lambda a: a[idx], x)
    # half of the comparisons per context: a bias matters only on an unbalanced set
    keep = (np.random.default_rng(0).uniform(size=c.p.shape) < 0.3).astype(np.float32)
    c = Comparisons(c.i, c.j, c.p, c.weight * keep, c.item_mask, c.num_items)
    score_fn = learning.calibrated(poe_bradley_terry)
    loss = functools.partial(learning.ranking_loss, score_fn=score_fn)
    p0 = cal.identity_temperature_bias(1)
    res = learning.fit(loss, p0, take(c, train), None, labels[train], mask[train], steps=60)
    before = learning.heldout_spearman(score_fn, p0, take(c, test), None, labels[test], mask[test])
    after = learning.heldout_spearman(score_fn, res.params, take(c, test), None, labels[test], mask[test])
    # the evaluation is the per-context Spearman of the calibrated PoE-BT scores (SciPy, independently)
    scores = poe_bradley_terry(cal.calibrate(res.params, take(c, test)))
    want = [stats.spearmanr(np.asarray(scores[k]), h[test][k]).statistic for k in range(len(test))]
    np.testing.assert_allclose(after, want, atol=1e-5)
    assert float(np.mean(after)) > float(np.mean(before)) + 0.01
    assert float(res.params.bias[0]) > 0.5            # it learnt to undo the bias towards position B


# ------------------------------------------------------------------ JAX hygiene
def test_jit_vmap_and_no_recompile():
    c = _padded_batch(9, contexts=4)
    params = cal.TemperatureBias(jnp.array([0.3]), jnp.array([0.2]))
    batched = cal.calibrate(params, c)
    one = jax.vmap(lambda cc: cal.calibrate(params, cc))(c)
    np.testing.assert_allclose(one.p, batched.p, rtol=1e-6)
    jitted = jax.jit(cal.calibrate)(params, c)
    np.testing.assert_allclose(jitted.p, batched.p, rtol=1e-6)
    per = learning.gaussian_evidence_nll(c, c.p, 0.0)
    vm = jax.vmap(lambda cc: learning.gaussian_evidence_nll(cc, cc.p, 0.0))(c)
    np.testing.assert_allclose(vm, per, rtol=1e-5)
    opt = optax.adam(0.05)
    p0 = learning.EvidenceParams(cal.identity_temperature_bias(1), jnp.zeros(()))
    learning.fit(learning.marginal_nll, p0, c, None, optimizer=opt, steps=5)
    c2 = c.with_p(jnp.clip(c.p * 0.9 + 0.05, 0, 1))
    with CompileLog() as log:
        learning.fit(learning.marginal_nll, p0, c2, None, optimizer=opt, steps=5)
    assert not [r for r in log.records if "_fit" in r], log.records
    init, step = learning.make_step(learning.marginal_nll, opt)
    state = init(p0)
    q, state, v0 = step(p0, state, c, None)
    with CompileLog() as log:
        for _ in range(3):
            q, state, v = step(q, state, c, None)
    assert not log.records


def test_logdet_and_quadratic_gradient():
    """The analytic gradient of (log det M, b^T M^-1 b) against finite differences (float64)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(11)
        a = rng.normal(size=(2, 5, 5))
        m = jnp.asarray(a @ np.swapaxes(a, -1, -2) + 5 * np.eye(5))
        b = jnp.asarray(rng.normal(size=(2, 5)))
        ld, q = learning.logdet_and_quadratic(m, b)
        np.testing.assert_allclose(ld, np.linalg.slogdet(np.asarray(m))[1], rtol=1e-12)
        np.testing.assert_allclose(q, np.einsum("ki,ki->k", b, np.linalg.solve(m, b[..., None])[..., 0]), rtol=1e-12)
        f = lambda m, b: jnp.sum(jnp.array([0.7, -1.3]) * learning.logdet_and_quadratic(m, b)[0]) \
            + jnp.sum(jnp.array([0.4, 2.0]) * learning.logdet_and_quadratic(m, b)[1])
        gm, gb = jax.grad(f, argnums=(0, 1))(m, b)
        h = 1e-6
        for k, r, s in [(0, 1, 2), (1, 3, 3), (0, 0, 4)]:       # symmetric perturbations: M stays symmetric
            e = jnp.zeros_like(m).at[k, r, s].set(h).at[k, s, r].set(h)
            fd = (f(m + e, b) - f(m - e, b)) / (2 * h)
            np.testing.assert_allclose(gm[k, r, s] + (gm[k, s, r] if r != s else 0), fd, rtol=1e-6)
        for idx in [(0, 1), (1, 4)]:
            e = jnp.zeros_like(b).at[idx].set(h)
            np.testing.assert_allclose(gb[idx], (f(m, b + e) - f(m, b - e)) / (2 * h), rtol=1e-6)


# ------------------------------------------------------------------ a general expert's theta (learning.expert_scores)
def _as_float64(c):
    return Comparisons.from_pairs(c.i, c.j, np.asarray(c.p, np.float64), num_items=c.num_items,
                                  weight=np.asarray(c.weight, np.float64), item_mask=c.item_mask)


def _fd_check(loss, params, args, h=1e-5, rtol=1e-4):
    g = ravel_pytree(jax.grad(loss)(params, *args))[0]
    flat, unravel = ravel_pytree(params)
    loss = jax.jit(loss)
    for k in range(flat.size):
        e = jnp.zeros_like(flat).at[k].set(h)
        fd = (loss(unravel(flat + e), *args) - loss(unravel(flat - e), *args)) / (2 * h)
        np.testing.assert_allclose(g[k], fd, rtol=rtol, atol=1e-8)
    return g


def test_expert_theta_gradient_matches_finite_differences():
    """d(ranking loss)/d theta through the PoE solve (implicit differentiation) against central differences, float64.

    Soft BT's bias gamma (Newton iterations) alone, and the heteroscedastic expert's (beta, kappa)
    jointly with a temperature-and-bias calibration applied first.
    """
    with jax.enable_x64(True):
        c = _as_float64(_padded_batch(12))
        labels = jnp.asarray(np.random.default_rng(13).normal(size=(3, 6)))
        bt = functools.partial(learning.ranking_loss, score_fn=learning.expert_scores(experts.soft_bradley_terry()))
        g = _fd_check(bt, {"gamma": jnp.array(0.4)}, (c, None, labels, c.item_mask))
        assert abs(float(g[0])) > 1e-6                     # a real dependence, not a zero gradient
        het = functools.partial(learning.ranking_loss, kind="spearman", temperature=0.5,
                                score_fn=learning.expert_scores(experts.heteroscedastic_gaussian(alpha=3.0)))
        params = learning.ExpertParams(cal.TemperatureBias(jnp.array([0.2]), jnp.array([0.3])),
                                       {"beta": jnp.array(0.45), "kappa": jnp.array(0.8)})
        g = _fd_check(het, params, (c, None, labels, c.item_mask))
        assert np.all(np.abs(np.asarray(g)) > 1e-8)


def test_expert_scores_equal_the_solver_with_that_theta():
    """The score_fn is fit_poe with theta (and calibrate first); a non-dict theta or solver is a ValueError."""
    from jaxrank import ProductOfExpertsSolver, fit_poe
    c = _padded_batch(14)
    solver = ProductOfExpertsSolver(experts.thurstone(scale=1.3))
    score_fn = learning.expert_scores(solver)
    np.testing.assert_allclose(score_fn({"gamma": jnp.array(0.3)}, c),
                               fit_poe(c, solver, {"gamma": 0.3}).scores, rtol=1e-6)
    tb = cal.TemperatureBias(jnp.array([0.7]), jnp.array([-0.2]))
    np.testing.assert_allclose(score_fn(learning.ExpertParams(tb, {"gamma": jnp.array(0.3)}), c),
                               fit_poe(cal.calibrate(tb, c), solver, {"gamma": 0.3}).scores, rtol=1e-6)
    with pytest.raises(ValueError, match="solver"):
        learning.expert_scores("thurstone")
    with pytest.raises(ValueError, match="params"):
        score_fn([0.3], c)


def _biased_judge_on_subsets(bias, contexts, n=8, keep=0.3, seed=0):
    """A logistic judge ``p_ab = sigmoid(z_a - z_b + bias + e)``, ``e ~ N(0, 1)``, on a random ~30% of the ordered pairs."""
    h = np.random.default_rng(seed).normal(size=(contexts, n))
    params = simulate.JudgeParams(slope=1.0, bias=bias, item_noise=0.0, pair_noise=1.0, scale=1.0)
    c = Comparisons.from_matrix(np.asarray(simulate.simulate_judge(jax.random.key(seed), h, params=params).probs))
    kept = (np.random.default_rng(seed + 1).uniform(size=c.p.shape) < keep).astype(np.float32)
    return Comparisons(c.i, c.j, c.p, c.weight * kept, c.item_mask, c.num_items), jnp.asarray(h, jnp.float32)


def test_learning_recovers_the_positional_bias():
    """Soft BT's gamma, learnt by the pairwise ranking loss over 120 contexts, recovers the judge's bias: gamma = -beta.

    Identifiable: on a random subset of comparisons each candidate sits in position A a
    different number of times, so a wrong gamma shifts every score by (gamma + beta) times
    its position imbalance, a perturbation unrelated to quality that only spoils the order;
    swapping every comparison's positions maps gamma + beta to -(gamma + beta), so the
    expected loss is even in gamma + beta, smallest at gamma = -beta. (A temperature only
    rescales the scores, which the loss standardises away: not identifiable.)
    Tolerance 0.3 (20% of beta = -1.5; the spread over seeds is about 0.15).
    """
    c, labels = _biased_judge_on_subsets(-1.5, contexts=120)
    loss = functools.partial(learning.ranking_loss, score_fn=learning.expert_scores(experts.soft_bradley_terry()))
    res = learning.fit(loss, {"gamma": jnp.zeros(())}, c, None, labels, c.item_mask, optimizer=optax.lbfgs(),
                       steps=15)
    np.testing.assert_allclose(float(res.params["gamma"]), 1.5, atol=0.3)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 1000), gamma0=st.floats(-2, 2), log_kappa0=st.floats(-2, 1))
def test_fitting_theta_never_worsens_the_training_loss(seed, gamma0, log_kappa0):
    """With optax.lbfgs (a line search: every step a decrease) the loss trajectory never rises and ends below its start.

    Two cases on the same data: soft BT's gamma alone; a calibration jointly with the
    heteroscedastic expert's kappa = exp(log_kappa) (the positivity wrapper of the docstring).
    The final loss is evaluated afresh, not read from the trajectory.
    """
    c, labels = _biased_judge_on_subsets(-1.0, contexts=16, seed=seed)
    args = (c, None, labels, c.item_mask)
    cases = [
        (_BT_LOSS, {"gamma": jnp.asarray(gamma0, jnp.float32)}),
        (_HET_LOSS, learning.ExpertParams(cal.identity_temperature_bias(1), {"log_kappa": jnp.asarray(log_kappa0, jnp.float32)})),
    ]
    for loss, p0 in cases:
        res = learning.fit(loss, p0, *args, optimizer=_LBFGS, steps=8)
        traj = np.asarray(res.losses)
        assert np.all(np.isfinite(traj))
        assert np.all(np.diff(traj) <= 1e-5 * (1 + np.abs(traj[:-1])))
        start, end = float(loss(p0, *args)), float(loss(res.params, *args))
        np.testing.assert_allclose(traj[0], start, rtol=1e-5)
        assert end <= start + 1e-6


_HET_SCORES = learning.expert_scores(experts.heteroscedastic_gaussian(alpha=4.0))


def _positive_kappa(q, c, judge):
    return _HET_SCORES(learning.ExpertParams(q.calibration, {"kappa": jnp.exp(q.theta["log_kappa"])}), c, judge)


# module level: the same loss and optimiser objects, so hypothesis's examples reuse one compiled fit
_LBFGS = optax.lbfgs()
_BT_LOSS = functools.partial(learning.ranking_loss, score_fn=learning.expert_scores(experts.soft_bradley_terry()))
_HET_LOSS = functools.partial(learning.ranking_loss, score_fn=_positive_kappa)
