"""jit, vmap, grad and batching of every scorer (organised by transformation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from compile_log import CompileLog
import reference as ref

SOFT = ["average_probability", "poe_gaussian", "poe_bradley_terry"]
ALL = ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_gaussian_hard",
       "poe_bradley_terry", "max_likelihood_ranking"]


def _contexts(sizes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n, r in sizes:
        i, j, p, w, _ = ref.random_context(rng, n, r, weights=True, bias=0.3)
        out.append(jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w))
    return out


# ------------------------------------------------------------------ batching
@pytest.mark.parametrize("name", ALL)
def test_padded_batch_equals_one_by_one(name):
    ctxs = _contexts([(5, 6), (9, 20), (7, 30), (12, 11)])
    batch = jr.stack_contexts(ctxs, num_items=14, num_comparisons=40)
    f = jr.SCORERS[name]
    out = np.asarray(f(batch))
    assert out.shape == (4, 14)
    for k, c in enumerate(ctxs):
        np.testing.assert_allclose(out[k, :c.num_items], f(c), atol=2e-4, err_msg=f"{name} context {k}")
        neutral = 0.5 if name in ("win_ratio", "average_probability") else 0.0
        np.testing.assert_array_equal(out[k, c.num_items:], neutral)


@pytest.mark.parametrize("name", ALL)
def test_two_batch_axes(name):
    ctxs = _contexts([(6, 12)] * 6, seed=3)
    b = jr.stack_contexts(ctxs)
    b2 = jax.tree.map(lambda x: x.reshape((2, 3) + x.shape[1:]), b)
    f = jr.SCORERS[name]
    np.testing.assert_allclose(np.asarray(f(b2)).reshape(6, -1), f(b), atol=1e-5)


@pytest.mark.parametrize("fit", ["bradley_terry", "poe_bradley_terry", "poe_bradley_terry_chunks"])
def test_mixed_difficulties_give_the_one_by_one_results(fit, monkeypatch):
    """Contexts of one batch converge independently (per-context loop state).

    Mixed difficulties (near-separable contexts need many more iterations) must
    give exactly the per-context results and iteration counts; for Newman's BT
    (>= 32 contexts) the slowest contexts finish in a compacted sub-batch.
    """
    rng = np.random.default_rng(11)
    ctxs = []
    for k in range(70):
        n = int(rng.integers(3, 10))
        i, j, p, _, _ = ref.random_context(rng, n, int(rng.integers(n, 3 * n)), bias=0.2)
        if k % 7 == 0:
            p = np.where(p > 0.5, 0.999, 0.001).astype(np.float32)   # nearly separable: slow
        ctxs.append(jr.Comparisons.from_pairs(i, j, p, num_items=n))
    batch = jr.stack_contexts(ctxs, num_items=10, num_comparisons=30)
    if fit == "poe_bradley_terry_chunks":          # 70 contexts in chunks of 16 (the last one padded)
        from jaxrank.scoring import soft_bt
        monkeypatch.setattr(soft_bt, "CHUNK", 16)
        jax.clear_caches()
    solve = {"bradley_terry": lambda c: jr.fit_bradley_terry(c, method="newman"),
             "poe_bradley_terry": jr.fit_poe_bradley_terry, "poe_bradley_terry_chunks": jr.fit_poe_bradley_terry}[fit]
    out = solve(batch)
    its = np.asarray(out.iterations)
    assert its.max() > np.median(its)                    # the tail path is really exercised
    for k, c in enumerate(ctxs):
        # the context with a copy of itself: batched like the rest
        one = solve(jr.stack_contexts([c, c], num_items=10, num_comparisons=30))
        np.testing.assert_allclose(out.scores[k], one.scores[0], atol=1e-5, err_msg=f"context {k}")
        assert its[k] == int(one.iterations[0]), k
    for k, c in enumerate(ctxs):
        # alone: its own loop, not vmapped (chord steps only from _soft_bt_newton.CHORD_MIN_ITEMS items)
        alone = solve(jr.stack_contexts([c], num_items=10, num_comparisons=30))
        np.testing.assert_allclose(out.scores[k], alone.scores[0], atol=1e-5, err_msg=f"context {k} alone")
        assert its[k] == int(alone.iterations[0]), k


@pytest.mark.parametrize("name", ["poe_gaussian", "poe_bradley_terry", "average_probability"])
def test_explicit_vmap_matches_batched_call(name):
    b = jr.stack_contexts(_contexts([(6, 12), (8, 15), (5, 9)], seed=4))
    f = jr.SCORERS[name]
    np.testing.assert_allclose(jax.vmap(f)(b), f(b), atol=1e-5)


@pytest.mark.parametrize("shape", [(30, 120), (6, 40)])
def test_dense_edge_space_matches_sparse(monkeypatch, shape):
    from jaxrank import _graph
    (c,) = _contexts([shape], seed=5)
    monkeypatch.setattr(_graph, "DENSE_RATIO", 0.0)
    jax.clear_caches()
    sparse = {k: np.asarray(jr.SCORERS[k](c)) for k in ALL}
    monkeypatch.setattr(_graph, "DENSE_RATIO", float("inf"))
    jax.clear_caches()
    for k in ALL:
        np.testing.assert_allclose(jr.SCORERS[k](c), sparse[k], atol=2e-4, err_msg=k)
    jax.clear_caches()


# ---------------------------------------------------------------------- jit
@pytest.mark.parametrize("name", ALL)
def test_inside_user_jit(name):
    (c,) = _contexts([(8, 20)], seed=6)
    f = jr.SCORERS[name]
    np.testing.assert_allclose(jax.jit(f)(c), f(c), atol=1e-6)


def test_no_recompilation_on_second_call_with_same_shapes():
    c1, c2, c3 = _contexts([(10, 30), (10, 30), (40, 130)], seed=7)     # c3: another item/comparison bucket
    fns = [jr.win_ratio, jr.average_probability, jr.poe_gaussian, jr.poe_gaussian_posterior,
           lambda c: jr.fit_bradley_terry(c), lambda c: jr.fit_poe_bradley_terry(c, debias="learn"),
           lambda c: jr.laplace_bradley_terry(c), jr.positional_bias, jr.permutation_average,
           jr.max_likelihood_ranking]
    for f in fns:
        jax.block_until_ready(f(c1))
    with CompileLog() as log:
        for f in fns:
            jax.block_until_ready(f(c2))
    assert log.records == []
    with CompileLog() as log:          # positive control: a new bucket does compile
        jax.block_until_ready(jr.poe_gaussian(c3))
    assert log.records


# --------------------------------------------------------------------- grad
def _fd_check(f, c, k_list=(0, 3, 7), eps=1e-3, tol=2e-3):
    """Compare jax.grad of sum(v * f(c)) w.r.t. p with central finite differences in float32."""
    v = jnp.asarray(np.random.default_rng(0).normal(size=c.num_items), c.p.dtype)
    loss = lambda p: jnp.sum(v * f(c.with_p(p)))
    g = jax.grad(loss)(c.p)
    for k in k_list:
        dp = jnp.zeros_like(c.p).at[k].set(eps)
        fd = (loss(c.p + dp) - loss(c.p - dp)) / (2 * eps)
        np.testing.assert_allclose(g[k], fd, atol=tol, rtol=1e-2)
    return g


@pytest.mark.parametrize("f", [
    jr.average_probability,
    lambda c: jr.poe_gaussian(c),
    lambda c: jr.poe_gaussian(c, debias=True),
    lambda c: jr.poe_bradley_terry(c),
    lambda c: jr.poe_bradley_terry(c, debias="mean"),
    lambda c: jr.poe_bradley_terry(c, debias="learn"),
], ids=["avgprob", "poe_g", "poe_g_debias", "poe_bt", "poe_bt_mean", "poe_bt_learn"])
def test_grad_matches_finite_differences(f):
    (c,) = _contexts([(7, 18)], seed=8)
    _fd_check(f, c)


def test_grad_through_soft_bt_is_implicit_not_unrolled():
    # The gradient of the learnt gamma w.r.t. p must match finite differences too.
    (c,) = _contexts([(6, 20)], seed=9)
    gam = lambda p: jr.fit_poe_bradley_terry(c.with_p(p), debias="learn").gamma
    g = jax.grad(gam)(c.p)
    eps = 1e-3
    for k in (1, 5):
        dp = jnp.zeros_like(c.p).at[k].set(eps)
        np.testing.assert_allclose(g[k], (gam(c.p + dp) - gam(c.p - dp)) / (2 * eps), atol=2e-3, rtol=1e-2)
    # reverse mode on a batch: one gradient per context, padded comparisons get zero
    b = jr.stack_contexts(_contexts([(5, 8), (6, 12)], seed=10))
    gb = jax.grad(lambda p: jnp.sum(jr.poe_bradley_terry(b.with_p(p))[:, 0]))(b.p)
    assert gb.shape == b.p.shape and np.all(np.asarray(gb)[0, 8:] == 0)


def test_grad_wrt_weights_poe_gaussian_and_soft_bt():
    import dataclasses
    (c,) = _contexts([(6, 14)], seed=11)
    for f in (jr.poe_gaussian, jr.poe_bradley_terry):
        loss = lambda w: f(dataclasses.replace(c, weight=w))[2]
        g = jax.grad(loss)(c.weight)
        eps = 1e-3
        dw = jnp.zeros_like(c.weight).at[4].set(eps)
        np.testing.assert_allclose(g[4], (loss(c.weight + dw) - loss(c.weight - dw)) / (2 * eps), atol=2e-3, rtol=1e-2)


def test_grad_through_chunked_soft_bt_equals_unchunked(monkeypatch):
    """Batches larger than soft_bt.CHUNK run in a lax.map over chunks: values and gradients unchanged."""
    from jaxrank.scoring import soft_bt

    ctxs = _contexts([(6, 14)] * 10, seed=8)
    b = jr.stack_contexts(ctxs)
    f = lambda p: jnp.sum(jr.poe_bradley_terry(b.with_p(p), debias="learn")[:, :3] ** 2)
    monkeypatch.setattr(soft_bt, "CHUNK", 1000)
    jax.clear_caches()
    v1, g1 = jax.value_and_grad(f)(b.p)
    monkeypatch.setattr(soft_bt, "CHUNK", 4)           # 3 chunks, the last one padded
    jax.clear_caches()
    v2, g2 = jax.value_and_grad(f)(b.p)
    np.testing.assert_allclose(v2, v1, rtol=1e-5)
    np.testing.assert_allclose(g2, g1, atol=1e-5)
