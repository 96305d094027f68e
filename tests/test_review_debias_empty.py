"""debias_threshold / threshold_debias on a context with no comparisons (review 2, item 5).

The docstring's promise: tau = 0.5 for an empty context (no data, no positional bias measured), and
threshold_debias then leaves p as it is. A context with comparisons beside it keeps its weighted median
(an independent NumPy computation: the smallest p whose cumulative weight reaches half the total, or the
midpoint of the two central values when the weight splits exactly in half).
"""

import jax
import numpy as np

import jaxrank as jr


def _weighted_median(p, w):
    o = np.argsort(p)
    p, w = np.asarray(p, float)[o], np.asarray(w, float)[o]
    cw = np.cumsum(w)
    k = int(np.argmax(cw >= cw[-1] / 2))
    if np.isclose(cw[k], cw[-1] / 2) and k + 1 < len(p):
        return 0.5 * (p[k] + p[k + 1])
    return p[k]


def test_no_comparison_slots():
    e = jr.Comparisons.from_pairs([], [], [], num_items=3)
    assert e.p.shape == (0,)
    tau = jr.debias_threshold(e)
    assert tau.shape == () and float(tau) == 0.5
    assert jr.threshold_debias(e).p.shape == (0,)
    batch = jr.stack_contexts([e, e])
    for f in (jr.debias_threshold, jax.jit(jr.debias_threshold), jax.vmap(jr.debias_threshold)):
        out = f(batch)
        assert out.shape == (2,)
        np.testing.assert_array_equal(np.asarray(out), [0.5, 0.5])


def test_empty_context_beside_a_full_one():
    p = np.array([0.9, 0.7, 0.8, 0.3, 0.6], np.float32)
    full = jr.Comparisons.from_pairs([0, 1, 2, 3, 0], [1, 2, 3, 0, 2], p, num_items=4)
    empty = jr.Comparisons.from_pairs([], [], [], num_items=4)
    b = jr.stack_contexts([empty, full])
    tau = np.asarray(jr.debias_threshold(b))
    assert tau[0] == 0.5
    np.testing.assert_allclose(tau[1], _weighted_median(p, np.ones(5)), rtol=1e-6)
    # threshold_debias: p^ = alpha p / (alpha p + 1 - p), alpha = (1 - tau) / tau (eq. 9), p^ > 0.5 iff p > tau
    alpha = (1 - tau[1]) / tau[1]
    want = alpha * p / (alpha * p + 1 - p)
    got = jr.threshold_debias(b)
    np.testing.assert_allclose(np.asarray(got.p[1]), want, rtol=1e-5)
