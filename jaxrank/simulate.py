"""A simulated LLM judge on real human scores, calibrated to a chosen accuracy and positional bias.

For experiments without an LLM: every context's candidates keep their real
human scores ``h`` (e.g. SummEval coherence, ``jaxrank.data.label_matrix``), and
the judge's probability for the ordered pair ``(a, b)`` (``a`` in position A) is

    x_ab = K (z_a + u_a - z_b - u_b) + beta + e_ab,
    p_ab = sigmoid(x_ab)                       (model="logistic")
    p_ab = clip(0.5 + x_ab / 4, 0, 1)          (model="linear": linear-Gaussian, PoE eq. 11)

* ``z = (h - context mean) / scale``: human scores standardised by the pooled
  within-context standard deviation ``scale`` (so settings carry over between
  data sets and score ranges);
* ``u_a ~ N(0, item_noise^2)``: the judge's own misjudgement of candidate ``a``,
  shared by all its comparisons (what keeps a real LLM's full-matrix ranking
  below the humans', however many comparisons it makes);
* ``e_ab ~ N(0, pair_noise^2)``: per-prompt noise, independent for each ordered pair;
* ``beta``: positional bias on the logit (``beta < 0`` favours position B);
* ``K``: the judge's sharpness.

The judge decides A when ``x_ab > 0``. Marginally over the noise,
``P(decide A) = Phi((K dz + beta) / S)``, ``S = sqrt(2 K^2 item_noise^2 +
pair_noise^2)``, so the expected pairwise accuracy (over ordered pairs with
different human scores; LCA Table 7, METHODS.md §7) and the expected ``P(A)``
(LCA eq. 8, over all ordered pairs) are

    acc(K, beta) = mean_{dz != 0} Phi((K |dz| + beta sign(dz)) / S),
    P(A)(K, beta) = mean_{all}    Phi((K dz + beta) / S).

:func:`calibrate_judge` solves these two equations for ``(K, beta)``
numerically (nested Brent root finding: ``P(A)`` is increasing in ``beta``; with
``beta`` solved, accuracy is increasing in ``K``), given the noise split. E.g.
FlanT5-3B on SummEval coherence (LCA Tables 5 and 7): accuracy 0.686, ``P(A) = 0.37``
(:data:`PRESETS`). :func:`simulate_judge` then draws every context's full
``[C, N, N]`` probability matrix in one vmapped call.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize
from scipy.special import ndtr

from jaxrank import _validate
from jaxrank.bootstrap import _key

__all__ = ["JudgeParams", "SimulatedJudge", "calibrate_judge", "simulate_judge", "expected_judge_stats",
           "judge_stats", "sparse_pool", "PRESETS"]

PRESETS = {
    "flant5-3b/summeval-coherence": dict(accuracy=0.686, p_a=0.37),
}
"""Measured judge statistics from the papers: pairwise accuracy (LCA Table 7) and P(A) (LCA Table 5)."""

MODELS = ("logistic", "linear")


class JudgeParams(NamedTuple):
    """Parameters of the simulated judge (see the module docstring).

    Attributes:
        slope: ``K``, logit per within-context standard deviation of the human scores.
        bias: ``beta``, positional bias on the logit.
        item_noise: std of the per-candidate misjudgement ``u`` (standardised score units).
        pair_noise: std of the per-comparison logit noise ``e``.
        scale: the pooled within-context std of the human scores used to standardise them.
        model: ``"logistic"`` or ``"linear"``.
    """

    slope: float
    bias: float
    item_noise: float
    pair_noise: float
    scale: float
    model: str = "logistic"


class SimulatedJudge(NamedTuple):
    """Output of :func:`simulate_judge`.

    Attributes:
        probs: ``[C, N, N]`` ``P(a better than b)``, ``a`` in position A; 0.5 on the
            diagonal and for padded candidates.
        latent: ``[C, N]`` the judge's perceived quality ``z + u`` (0 when padded).
        mask: bool ``[C, N]`` real candidates.
    """

    probs: jax.Array
    latent: jax.Array
    mask: jax.Array


def _labels_and_mask(labels, mask):
    if hasattr(labels, "labels") and hasattr(labels, "mask") and mask is None:   # a LabelMatrix
        labels, mask = labels.labels, labels.mask
    elif hasattr(labels, "labels") and hasattr(labels, "mask"):
        raise ValueError("mask must be None when labels is a LabelMatrix (its own mask is used)")
    h = np.asarray(labels, np.float64)
    if h.ndim == 1:
        h = h[None]
    if h.ndim != 2:
        raise ValueError(f"labels must be [contexts, N] (or a LabelMatrix), got shape {h.shape}")
    if mask is None:
        m = np.ones(h.shape, bool)
    else:
        m = np.asarray(mask, bool)
        try:
            m = np.broadcast_to(m, h.shape)
        except ValueError:
            raise ValueError(f"mask must have the shape of labels {h.shape} (or broadcast to it), "
                             f"got {m.shape}") from None
    if not np.isfinite(h[m]).all():
        raise ValueError("labels has non-finite values at real (unmasked) candidates")
    return h, m


def _standardise(h, m):
    """``z`` and the pooled within-context std."""
    cnt = m.sum(1, keepdims=True)
    mean = np.where(cnt > 0, np.where(m, h, 0).sum(1, keepdims=True) / np.maximum(cnt, 1), 0)
    dev = np.where(m, h - mean, 0)
    dof = np.maximum(cnt - 1, 0).sum()
    if dof == 0 or not (dev**2).sum() > 0:
        raise ValueError("labels are constant within every context: nothing to judge")
    scale = float(np.sqrt((dev**2).sum() / dof))
    return dev / scale, scale


def _pair_differences(z, m):
    """All ordered-pair differences ``z_a - z_b`` over real candidates, pooled over contexts."""
    out = []
    for zc, mc in zip(z, m):
        zr = zc[mc]
        a, b = np.nonzero(~np.eye(len(zr), dtype=bool))
        out.append(zr[a] - zr[b])
    return np.concatenate(out) if out else np.zeros(0)


def _stats(dz, slope, bias, item_noise, pair_noise):
    s = np.sqrt(2 * slope**2 * item_noise**2 + pair_noise**2)
    pa = ndtr((slope * dz + bias) / s)
    diff = dz != 0
    acc = ndtr((slope * np.abs(dz[diff]) + bias * np.sign(dz[diff])) / s)
    return float(acc.mean()), float(pa.mean())


def expected_judge_stats(labels, mask=None, *, params: JudgeParams) -> dict:
    """Expected pairwise accuracy and ``P(A)`` of a simulated judge on these labels (closed form)."""
    h, m = _labels_and_mask(labels, mask)
    z, own_scale = _standardise(h, m)
    z = z * own_scale / params.scale
    acc, pa = _stats(_pair_differences(z, m), params.slope, params.bias, params.item_noise, params.pair_noise)
    return dict(accuracy=acc, p_a=pa)


def calibrate_judge(labels, mask=None, *, accuracy: float, p_a: float = 0.5, item_noise: float = 1.5,
                    pair_noise: float = 1.0, model: str = "logistic") -> JudgeParams:
    """Solve for the judge's sharpness ``K`` and bias ``beta`` that give the requested statistics.

    Args:
        labels: human scores ``[contexts, N]``, or a :class:`jaxrank.data.LabelMatrix`.
        mask: bool ``[contexts, N]`` of real candidates (taken from a LabelMatrix).
        accuracy: target pairwise accuracy in ``(0.5, 1)`` over ordered pairs with
            different human scores (e.g. 0.686).
        p_a: target fraction of decisions for position A over all ordered pairs (e.g. 0.37).
        item_noise: std of the per-candidate misjudgement, in within-context standard
            deviations of the human scores (0 = none). The default 1.5 with the FlanT5-3B
            preset gives a full-matrix PoE-BT Spearman of about 0.50 on SummEval coherence
            (the paper's FlanT5-3B: 0.44; 68.6% accuracy is out of reach above about 1.65).
        pair_noise: std of the per-comparison logit noise.
        model: ``"logistic"`` or ``"linear"`` (only the map from ``x`` to ``p``).

    Returns:
        :class:`JudgeParams` whose *expected* accuracy and ``P(A)`` equal the targets
        (to 1e-9); a draw from :func:`simulate_judge` matches them up to sampling error.

    Raises:
        ValueError: targets or noises out of range or not finite (naming the argument); ``mask``
            not of the labels' shape, or given with a LabelMatrix; an accuracy that the noise split
            cannot reach (item noise bounds it however sharp the judge; lower ``item_noise``).
    """
    _validate.number("accuracy", accuracy, low=0.5, high=1, low_open=True, high_open=True)
    _validate.number("p_a", p_a, low=0, high=1, low_open=True, high_open=True)
    if not 0.5 < accuracy < 1:
        raise ValueError(f"accuracy must lie in (0.5, 1), got {accuracy!r}")
    if not 0 < p_a < 1:
        raise ValueError(f"p_a must lie in (0, 1), got {p_a!r}")
    _validate.number("item_noise", item_noise, low=0)
    _validate.number("pair_noise", pair_noise, low=0)
    if item_noise == 0 and pair_noise == 0:
        raise ValueError(f"item_noise and pair_noise must be >= 0 and not both 0; got {item_noise!r}, {pair_noise!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    h, m = _labels_and_mask(labels, mask)
    z, scale = _standardise(h, m)
    dz = _pair_differences(z, m)

    def bias_for(slope):
        f = lambda b: _stats(dz, slope, b, item_noise, pair_noise)[1] - p_a
        lo, hi = -1.0, 1.0
        while f(lo) > 0:
            lo *= 2
        while f(hi) < 0:
            hi *= 2
        return optimize.brentq(f, lo, hi, xtol=1e-12)

    def acc_gap(slope):
        return _stats(dz, slope, bias_for(slope), item_noise, pair_noise)[0] - accuracy

    lo, hi = 1e-6, 1.0
    while acc_gap(hi) < 0:
        hi *= 2
        if hi > 1e4:
            best = acc_gap(hi) + accuracy
            raise ValueError(f"accuracy={accuracy} is out of reach with item_noise={item_noise}: "
                             f"an arbitrarily sharp judge reaches about {best:.4f}; lower item_noise")
    slope = optimize.brentq(acc_gap, lo, hi, xtol=1e-12)
    return JudgeParams(float(slope), float(bias_for(slope)), float(item_noise), float(pair_noise), scale, model)


@functools.partial(jax.jit, static_argnames=("model",))
def _simulate(key, z, mask, slope, bias, item_noise, pair_noise, model):
    def one(key, z, mask):
        n = z.shape[-1]
        g = jax.random.normal(key, (n + n * n,), z.dtype)          # one draw (see selection._common.uniforms)
        latent = jnp.where(mask, z + item_noise * g[:n], 0.0)
        x = slope * (latent[:, None] - latent[None, :]) + bias + pair_noise * g[n:].reshape(n, n)
        p = jax.nn.sigmoid(x) if model == "logistic" else jnp.clip(0.5 + x / 4, 0.0, 1.0)
        real = mask[:, None] & mask[None, :] & ~jnp.eye(n, dtype=bool)
        return jnp.where(real, p, 0.5), latent

    keys = jax.random.split(key, z.shape[0])
    return jax.vmap(one)(keys, z, mask)


def simulate_judge(key, labels, mask=None, *, params: JudgeParams) -> SimulatedJudge:
    """Draw the simulated judge's full probability matrices for every context (one vmapped call).

    Args:
        key: a ``jax.random`` key, or an int seed (``jax.random.key(seed)``, as
            :func:`jaxrank.bootstrap.bootstrap_outcomes`); the judge is drawn once: deterministic afterwards.
        labels: human scores ``[C, N]`` or a :class:`jaxrank.data.LabelMatrix`.
        mask: bool ``[C, N]`` real candidates (taken from a LabelMatrix).
        params: from :func:`calibrate_judge` (its ``scale`` standardises the labels).

    Returns:
        :class:`SimulatedJudge` with ``probs [C, N, N]``; use
        ``Comparisons.from_matrix(probs, mask=...)`` for the full set, or a selection
        with :func:`jaxrank.selection.gather_comparisons`.

    Raises:
        ValueError: ``key`` is neither a key nor an int; ``mask`` not of the labels' shape; bad ``params``.
    """
    if not isinstance(params, JudgeParams):
        raise ValueError(f"params must be JudgeParams (from calibrate_judge), got {type(params).__name__}")
    key = _key(key)
    h, m = _labels_and_mask(labels, mask)
    cnt = m.sum(1, keepdims=True)
    mean = np.where(m, h, 0).sum(1, keepdims=True) / np.maximum(cnt, 1)
    z = np.where(m, (h - mean) / params.scale, 0).astype(np.float32)
    probs, latent = _simulate(key, jnp.asarray(z), jnp.asarray(m), params.slope, params.bias, params.item_noise,
                              params.pair_noise, params.model)
    return SimulatedJudge(probs, latent, jnp.asarray(m))


def judge_stats(probs, labels, mask=None) -> dict:
    """Measured pairwise accuracy and ``P(A)`` of judge probabilities ``[C, N, N]`` against human labels.

    Accuracy over ordered pairs of real candidates with different human scores
    (decision ``p > 0.5``); ``P(A)`` the fraction of decisions for position A over
    all ordered pairs of real candidates (LCA eq. 8); ``mean_p`` their mean probability.
    """
    h, m = _labels_and_mask(labels, mask)
    p = np.asarray(probs, np.float64)
    if p.shape != h.shape + (h.shape[-1],):
        raise ValueError(f"probs must have shape {h.shape + (h.shape[-1],)}, got {p.shape}")
    n = h.shape[-1]
    real = m[:, :, None] & m[:, None, :] & ~np.eye(n, dtype=bool)
    dh = h[:, :, None] - h[:, None, :]
    decide_a = p > 0.5
    diff = real & (dh != 0)
    acc = float((decide_a == (dh > 0))[diff].mean())
    return dict(accuracy=acc, p_a=float(decide_a[real].mean()), mean_p=float(p[real].mean()))


def sparse_pool(num_items: int, *, per_item: int = 10, seed: int = 0):
    """A large sparse pool: ``R = per_item * N`` comparisons between uniformly drawn distinct items.

    Item ``a = i_k`` is drawn uniformly and ``b = j_k = (a + U{1..N-1}) mod N`` (never ``a``); every item has
    a true score ``s ~ N(0, 1)`` and ``p_k = sigmoid(s_a - s_b)``. The decisions ``1[p > 0.5]`` all follow the
    order of ``s``: hard Bradley-Terry's hardest case (its fixed point set by the prior alone). What the
    memory and speed benchmarks of large pools use (``benchmarks/memory_scale.py``).

    Args:
        num_items: ``N >= 2``.
        per_item: comparisons per item (``R = per_item * N``), ``>= 1``.
        seed: NumPy random seed.

    Returns:
        ``(i, j, p, s)``: ``int32 [R]``, ``int32 [R]``, ``float32 [R]`` and the true scores ``float64 [N]``.

    Raises:
        ValueError: ``num_items < 2`` or ``per_item < 1`` (or not integers).
    """
    n = _validate.integer("num_items", num_items, low=2)
    r = _validate.integer("per_item", per_item, low=1) * n
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    s = rng.normal(size=n)
    p = 1.0 / (1.0 + np.exp(-(s[i] - s[j])))
    return i.astype(np.int32), j.astype(np.int32), p.astype(np.float32), s
