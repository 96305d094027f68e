"""One context's Newton loop: not vmapped, and chord steps that save the confirming pass.

``_batching.while_per_context`` runs a single context's loop without ``vmap`` (so a ``lax.cond`` in
the step runs one branch); the soft-BT Newton pass then tries a chord step with the factor it has
just computed (``_soft_bt_newton.CHORD_MARGIN``). Checked against NumPy and against the batched
(vmapped, chord-free) path of the same solver.
"""

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from scipy.special import expit

import jaxrank as jr
import reference as ref
from jaxrank import _batching, _graph
from jaxrank.scoring import _soft_bt_newton as newton
from jaxrank.scoring.solver import BradleyTerrySolver


def _collatz_steps(x0):
    """NumPy: the number of Collatz steps from each start to 1 (a data-dependent loop length)."""
    out = []
    for x in x0:
        k = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            k += 1
        out.append(k)
    return np.asarray(out)


@pytest.mark.parametrize("starts", [[27], [6], [27, 6, 1, 97]])
def test_while_per_context_single_and_batched_loops_match_a_numpy_loop(starts):
    """A step with a ``lax.cond`` and a per-context stopping rule: one context (its own loop, not vmapped)
    and a batch (vmapped, every context stopping on its own) both give NumPy's answer."""
    def cont(s):
        return s[0] != 1

    def step(ops, s):
        x, k = s
        x = jax.lax.cond(x % 2 == 0, lambda: x // 2, lambda: ops * x + 1)
        return x, k + 1

    x0 = jnp.asarray(starts, jnp.int32)
    ops = jnp.full(x0.shape, 3, jnp.int32)
    run = jax.jit(lambda o, x: _batching.while_per_context(cont, step, o, (x, jnp.zeros_like(x)), compact=False))
    x, k = run(ops, x0)
    np.testing.assert_array_equal(np.asarray(x), 1)
    np.testing.assert_array_equal(np.asarray(k), _collatz_steps(starts))


def _soft_bt_gradient(s, i, j, p, w, prior):
    """NumPy float64 gradient of the soft-BT negative log-likelihood plus ``prior |s|^2 / 2``."""
    r = w * (expit(s[i] - s[j]) - p)
    return np.bincount(i, r, len(s)) - np.bincount(j, r, len(s)) + prior * s


def test_chord_step_matches_a_numpy_solve_with_the_earlier_hessian():
    """``-H0^{-1} (g(y) - P g(y))`` for the Cholesky factor of ``H0`` at another point, against NumPy."""
    rng = np.random.default_rng(3)
    n = 12
    i, j, p, w, _ = ref.random_context(rng, n, r=40, weights=True)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w.astype(np.float32))
    solver = BradleyTerrySolver(score_prior=0.1)
    st = solver.settings(jnp.float32)
    pr = newton._problem(c, "off", st.eps)
    labels = jnp.zeros(n, jnp.int32)
    x0 = rng.normal(size=n)
    y = x0 + 0.1 * rng.normal(size=n)
    q = expit(x0[i] - x0[j])
    h = w * q * (1 - q)
    hess = np.zeros((n, n))
    np.add.at(hess, (i, i), h); np.add.at(hess, (j, j), h); np.add.at(hess, (i, j), -h); np.add.at(hess, (j, i), -h)
    hess += np.full((n, n), 1 / n) + 0.1 * np.eye(n)          # projector of the single component, prior
    factor = _graph.psd_factor(jnp.asarray(hess, jnp.float32))
    got = jax.jit(lambda y, f: newton._chord_step(y, f, pr, labels, "off", st))(jnp.asarray(y, jnp.float32), factor)
    g = _soft_bt_gradient(y, i, j, np.clip(p, st.eps, 1 - st.eps), w, 0.1)
    want = -np.linalg.solve(hess, g - g.mean())
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-5)


def _football():
    from jaxrank.data import data_dir
    from jaxrank.io import read_comparisons

    c = read_comparisons(data_dir() / "international_football" / "results.csv", item_a="home_team",
                         item_b="away_team", score_a="home_score", score_b="away_score").comparisons
    return jax.tree.map(lambda x: x[0], c)


def _twice(c):
    return jax.tree.map(lambda x: jnp.stack([x, x]), c)


