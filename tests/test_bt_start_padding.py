"""Hard BT with comparisons of weight 0 (a bucket's padding, ``0 vs 0``) on large sparse pools (issue 33, part f).

``bradley_terry._smoothed`` turns comparisons of weight 0 into self-pairs spread over the items
(``bradley_terry.PAD_SPREAD_NOTE``), which must not change the fit: checked against SciPy's float64 optimum of the
smoothed hard-decision likelihood (PoE eq. 1-2, prior ``1/(N-1)``; ``tests/test_bt_warm_start._objective``) at the
top level, under ``jit`` and under ``vmap``, on separable and noisy pools, and with no recompilation on a
repeated shape.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

import jaxrank as jr
from jaxrank import _graph
from test_bt_warm_start import _objective, _pool

N = 600      # >= _graph.CG_MIN_ITEMS, R = 10 N: the sparse CG path with Newman's start
EXTRA = 900  # comparisons of weight 0 on item 0 (as _batching.pad writes them), before the bucket's own padding


def _padded(i, j, p):
    """The pool with EXTRA comparisons ``0 vs 0`` of weight 0 appended (their p at 0.9: a decision, but no weight)."""
    z = np.zeros(EXTRA, np.int32)
    w = np.concatenate([np.ones(len(i), np.float32), np.zeros(EXTRA, np.float32)])
    return (np.concatenate([i, z]), np.concatenate([j, z]), np.concatenate([p, np.full(EXTRA, 0.9, np.float32)]), w)


def _reference(i, j, p, n):
    f, g, h = _objective(i, j, p, n)
    ref = optimize.minimize(f, np.zeros(n), jac=g, hess=h, method="trust-exact", options={"gtol": 1e-9})
    return ref.x - ref.x.mean(), g


def _close(s, s_ref, g, noisy):
    s = np.asarray(s, np.float64)
    assert np.max(np.abs(s - s_ref)) < (0.05 if not noisy else 1e-3) * max(1.0, np.ptp(s_ref) / 100)
    assert np.max(np.abs(g(s))) < 1e-3


@pytest.mark.parametrize("noisy", [False, True])
def test_weight_zero_comparisons_leave_the_fit_at_the_scipy_optimum(noisy):
    i, j, p = _pool(N, noisy, seed=5)
    ii, jj, pp, w = _padded(i, j, p)
    assert _graph.sizes_use_cg(N, len(ii)) and not _graph.use_dense(N, len(ii))
    s_ref, g = _reference(i, j, p, N)
    sol = jr.fit_bradley_terry(jr.Comparisons.from_pairs(ii, jj, pp, weight=w, num_items=N))
    assert bool(sol.converged)
    _close(sol.scores, s_ref, g, noisy)


def test_under_jit_and_vmap_without_recompiling():
    """Two pools (separable, noisy) on the same shapes: each context of a vmapped, jitted fit against its own SciPy
    optimum; a second call with other values of the same shapes traces nothing again."""
    pools = [_padded(*_pool(N, noisy, seed=7)) for noisy in (False, True)]
    traces = []

    @jax.jit
    def fit(i, j, p, w):
        traces.append(1)
        one = lambda i, j, p, w: jr.bradley_terry(jr.Comparisons(i=i, j=j, p=p, weight=w,
                                                                 item_mask=jnp.ones(N, bool), num_items=N))
        return jax.vmap(one)(i, j, p, w)

    stack = [jnp.asarray(np.stack([q[k] for q in pools])) for k in range(4)]
    s = np.asarray(fit(*stack))
    for b, noisy in enumerate((False, True)):
        i, j, p, _ = (q[: 10 * N] for q in pools[b])
        s_ref, g = _reference(i, j, p, N)
        _close(s[b], s_ref, g, noisy)
    flipped = [x[::-1] for x in stack]   # the same shapes, the contexts swapped
    s2 = np.asarray(fit(*flipped))
    assert len(traces) == 1
    np.testing.assert_allclose(s2[::-1], s, atol=1e-4)
