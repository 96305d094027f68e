"""Review fixes in jaxrank.learning (and the bad input of learning, calibration and bootstrap).

Independent references: a NumPy Adam on a quadratic; the float64 gradient of the one informative context
(a context whose judge is indifferent on every pair has constant scores and must add nothing to the gradient);
argument names in the errors of bad input.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrank as jr
from jaxrank import calibration as cal
from jaxrank import _ranking_losses, learning


# ------------------------------------------------------------------ fit's default optimiser is one object
def _numpy_adam(x, a, steps, lr=0.05, b1=0.9, b2=0.999, eps=1e-8):
    m, v, losses = np.zeros_like(x), np.zeros_like(x), []
    for t in range(1, steps + 1):
        losses.append(np.sum((x - a) ** 2))
        g = 2 * (x - a)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        x = x - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return x, np.array(losses)


def test_fit_default_optimiser_is_adam_and_compiles_once():
    traces = []

    def loss(q, a):
        traces.append(1)                           # a Python side effect: runs only while tracing
        return jnp.sum((q - a) ** 2)

    a = np.array([1.0, -2.0, 0.5], np.float32)
    x0 = np.zeros(3, np.float32)
    first = learning.fit(loss, jnp.asarray(x0), jnp.asarray(a), steps=25)
    n_first = len(traces)
    assert n_first > 0
    second = learning.fit(loss, jnp.asarray(x0 + 1), jnp.asarray(a), steps=25)
    assert len(traces) == n_first                  # a fresh optax.adam(0.05) per call retraced here
    for got, start in ((first, x0), (second, x0 + 1)):
        x, losses = _numpy_adam(start.astype(np.float64), a.astype(np.float64), 25)
        np.testing.assert_allclose(np.asarray(got.params), x, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(got.losses), losses, rtol=1e-4, atol=1e-5)
    init, step = learning.make_step(loss)
    init2, step2 = learning.make_step(loss)
    assert init is init2


def test_fit_same_user_optimiser_object_compiles_once():
    traces = []

    def loss(q):
        traces.append(1)
        return jnp.sum(q ** 2)

    sgd = optax.sgd(0.1)
    learning.fit(loss, jnp.ones(2), optimizer=sgd, steps=3)
    n = len(traces)
    out = learning.fit(loss, jnp.ones(2), optimizer=sgd, steps=3)
    assert len(traces) == n
    np.testing.assert_allclose(np.asarray(out.params), 0.8 ** 3 * np.ones(2), rtol=1e-6)


# ------------------------------------------------------------------ constant-score contexts add no gradient
I = np.array([0, 1, 2, 3, 0, 1, 1, 2, 3, 0, 2, 3])
J = np.array([1, 2, 3, 0, 2, 3, 0, 1, 2, 3, 0, 1])


def _grad(p, labels, dtype):
    c = jr.Comparisons.from_pairs(np.broadcast_to(I, p.shape), np.broadcast_to(J, p.shape), p.astype(dtype),
                                  num_items=4)
    tb = cal.identity_temperature_bias(1, dtype)
    mask = np.ones(labels.shape, bool)
    return jax.grad(learning.ranking_loss)(tb, c, None, labels.astype(dtype), mask)


def test_indifferent_context_adds_nothing_to_the_gradient():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.1, 0.9, (2, 12))
    p[1] = 0.5                                         # context 1: the judge is indifferent, scores constant
    labels = rng.normal(size=(2, 4))
    with jax.enable_x64(True):
        alone = _grad(p[:1], labels[:1], np.float64)    # the informative context alone, in float64
    got = _grad(p, labels, np.float32)
    # mean over two contexts, the constant one contributing 0: half the informative one's gradient
    np.testing.assert_allclose(np.asarray(got.bias), 0.5 * np.asarray(alone.bias), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(got.raw_scale), 0.5 * np.asarray(alone.raw_scale), rtol=1e-4)


def test_standardise_constant_and_ordinary_contexts():
    s = jnp.asarray([[0.3, 0.3, 0.3, 0.3], [1.0, 2.0, 4.0, 0.0], [0.0, 0.0, 0.0, 0.0]], jnp.float32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], bool)
    z = np.asarray(_ranking_losses._standardise(s, mask))
    np.testing.assert_array_equal(z[0], 0)
    np.testing.assert_array_equal(z[2], 0)
    x = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(z[1, :3], (x - x.mean()) / x.std(), rtol=1e-6)
    assert z[1, 3] == 0
    jac = jax.jacobian(lambda q: _ranking_losses._standardise(q, mask))(s)
    assert np.all(np.isfinite(np.asarray(jac))) and np.all(np.asarray(jac)[0] == 0)


# ------------------------------------------------------------------ bad input names the argument (review)
def _bad_setup():
    rng = np.random.default_rng(0)
    C, N, R = 3, 4, 8
    i = rng.integers(0, N, (C, R))
    j = (i + rng.integers(1, N, (C, R))) % N
    c = jr.Comparisons.from_pairs(i, j, rng.uniform(0.05, 0.95, (C, R)), num_items=N)
    return c, rng.normal(size=(C, N)), np.ones((C, N), bool)


def test_ranking_loss_bad_labels_mask_temperature():
    c, labels, mask = _bad_setup()
    tb = cal.identity_temperature_bias(1)
    ok = float(learning.ranking_loss(tb, c, None, labels, mask))
    assert np.isfinite(ok)
    for kw, match in [(dict(labels=labels[:, :3]), "labels"), (dict(mask=mask[:2]), "mask"),
                      (dict(mask=mask.astype(float)), "mask"), (dict(temperature=0.0), "temperature"),
                      (dict(temperature=-1.0), "temperature"), (dict(temperature=float("nan")), "temperature"),
                      (dict(kind="spearman", temperature=0.0), "temperature")]:
        args = {"labels": labels, "mask": mask, **kw}
        extra = {k: v for k, v in args.items() if k not in ("labels", "mask")}
        with pytest.raises(ValueError, match=match):
            learning.ranking_loss(tb, c, None, args["labels"], args["mask"], **extra)
    # under jit the shape and dtype checks hold as well
    with pytest.raises(ValueError, match="mask"):
        jax.jit(learning.ranking_loss)(tb, c, None, labels, mask.astype(np.float32))
    with pytest.raises(ValueError, match="labels"):
        learning.pairwise_logistic_loss(jnp.zeros((3, 4)), labels[:, :3], mask)
    with pytest.raises(ValueError, match="temperature"):
        learning.soft_spearman(jnp.zeros((3, 4)), labels, mask, temperature=0.0)


def test_marginal_nll_bad_params_and_noise_scale():
    c, _, _ = _bad_setup()
    tb = cal.identity_temperature_bias(1)
    params = learning.EvidenceParams(tb, jnp.zeros(()))
    assert np.isfinite(float(learning.marginal_nll(params, c)))
    with pytest.raises(ValueError, match="params"):
        learning.marginal_nll(tb, c)
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="noise_scale"):
            learning.marginal_nll(params, c, noise_scale=bad)
    with pytest.raises(ValueError, match="eps"):
        learning.marginal_nll(params, c, eps=0.0)
    with pytest.raises(ValueError, match="c must"):
        learning.marginal_nll(params, np.zeros(3))


def test_calibration_fields_one_entry_per_judge():
    c, _, _ = _bad_setup()
    judge = np.full(c.p.shape, 2)
    with pytest.raises(ValueError, match="raw_scale"):
        cal.calibrate(cal.TemperatureBias(jnp.zeros(1), jnp.zeros(3)), c, judge)
    with pytest.raises(ValueError, match="raw_scale"):
        cal.log_derivative(cal.TemperatureBias(jnp.zeros(3), jnp.zeros(2)), np.zeros(3))
    spline = cal.identity_spline(3)
    with pytest.raises(ValueError, match="raw_slopes"):
        cal.calibrate(dataclasses.replace(spline, raw_slopes=spline.raw_slopes[:1]), c, judge)
    with pytest.raises(ValueError, match="raw_slopes"):
        cal.calibrate(dataclasses.replace(spline, raw_slopes=spline.raw_slopes[:, :3]), c, judge)
    with pytest.raises(ValueError, match="judge"):
        cal.calibrate(cal.identity_temperature_bias(3), c, np.zeros((3, 9), int))
    # matching fields: judge 2's own slope and bias (NumPy: sigmoid(a_2 logit p + b_2))
    tb = cal.TemperatureBias(jnp.asarray([0.1, 0.2, 0.7]), jnp.asarray([0.0, 0.1, -0.4]))
    p = np.asarray(c.p, np.float64)
    a2 = np.log1p(np.exp(0.7))
    want = 1 / (1 + np.exp(-(a2 * np.log(p / (1 - p)) - 0.4)))
    np.testing.assert_allclose(np.asarray(cal.calibrate(tb, c, judge).p), want, rtol=1e-5)
