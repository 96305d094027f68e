"""Hard BT's compacted CG operator with the projector as one component's masked mean (issue 33, part e).

``_soft_bt_sparse._one_component`` and ``_masked_mean`` are checked against NumPy's per-component means on
several component layouts, and whole fits (one component plus items in no comparison; two components of equal
size, where the general projector is kept) against the float64 gradient of the smoothed hard-decision
likelihood (PoE eq. 1-2) and the rank scale's slope against a float64 sum.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from jaxrank import _graph
from jaxrank.scoring import _soft_bt_sparse as sparse


def _sizes_from_layout(layout):
    """Component labels of a layout (a list of component sizes) and every item's component size."""
    labels = np.concatenate([np.full(k, sum(layout[:m])) for m, k in enumerate(layout)])
    sizes = np.asarray(layout)[np.repeat(np.arange(len(layout)), layout)]
    return labels, sizes


@pytest.mark.parametrize("layout", [[600], [600, 1, 1, 1], [1, 1, 500, 1], [300, 300], [400, 200],
                                    [400, 2, 1], [1, 1, 1]])
def test_masked_mean_is_the_component_mean_where_one_component_holds_every_compared_item(layout):
    labels, sizes = _sizes_from_layout(layout)
    v = np.random.default_rng(len(layout)).normal(size=labels.size)
    # NumPy: each item's component mean
    ref = np.array([v[labels == lab].mean() for lab in labels])
    simple, big = sparse._one_component(jnp.asarray(sizes, jnp.float32))
    big_comps = [k for k in layout if k > 1]
    expected_simple = len(big_comps) == 1 and layout.count(big_comps[0]) == 1
    assert bool(simple) == expected_simple
    if expected_simple:
        got = np.asarray(sparse._masked_mean(jnp.asarray(v, jnp.float32), big), np.float64)
        np.testing.assert_allclose(got, ref, atol=1e-6)


def _separable(blocks, isolated, seed=0):
    """Separable decisions (one latent order per block) on ``10 x`` each block's size distinct random pairs inside
    the block, and ``isolated`` items in no comparison at the end."""
    rng = np.random.default_rng(seed)
    ii, jj, start = [], [], 0
    for k in blocks:
        a = rng.integers(0, k, 12 * k)
        b = (a + rng.integers(1, k, 12 * k)) % k
        pairs = np.unique(np.stack([np.minimum(a, b), np.maximum(a, b)], 1), axis=0)[: 10 * k]
        ii.append(pairs[:, 0] + start)
        jj.append(pairs[:, 1] + start)
        start += k
    i, j = np.concatenate(ii), np.concatenate(jj)
    n = start + isolated
    s = rng.normal(size=n)
    y = (s[i] > s[j]).astype(np.float64)
    return i, j, y, n, s


def _grad64(s, i, j, y, lam, n):
    a, b = y + lam, 1 - y + lam
    q = 1 / (1 + np.exp(-(s[i] - s[j])))
    r = (a + b) * q - a
    return np.bincount(i, r, n) - np.bincount(j, r, n)


@pytest.mark.parametrize("blocks,isolated", [([600], 40), ([320, 320], 0)])
def test_hard_bt_reaches_a_float64_stationary_point(blocks, isolated):
    """One large component plus items in no comparison (the masked projector), and two equal components (the
    general one): hard BT's scores against the float64 gradient of the smoothed likelihood, centred per component,
    items in no comparison at 0."""
    i, j, y, n, _ = _separable(blocks, isolated)
    assert n >= _graph.CG_MIN_ITEMS   # the sparse CG path with the rank-scaled start and the compacted operator
    sol = jr.fit_bradley_terry(jr.Comparisons.from_pairs(i, j, y.astype(np.float32), num_items=n))
    assert bool(sol.converged)
    s = np.asarray(sol.scores, np.float64)
    lam = 1.0 / (n - isolated - 1)
    assert np.max(np.abs(_grad64(s, i, j, y, lam, n))) < 1e-3
    assert np.all(s[n - isolated:] == 0)
    start = 0
    for k in blocks:
        assert abs(s[start:start + k].mean()) < 1e-3 * max(1.0, np.ptp(s[start:start + k]))
        start += k
    assert np.ptp(s) > 20   # separable: the prior alone holds the scores, spread over many log-units


def test_rank_scaled_slope_is_one_sum_over_the_edges_by_component():
    """``_rank_scaled`` bisects the slope of ``f(alpha u)`` per component: at its result the float64 slope
    ``sum_k r_k (u_i - u_j)`` of each component changes sign within the bracket's last step."""
    from jaxrank.scoring import _soft_bt_newton as sbn
    i, j, y, n, s_true = _separable([300, 300], 0, seed=3)
    lam = 1.0 / (n - 1)
    c = jr.Comparisons.from_pairs(i, j, ((y + lam) / (1 + 2 * lam)).astype(np.float32),
                                  weight=np.full(len(i), 1 + 2 * lam, np.float32), num_items=n)
    pr = sbn._problem(c, "off", 0.0)
    labels = _graph.components(c, e=pr.e, w=pr.w)
    # an order close to the decisions' (as the Newman start's): the minimiser along it is inside the bracket
    s0 = (s_true + 0.1 * np.random.default_rng(4).normal(size=n)).astype(np.float32)
    x = np.asarray(sparse._rank_scaled(pr, jnp.asarray(s0), labels, 0.0), np.float64)
    lab = np.asarray(labels)
    for comp in np.unique(lab):
        m = lab == comp
        u = x[m] - x[m].mean()
        # the scaled ranks: equally spaced in s0's order within the component
        np.testing.assert_allclose(np.diff(np.sort(u)), np.ptp(u) / (m.sum() - 1), rtol=1e-3)
        inside = m[i]

        def slope(alpha):
            d = alpha * (x[i] - x[j])[inside]
            q = 1 / (1 + np.exp(-d))
            a, b = (y + lam)[inside], (1 - y + lam)[inside]
            return np.sum(((a + b) * q - a) * (x[i] - x[j])[inside])

        # 12 bisections of a bracket log(1e6) wide: alpha within a factor exp(log(1e6) / 2^12) of the root
        step = np.exp(np.log(1e6) / 2 ** 12)
        assert slope(1 / step) <= 0 <= slope(step)
