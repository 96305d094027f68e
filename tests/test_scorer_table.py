"""jaxrank.scorer_table: one table of scorers with one debias vocabulary."""

import subprocess
import sys

import numpy as np
import pytest

import jaxrank as jr
from jaxrank import scorer_table

import reference as ref


def _comparisons():
    rng = np.random.default_rng(0)
    n = 5
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    p = np.clip(rng.uniform(size=len(i)), 0.05, 0.95).astype(np.float32)
    return jr.Comparisons.from_pairs(i, j, p, num_items=n), i, j, p


def test_every_choice_is_validated_with_the_argument_named():
    with pytest.raises(ValueError, match="--debias learn applies to poe_bradley_terry only"):
        scorer_table.check_debias("poe_gaussian", "learn", argument="--debias")
    with pytest.raises(ValueError, match="mean applies to the PoE methods only"):
        scorer_table.check_debias("win_ratio", "mean")
    with pytest.raises(ValueError, match="debias must be one of"):
        scorer_table.check_debias("win_ratio", True)
    with pytest.raises(ValueError, match="unknown scorer"):
        scorer_table.check_debias("elo", "none")
    for name, entry in scorer_table.SCORERS.items():
        assert set(scorer_table.TRANSFORMS) <= set(entry.debias) and "none" in entry.debias


def test_table_scores_against_independent_formulas():
    c, i, j, p = _comparisons()
    w = np.ones(len(i))
    win = np.asarray(scorer_table.score("win_ratio", c))
    want = np.array([((p[i == k] > 0.5).sum() + (p[j == k] < 0.5).sum()) / ((i == k).sum() + (j == k).sum())
                     for k in range(5)])
    np.testing.assert_allclose(win, want, atol=1e-6)
    got = np.asarray(scorer_table.score("poe_bradley_terry", c, "learn"))
    expect, _ = ref.soft_bt(i, j, np.clip(p, 1e-6, 1 - 1e-6).astype(float), w, 5, learn=True)
    np.testing.assert_allclose(got, expect, atol=2e-4)
    # a transform: permutation averaging then the scorer, against averaging by hand
    pab = {(a, b): q for a, b, q in zip(i, j, p)}
    pav = np.array([0.5 * (pab[(a, b)] + 1 - pab[(b, a)]) for a, b in zip(i, j)], np.float32)
    direct = jr.win_ratio(jr.Comparisons.from_pairs(i, j, pav, num_items=5))
    np.testing.assert_allclose(scorer_table.score("win_ratio", c, "permutation"), direct, atol=1e-6)
    assert jr.SCORERS["poe_gaussian_hard"] is not None
    np.testing.assert_allclose(jr.SCORERS["poe_gaussian_hard"](c), jr.poe_gaussian(c, hard=True), atol=1e-6)


def test_the_table_imports_no_jax():
    code = "import sys, jaxrank.scorer_table; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
