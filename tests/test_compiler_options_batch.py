"""Unoptimised (quick to compile) programs only for small batches: a sweep over many contexts of a small pool is
compiled with XLA's optimisations, and scores the same as the unbatched, unoptimised calls."""
import numpy as np
import pytest

import jaxrank as jr
from jaxrank import _batching


def test_small_pool_small_batch_gets_the_quick_options_and_a_sweep_does_not():
    quick = _batching.compiler_options(16, 48)
    assert quick is not None and quick["xla_backend_optimization_level"] == 0
    assert _batching.compiler_options(16) == quick                       # no batch size given: as before
    assert _batching.compiler_options(16, _batching.SMALL_PROGRAM_COMPARISONS) == quick
    assert _batching.compiler_options(16, _batching.SMALL_PROGRAM_COMPARISONS + 1) is None
    assert _batching.compiler_options(_batching.SMALL_PROGRAM_ITEMS + 1, 48) is None


@pytest.mark.parametrize("scorer", ["win_ratio", "average_probability", "poe_gaussian", "bradley_terry"])
def test_a_sweep_compiled_optimised_scores_as_each_context_alone(scorer):
    rng = np.random.default_rng(0)
    contexts, r, n = 800, 48, 8                     # 38,400 comparisons: past SMALL_PROGRAM_COMPARISONS
    i = rng.integers(0, n, (contexts, r)).astype(np.int32)
    j = ((i + rng.integers(1, n, (contexts, r))) % n).astype(np.int32)
    p = rng.random((contexts, r)).astype(np.float32)
    fn = getattr(jr, scorer)
    batch = np.asarray(fn(jr.Comparisons.from_pairs(i, j, p, num_items=n)))
    for k in (0, 1, 399, 799):                      # one context alone: a small, unoptimised program
        alone = np.asarray(fn(jr.Comparisons.from_pairs(i[k], j[k], p[k], num_items=n)))
        np.testing.assert_allclose(batch[k], alone, rtol=2e-5, atol=2e-5)
    if scorer == "win_ratio":                       # and against NumPy: wins over games per item
        k = 5
        wins = np.bincount(i[k], p[k] > 0.5, n) + np.bincount(j[k], p[k] < 0.5, n) \
            + 0.5 * (np.bincount(i[k], p[k] == 0.5, n) + np.bincount(j[k], p[k] == 0.5, n))
        games = np.bincount(i[k], minlength=n) + np.bincount(j[k], minlength=n)
        np.testing.assert_allclose(batch[k], wins / games, rtol=1e-6)
