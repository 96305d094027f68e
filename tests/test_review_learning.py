"""Review fixes in jaxrank.learning (and the bad input of learning, calibration and bootstrap).

Independent references: a NumPy Adam on a quadratic; the float64 gradient of the one informative context
(a context whose judge is indifferent on every pair has constant scores and must add nothing to the gradient);
argument names in the errors of bad input.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrank as jr
from jaxrank import calibration as cal
from jaxrank import learning


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
    z = np.asarray(learning._standardise(s, mask))
    np.testing.assert_array_equal(z[0], 0)
    np.testing.assert_array_equal(z[2], 0)
    x = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(z[1, :3], (x - x.mean()) / x.std(), rtol=1e-6)
    assert z[1, 3] == 0
    jac = jax.jacobian(lambda q: learning._standardise(q, mask))(s)
    assert np.all(np.isfinite(np.asarray(jac))) and np.all(np.asarray(jac)[0] == 0)
