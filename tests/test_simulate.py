"""The simulated judge: calibration to a target accuracy and P(A), one vmapped draw, masks."""

import jax
import numpy as np
import pytest
from scipy.special import ndtr

import jaxrank as jr
from jaxrank import simulate


@pytest.fixture(scope="module")
def labels():
    """SummEval coherence (100 x 16) if the data is there, else a synthetic stand-in with ties."""
    try:
        lab = jr.data.label_matrix(jr.data.load_dataset("summeval"), "coherence")
        return lab.labels, lab.mask
    except (FileNotFoundError, ValueError):
        rng = np.random.default_rng(0)
        return (np.round(rng.normal(3, 1, size=(100, 16)) * 3) / 3).astype(np.float32), np.ones((100, 16), bool)


def test_calibration_solves_the_expected_statistics(labels):
    h, m = labels
    for target in (dict(accuracy=0.686, p_a=0.37), dict(accuracy=0.75, p_a=0.55), dict(accuracy=0.6, p_a=0.5)):
        prm = simulate.calibrate_judge(h, m, **target, item_noise=1.0, pair_noise=1.0)
        got = simulate.expected_judge_stats(h, m, params=prm)
        assert abs(got["accuracy"] - target["accuracy"]) < 1e-9 and abs(got["p_a"] - target["p_a"]) < 1e-9
        assert (prm.bias < 0) == (target["p_a"] < 0.5)
    # independent check of the closed form: Monte Carlo over the model's own noise, one context
    prm = simulate.calibrate_judge(h, m, accuracy=0.686, p_a=0.37)
    rng = np.random.default_rng(1)
    z = (h[0] - h[0].mean()) / prm.scale
    a, b = np.nonzero(~np.eye(16, dtype=bool))
    u = prm.item_noise * rng.normal(size=(20000, 16))
    x = prm.slope * (z[a] + u[:, a] - z[b] - u[:, b]) + prm.bias + prm.pair_noise * rng.normal(size=(20000, len(a)))
    s = np.sqrt(2 * prm.slope**2 * prm.item_noise**2 + prm.pair_noise**2)
    np.testing.assert_allclose((x > 0).mean(0), ndtr((prm.slope * (z[a] - z[b]) + prm.bias) / s), atol=0.015)


@pytest.mark.parametrize("model", ["logistic", "linear"])
def test_simulated_judge_matches_targets_within_sampling_error(labels, model):
    """FlanT5-3B on SummEval coherence (LCA Tables 5, 7): accuracy 0.686, P(A) 0.37.

    The judge is drawn 6 times (one vmapped call per draw over all 100 contexts); the
    mean measured accuracy and P(A) must be within 4 standard errors (estimated from the
    6 draws, plus 0.002 slack) of the targets.
    """
    h, m = labels
    prm = simulate.calibrate_judge(h, m, **simulate.PRESETS["flant5-3b/summeval-coherence"], model=model)
    stats = []
    for seed in range(6):
        judge = simulate.simulate_judge(jax.random.key(seed), h, m, params=prm)
        assert judge.probs.shape == (h.shape[0], 16, 16)
        stats.append(simulate.judge_stats(judge.probs, h, m))
    acc = np.array([x["accuracy"] for x in stats])
    pa = np.array([x["p_a"] for x in stats])
    print(f"\n{model}: accuracy {acc.mean():.4f} +- {acc.std(ddof=1):.4f}, P(A) {pa.mean():.4f} +- {pa.std(ddof=1):.4f}")
    assert abs(acc.mean() - 0.686) < 4 * acc.std(ddof=1) / np.sqrt(6) + 0.002
    assert abs(pa.mean() - 0.37) < 4 * pa.std(ddof=1) / np.sqrt(6) + 0.002
    assert acc.std(ddof=1) < 0.02 and pa.std(ddof=1) < 0.02
    # the full matrix scored by PoE-BT correlates with the humans like a weak LLM judge
    c = jr.Comparisons.from_matrix(judge.probs)
    rho = float(jr.metrics.context_mean(jr.metrics.spearman(jr.poe_bradley_terry(c, debias="mean"), h, where=m)))
    print(f"{model}: full-matrix PoE-BT Spearman with the humans {rho:.3f}")
    assert 0.3 < rho < 0.7


