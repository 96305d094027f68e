"""Building comparisons, bad input, and the documented edge cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr

SCORERS = ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_gaussian_hard",
           "poe_bradley_terry", "max_likelihood_ranking"]
NEUTRAL = {"win_ratio": 0.5, "average_probability": 0.5}


# ------------------------------------------------------------ constructors
def test_from_pairs_fields_and_defaults():
    c = jr.Comparisons.from_pairs([0, 1], [1, 2], [0.7, 0.2], num_items=3)
    assert c.num_items == 3 and c.batch_shape == () and c.num_comparisons == 2
    assert c.i.dtype == jnp.int32 and c.p.dtype == jnp.float32
    np.testing.assert_array_equal(c.weight, [1, 1])
    np.testing.assert_array_equal(c.item_mask, [True] * 3)


def test_from_matrix_takes_off_diagonal_and_mask():
    P = np.array([[np.nan, 0.8, 0.6], [0.3, np.nan, np.nan], [0.4, 0.9, np.nan]])
    mask = ~np.isnan(P)
    c = jr.Comparisons.from_matrix(P, mask)
    assert c.num_comparisons == 6
    live = np.asarray(c.weight) > 0
    got = {(int(a), int(b)): float(p) for a, b, p in zip(c.i[live], c.j[live], c.p[live])}
    assert got == pytest.approx({(0, 1): 0.8, (0, 2): 0.6, (1, 0): 0.3, (2, 0): 0.4, (2, 1): 0.9})
    np.testing.assert_allclose(jr.average_probability(c),
                               [(0.8 + 0.6 + 0.7 + 0.6) / 4, (0.3 + 0.2 + 0.1) / 3, (0.4 + 0.9 + 0.4) / 3], atol=1e-6)


def test_from_decisions_maps_win_loss_tie():
    c = jr.Comparisons.from_decisions([0, 1, 2], [1, 2, 0], ["win", "tie", "loss"], num_items=3)
    np.testing.assert_allclose(c.p, [1.0, 0.5, 0.0])
    c2 = jr.Comparisons.from_decisions([0], [1], [0.5], num_items=2)
    np.testing.assert_allclose(c2.p, [0.5])
    with pytest.raises(ValueError, match="outcome"):
        jr.Comparisons.from_decisions([0], [1], ["maybe"], num_items=2)
    with pytest.raises(ValueError, match="outcome"):
        jr.Comparisons.from_decisions([0], [1], [0.3], num_items=2)


def test_stack_contexts_pads_items_and_comparisons():
    a = jr.Comparisons.from_pairs([0], [1], [0.9], num_items=2)
    b = jr.Comparisons.from_pairs([0, 1, 2], [1, 2, 0], [0.6, 0.4, 0.5], num_items=3)
    s = jr.stack_contexts([a, b])
    assert s.batch_shape == (2,) and s.num_items == 3 and s.num_comparisons == 3
    np.testing.assert_array_equal(s.weight[0], [1, 0, 0])
    np.testing.assert_array_equal(s.item_mask[0], [True, True, False])
    with pytest.raises(ValueError, match="empty"):
        jr.stack_contexts([])
    with pytest.raises(ValueError, match="num_items"):
        jr.stack_contexts([a, b], num_items=2)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, match", [
    (dict(p=[0.5, np.nan]), "non-finite"),
    (dict(p=[0.5, np.inf]), "non-finite"),
    (dict(p=[0.5, 1.2]), r"\[0, 1\]"),
    (dict(p=[-0.1, 0.5]), r"\[0, 1\]"),
    (dict(i=[0, 3]), "outside"),
    (dict(j=[-1, 2]), "outside"),
    (dict(i=[0.0, 1.0]), "integer"),
    (dict(weight=[1.0, -1.0]), "weight"),
    (dict(weight=[1.0, np.nan]), "weight"),
    (dict(i=[1, 1], j=[1, 2]), "itself"),
    (dict(p=[0.5]), "same shape"),
    (dict(num_items=0), "num_items"),
    (dict(item_mask=[True, True, False]), "masked item"),
])
def test_bad_input_raises_clear_value_error(kwargs, match):
    args = dict(i=[0, 1], j=[1, 2], p=[0.5, 0.7], num_items=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        jr.Comparisons.from_pairs(args.pop("i"), args.pop("j"), args.pop("p"), **args)


def test_under_caller_jit_validation_is_skipped_documented():
    @jax.jit
    def f(p):
        return jr.average_probability(jr.Comparisons.from_pairs(jnp.array([0]), jnp.array([1]), p, num_items=2))
    np.testing.assert_allclose(f(jnp.array([0.8])), [0.8, 0.2], atol=1e-6)


# -------------------------------------------------------------- edge cases
@pytest.mark.parametrize("name", SCORERS)
def test_empty_comparison_set_gives_neutral_scores(name):
    c = jr.Comparisons.from_pairs(np.zeros(0, int), np.zeros(0, int), np.zeros(0), num_items=4)
    np.testing.assert_array_equal(jr.SCORERS[name](c), np.full(4, NEUTRAL.get(name, 0.0)))


@pytest.mark.parametrize("name", SCORERS)
def test_single_item_context(name):
    c = jr.Comparisons.from_pairs(np.zeros(0, int), np.zeros(0, int), np.zeros(0), num_items=1)
    np.testing.assert_array_equal(jr.SCORERS[name](c), [NEUTRAL.get(name, 0.0)])


@pytest.mark.parametrize("name", SCORERS)
def test_item_in_no_comparison_is_neutral_and_flagged(name):
    i, j, p = [0, 1, 2, 0], [1, 2, 0, 2], [0.8, 0.6, 0.3, 0.7]
    c4 = jr.Comparisons.from_pairs(i, j, p, num_items=4)
    c3 = jr.Comparisons.from_pairs(i, j, p, num_items=3)
    s4 = np.asarray(jr.SCORERS[name](c4))
    assert s4[3] == NEUTRAL.get(name, 0.0)
    np.testing.assert_allclose(s4[:3], jr.SCORERS[name](c3), atol=1e-5)
    np.testing.assert_array_equal(c4.games() == 0, [False, False, False, True])
    assert not bool(c4.is_connected()) and bool(c3.is_connected())


@pytest.mark.parametrize("name", ["bradley_terry", "poe_gaussian", "poe_bradley_terry"])
def test_disconnected_graph_is_centred_per_component(name):
    # Components {0,1,2} and {3,4}: each solved and centred on its own, flagged by components().
    rng = np.random.default_rng(0)
    i1, j1, p1 = [0, 1, 2, 1], [1, 2, 0, 0], rng.uniform(0.1, 0.9, 4)
    i2, j2, p2 = [0, 1], [1, 0], rng.uniform(0.1, 0.9, 2)
    both = jr.Comparisons.from_pairs(i1 + [a + 3 for a in i2], j1 + [b + 3 for b in j2], np.r_[p1, p2], num_items=5)
    f = jr.SCORERS[name]
    if name == "bradley_terry":   # the default prior 1/(N-1) depends on N: fix it to compare
        f = lambda c: jr.bradley_terry(c, prior=0.25)
    s = np.asarray(f(both))
    np.testing.assert_allclose(s[:3], f(jr.Comparisons.from_pairs(i1, j1, p1, num_items=3)), atol=1e-5)
    np.testing.assert_allclose(s[3:], f(jr.Comparisons.from_pairs(i2, j2, p2, num_items=2)), atol=1e-5)
    np.testing.assert_array_equal(both.components(), [0, 0, 0, 3, 3])
    assert not bool(both.is_connected())


@pytest.mark.parametrize("name", SCORERS)
def test_probabilities_exactly_zero_and_one_and_an_all_win_item(name):
    # Item 0 wins every comparison with p = 1 (as A) or p = 0 (as B): finite, largest score.
    i = [0, 1, 0, 2, 1, 3, 2]
    j = [1, 0, 2, 0, 2, 1, 3]
    p = [1.0, 0.0, 1.0, 0.0, 0.7, 0.4, 0.6]
    c = jr.Comparisons.from_pairs(i, j, p, num_items=4)
    s = np.asarray(jr.SCORERS[name](c))
    assert np.all(np.isfinite(s))
    assert s[0] == s.max() and (s[0] > s[1:]).all()


def test_soft_bt_all_win_reports_convergence():
    c = jr.Comparisons.from_pairs([0, 0, 1], [1, 2, 2], [1.0, 1.0, 0.5], num_items=3)
    sol = jr.fit_poe_bradley_terry(c)
    assert bool(sol.converged) and np.isfinite(np.asarray(sol.scores)).all()


def test_from_pairs_on_host_arrays_compiles_nothing():
    # NumPy inputs are validated and cast on the host: building comparisons costs no XLA compilation
    # (each eager cast or fill would compile a program on its first use in a process).
    from compile_log import CompileLog

    rng = np.random.default_rng(7)
    i = rng.integers(0, 9, (4, 11)); j = (i + rng.integers(1, 9, (4, 11))) % 9   # int64
    p, w = rng.random((4, 11)), rng.random((4, 11))                                 # float64
    with CompileLog() as log:
        c = jr.Comparisons.from_pairs(i, j, p, num_items=9, weight=w)
        d = jr.Comparisons.from_pairs(i.tolist(), j.tolist(), p.tolist(), num_items=9,
                                      item_mask=np.ones((4, 9), bool))
    assert log.records == []
    assert c.i.dtype == jnp.int32 and c.p.dtype == jnp.float32 and c.weight.dtype == jnp.float32
    np.testing.assert_array_equal(c.i, i)
    np.testing.assert_allclose(c.p, p, rtol=1e-7)
    np.testing.assert_allclose(c.weight, w, rtol=1e-7)
    np.testing.assert_array_equal(d.weight, np.ones((4, 11)))
    np.testing.assert_array_equal(d.j, j)
