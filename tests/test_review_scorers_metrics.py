"""Review: metrics.system_level refuses NaN weights and fractional system ids (it returned NaN silently).
Yardstick: SciPy's correlations of the per-system means."""

import numpy as np
import pytest
from scipy import stats

from jaxrank import metrics


def _data():
    rng = np.random.default_rng(7)
    pred, gold = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    return pred, gold, np.tile(np.arange(4), (6, 1))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused(bad):
    pred, gold, system = _data()
    w = np.ones(6)
    w[2] = bad
    with pytest.raises(ValueError, match="weights"):
        metrics.system_level(pred, gold, system, weights=w)


def test_fractional_system_ids_are_refused_and_whole_float_ids_work():
    pred, gold, system = _data()
    with pytest.raises(ValueError, match="system"):
        metrics.system_level(pred, gold, system.astype(float) + 0.5)
    with pytest.raises(ValueError, match="system"):
        metrics.system_level(pred, gold, np.where(system == 1, np.nan, system.astype(float)))
    out = metrics.system_level(pred, gold, system.astype(float))
    np.testing.assert_allclose(out["spearman"], stats.spearmanr(pred.mean(0), gold.mean(0))[0], atol=1e-6)
    np.testing.assert_allclose(out["pearson"], stats.pearsonr(pred.mean(0), gold.mean(0))[0], atol=1e-6)
