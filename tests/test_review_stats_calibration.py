"""Review fixes in jaxrank.calibration: eps outside [0, 0.5) and knots that are not strictly increasing are
errors naming them (eps=0.7 mapped every p to 0.3; unsorted knots counted a margin in two segments)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from jaxrank import calibration as K


def _spline_np(x, slopes, bias, knots):
    """f(x) = bias + integral from 0 to x of the piecewise-constant slope (NumPy, by the segment lengths)."""
    edges = np.concatenate([[-np.inf], knots, [np.inf]])
    lo, hi = edges[:-1], edges[1:]
    seg = np.clip(x, lo, hi) - np.clip(0.0, lo, hi)
    return bias + np.sum(slopes * seg)


def test_calibrate_rejects_eps_outside_its_range():
    c = jr.Comparisons.from_pairs([0, 1], [1, 0], [0.7, 0.0], num_items=2)
    ident = K.identity_temperature_bias()
    for bad in (0.7, 0.5, -0.1, True, "small", float("nan")):
        with pytest.raises(ValueError, match="eps must be"):
            K.calibrate(ident, c, eps=bad)
        with pytest.raises(ValueError, match="eps must be"):
            K.logit(jnp.asarray([0.3]), bad)
    p = np.asarray(K.calibrate(ident, c, eps=0.1).p)
    np.testing.assert_allclose(p, np.clip([0.7, 0.0], 0.1, 0.9), rtol=1e-6)     # identity: the clipped p
    np.testing.assert_allclose(np.asarray(K.calibrate(ident, c, eps=0.0).p), [0.7, 0.0], atol=1e-6)
    traced = jax.jit(lambda e: K.calibrate(ident, c, eps=e).p)(0.1)              # traced eps: no check, same value
    np.testing.assert_allclose(traced, p, rtol=1e-6)


def test_monotone_spline_rejects_knots_that_are_not_strictly_increasing():
    for bad in ((1.0, -1.0), (0.0, 0.0), (), (0.0, float("nan")), ((0.0, 1.0),), "ab"):
        with pytest.raises(ValueError, match="knots must be"):
            K.MonotoneSpline(jnp.zeros((1, 3)), jnp.zeros((1,)), bad)
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(2, 4)).astype(np.float32)
    sp = K.MonotoneSpline(jnp.asarray(raw), jnp.asarray([0.3, -0.2], np.float32), [-1, 0.5, 2])   # a list: fine
    assert sp.knots == (-1.0, 0.5, 2.0)
    x = np.array([-3, -1, -0.2, 0, 0.5, 1, 2, 5.0], np.float32)
    judge = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    slopes = np.log1p(np.exp(raw.astype(np.float64)))
    want = [_spline_np(float(a), slopes[b], [0.3, -0.2][b], np.array(sp.knots)) for a, b in zip(x, judge)]
    np.testing.assert_allclose(K.calibrate_logits(sp, x, judge), want, rtol=1e-5, atol=1e-5)
    moved = jax.tree.map(lambda a: a * 1, sp)                                     # pytree round trip keeps knots
    assert moved.knots == sp.knots