def test_probability_matrix_structure_and_masks():
    rng = np.random.default_rng(3)
    h = rng.integers(1, 6, size=(4, 7)).astype(np.float32)
    mask = np.ones((4, 7), bool)
    mask[1, 5:] = False
    mask[3, 3:] = False
    prm = simulate.calibrate_judge(h, mask, accuracy=0.8, p_a=0.6, item_noise=0.5)
    judge = simulate.simulate_judge(jax.random.key(0), h, mask, params=prm)
    p = np.asarray(judge.probs)
    assert p.shape == (4, 7, 7) and np.all((p >= 0) & (p <= 1))
    np.testing.assert_array_equal(p[:, np.arange(7), np.arange(7)], 0.5)
    assert np.all(p[1, 5:] == 0.5) and np.all(p[1, :, 5:] == 0.5) and np.all(p[3, 3:] == 0.5)
    assert np.all(np.asarray(judge.latent)[~mask] == 0)
    # logistic: the logit is antisymmetric up to the bias and the pair noise
    x = np.log(p / (1 - p))
    lat = np.asarray(judge.latent)
    resid = x - prm.slope * (lat[:, :, None] - lat[:, None, :]) - prm.bias
    real = mask[:, :, None] & mask[:, None, :] & ~np.eye(7, dtype=bool)
    assert abs(resid[real].std() - prm.pair_noise) < 0.25
    # a LabelMatrix works directly, the same key gives the same judge, and the judge is
    # usable with the selection helpers
    lab = jr.data.LabelMatrix(h, mask, [str(k) for k in range(4)], [[]] * 4)
    again = simulate.simulate_judge(jax.random.key(0), lab, params=prm)
    np.testing.assert_array_equal(again.probs, judge.probs)
    c = jr.Comparisons.from_matrix(judge.probs, mask=real)
    assert np.isclose(float(np.asarray(c.weight).sum()), real.sum())


def test_linear_model_is_the_clipped_first_order_logistic():
    h = np.arange(6, dtype=np.float32)[None].repeat(3, 0)
    prm = simulate.calibrate_judge(h, accuracy=0.8, p_a=0.45, item_noise=0.3, pair_noise=0.5)
    lin = prm._replace(model="linear")
    a = simulate.simulate_judge(jax.random.key(1), h, params=prm)
    b = simulate.simulate_judge(jax.random.key(1), h, params=lin)
    x = np.log(np.asarray(a.probs) / (1 - np.asarray(a.probs)))
    off = ~np.eye(6, dtype=bool)
    np.testing.assert_allclose(np.asarray(b.probs)[:, off], np.clip(0.5 + x[:, off] / 4, 0, 1), atol=2e-5)
    np.testing.assert_array_equal(np.asarray(b.probs)[:, off] > 0.5, np.asarray(a.probs)[:, off] > 0.5)


def test_bad_arguments(labels):
    h, m = labels
    with pytest.raises(ValueError, match="out of reach"):
        simulate.calibrate_judge(h, m, accuracy=0.686, p_a=0.37, item_noise=3.0)
    with pytest.raises(ValueError, match="accuracy"):
        simulate.calibrate_judge(h, m, accuracy=0.4)
    with pytest.raises(ValueError, match="p_a"):
        simulate.calibrate_judge(h, m, accuracy=0.7, p_a=1.0)
    with pytest.raises(ValueError, match="noise"):
        simulate.calibrate_judge(h, m, accuracy=0.7, item_noise=0, pair_noise=0)
    with pytest.raises(ValueError, match="model"):
        simulate.calibrate_judge(h, m, accuracy=0.7, model="probit")
    with pytest.raises(ValueError, match="constant"):
        simulate.calibrate_judge(np.ones((3, 4)), accuracy=0.7)
    with pytest.raises(ValueError, match="JudgeParams"):
        simulate.simulate_judge(jax.random.key(0), h, m, params=dict(slope=1))
    with pytest.raises(ValueError, match="shape"):
        simulate.judge_stats(np.zeros((2, 3, 3)), h, m)