@pytest.mark.filterwarnings("ignore::jaxrank.scoring.existence.NotStronglyConnectedWarning")
def test_one_context_saves_the_confirming_pass_and_matches_the_batched_solve():
    """All 337 football teams with ``eps = 0`` (not strongly connected: the MAP under the automatic score
    prior): one context stops a pass earlier than the same context in a batch of two, which takes no
    chord steps, at the same scores (both within ``tol`` of the optimum)."""
    c = _football()
    one = jr.fit_poe_bradley_terry(c, eps=0.0)
    batch = jr.fit_poe_bradley_terry(_twice(c), eps=0.0)
    assert bool(one.converged) and bool(np.all(np.asarray(batch.converged)))
    assert int(one.iterations) < int(batch.iterations[0])
    np.testing.assert_allclose(np.asarray(one.scores), np.asarray(batch.scores[0]), atol=2e-5)


@pytest.mark.parametrize("debias", [False, "learn"])
@pytest.mark.parametrize("seed", [0, 1])
def test_one_context_with_chord_steps_matches_a_float64_optimum(seed, debias):
    """LLM-like probabilities on 160 items (dense Newton systems, chord steps from ``CHORD_MIN_ITEMS``): the
    single-context solve, which may stop on a chord step, against SciPy's float64 optimum and the batched solve."""
    rng = np.random.default_rng(seed)
    n = 160
    assert n >= newton.CHORD_MIN_ITEMS
    i, j, p, w, _ = ref.random_context(rng, n, r=1200, bias=0.3 if debias else 0.0)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)
    one = jr.fit_poe_bradley_terry(c, debias=debias)
    batch = jr.fit_poe_bradley_terry(_twice(c), debias=debias)
    want, gamma = ref.soft_bt(i, j, np.clip(p, 1e-6, 1 - 1e-6), w, n, learn=debias == "learn")
    assert bool(one.converged)
    assert int(one.iterations) <= int(batch.iterations[0])
    np.testing.assert_allclose(np.asarray(one.scores), want, atol=1e-4)
    np.testing.assert_allclose(np.asarray(one.scores), np.asarray(batch.scores[0]), atol=2e-5)
    if debias == "learn":
        np.testing.assert_allclose(float(one.gamma), gamma, atol=1e-4)


@pytest.mark.parametrize("debias", [False, "learn"])
def test_label_free_start_is_the_minimum_norm_least_squares_fit_of_the_logits(debias):
    """``_ridge_start`` (run before the component labels are known), centred per component by
    ``_polished_start`` without its Newman updates: the weighted least-squares fit of ``s_i - s_j (- gamma)``
    to the clipped logits, minimum-norm per component, from NumPy's ``lstsq`` on two components."""
    rng = np.random.default_rng(7)
    parts = [ref.random_context(rng, 9, r=30, weights=True, bias=0.4), ref.random_context(rng, 6, r=20, weights=True,
                                                                                            bias=0.4)]
    i = np.r_[parts[0][0], parts[1][0] + 9]
    j = np.r_[parts[0][1], parts[1][1] + 9]
    p = np.r_[parts[0][2], parts[1][2]]
    w = np.r_[parts[0][3], parts[1][3]]
    n = 15
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w.astype(np.float32))
    mode = "learn" if debias else "off"
    st = BradleyTerrySolver(debias=debias).settings(jnp.float32)
    pr = newton._problem(c, mode, st.eps)
    labels = jnp.asarray(np.r_[np.zeros(9), np.full(6, 9)].astype(np.int32))
    old = newton.POLISH_SWEEPS
    newton.POLISH_SWEEPS = 0
    try:
        x = jax.jit(lambda pr, lab: newton._polished_start((pr, lab, jnp.float32(0), None),
                                                            newton._ridge_start(pr, mode, st), mode, st))(pr, labels)
    finally:
        newton.POLISH_SWEEPS = old
    pbar = np.clip(p, 0.01, 0.99)
    design = np.zeros((len(i), n + bool(debias)))
    design[np.arange(len(i)), i] = 1.0
    design[np.arange(len(i)), j] = -1.0
    if debias:
        design[:, n] = -1.0
    sw = np.sqrt(w)
    want = np.linalg.lstsq(design * sw[:, None], np.log(pbar / (1 - pbar)) * sw, rcond=None)[0]
    s = want[:n]
    for part in (slice(0, 9), slice(9, 15)):
        s[part] -= s[part].mean()
    np.testing.assert_allclose(np.asarray(x)[:n], s, atol=2e-3)
    if debias:
        np.testing.assert_allclose(float(x[n]), want[n], atol=2e-3)
