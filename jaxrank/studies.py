"""The papers' studies as reusable, batched building blocks (METHODS.md §5, §7).

The scripts of ``experiments/`` run these sweeps (their glue, such as loading
a judge from a store or display names, is ``experiments/_common.py``).

* **Efficiency curves** (PoE §4.2, Figures 1 and 3): for every budget ``R`` of a
  grid, many random subsets of ``R`` comparisons per context, every scorer, the
  mean and std over subsets of the mean per-context Spearman with the humans.
  Selections are *nested* (:mod:`jaxrank.selection.random`, greedy by
  construction): the first ``R'`` slots of one selection of the largest budget
  are a selection of budget ``R'``. So each subset is selected once, and every
  budget is the same compiled problem with the weights of slots ``>= R'`` set to
  0: one compiled function per scorer evaluates a whole curve over
  ``[budgets, subsets, contexts]`` in a few large batched calls.
* **A judge as a matrix** (:class:`JudgeMatrix`): the full ``[C, N, N]`` matrix
  of a judge's probabilities with the human labels, e.g. a simulated judge on
  real human scores (:func:`simulated_judge`, :mod:`jaxrank.simulate`).
* **Judge vs human** (PoE Figures 9/10): every judged probability paired with
  the human score difference of its two candidates (:func:`judge_human_pairs`)
  and the mean probability per score difference (:func:`binned_mean`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _deprecation, _validate, metrics, scorer_table
from jaxrank.comparisons import Comparisons
from jaxrank.debias import debias_threshold
from jaxrank.scoring import win_ratio
from jaxrank.selection import gather_comparisons, greedy_comparisons, random_comparisons
from jaxrank.simulate import calibrate_judge, simulate_judge

__all__ = ["SCORERS", "JudgeMatrix", "simulated_judge", "budget_grid", "select_nested", "efficiency_curves",
           "run_study", "summarise", "judge_human_pairs", "binned_mean"]

SCORERS: dict[str, Callable[[Comparisons], jax.Array]] = {
    **{name: scorer_table.scorer(name) for name in scorer_table.SCORERS},
    # debiased variants (LCA eq. 9-10; PoE eq. 12, App. A.8-A.9)
    "win_ratio_debiased": lambda c: win_ratio(c, threshold=debias_threshold(c)),
    "poe_gaussian_debiased": scorer_table.scorer("poe_gaussian", "mean"),
    "poe_bradley_terry_debiased": scorer_table.scorer("poe_bradley_terry", "mean"),
    "poe_bradley_terry_learnt": scorer_table.scorer("poe_bradley_terry", "learn"),
    # permutation debiasing: average both orders before deciding (symmetric selections). The soft
    # scorers need no variant: on a symmetric set, average probability, PoE-g and PoE-BT (gamma = 0)
    # depend on p_ab and p_ba only through p_ab + 1 - p_ba, so they are permutation-averaged already.
    "win_ratio_permavg": scorer_table.scorer("win_ratio", "permutation"),
    "bradley_terry_permavg": scorer_table.scorer("bradley_terry", "permutation"),
    "poe_gaussian_hard_permavg": scorer_table.scorer("poe_gaussian_hard", "permutation"),
}
"""Every scorer (and debiased variant) of the experiments, by name: ``Comparisons -> [..., N]`` scores."""

class JudgeMatrix(NamedTuple):
    """A judge's probabilities for every ordered pair of every context, with the human labels.

    The input of the sweeps (formerly ``Judge``, a name that said nothing of the
    matrix and collided with the real judges of :mod:`jaxrank.judges`).

    Attributes:
        probs: ``float32 [C, N, N]``, ``probs[c, a, b] = P(a better than b)``, ``a`` in
            position A; 0.5 where not observed.
        observed: ``bool [C, N, N]``, which ordered pairs were judged (all off-diagonal
            pairs of real candidates for a simulated judge).
        labels: ``float32 [C, N]`` human scores.
        mask: ``bool [C, N]`` real candidates.
        name: a description of the judge.
    """

    probs: np.ndarray
    observed: np.ndarray
    labels: np.ndarray
    mask: np.ndarray
    name: str

    @property
    def complete(self) -> bool:
        """Whether every ordered pair of real candidates was judged in every context."""
        n = self.mask.shape[-1]
        full = self.mask[:, :, None] & self.mask[:, None, :] & ~np.eye(n, dtype=bool)
        return bool(np.array_equal(self.observed, full))


def simulated_judge(labels, mask, *, accuracy: float, p_a: float, seed: int = 0, item_noise: float = 1.5,
                    pair_noise: float = 1.0, name: str | None = None) -> JudgeMatrix:
    """A simulated judge calibrated to a pairwise accuracy and ``P(A)`` on these human labels.

    See :func:`jaxrank.simulate.calibrate_judge` (expected statistics equal the
    targets) and :func:`jaxrank.simulate.simulate_judge` (one draw, all contexts).

    Raises:
        ValueError: ``seed`` not an int; ``mask`` not of the labels' shape; bad targets or
            noises (:func:`jaxrank.simulate.calibrate_judge`).
    """
    seed = _validate.integer("seed", seed)
    labels, mask = np.asarray(labels, np.float32), np.asarray(mask, bool)
    try:
        mask = np.array(np.broadcast_to(mask, labels.shape))
    except ValueError:
        raise ValueError(f"mask must have the shape of labels {labels.shape} (or broadcast to it), "
                         f"got {mask.shape}") from None
    params = calibrate_judge(labels, mask, accuracy=accuracy, p_a=p_a, item_noise=item_noise,
                             pair_noise=pair_noise)
    sim = simulate_judge(jax.random.key(seed), labels, mask, params=params)
    n = labels.shape[-1]
    observed = mask[:, :, None] & mask[:, None, :] & ~np.eye(n, dtype=bool)
    name = name or f"simulated (accuracy {accuracy:.3f}, P(A) {p_a:.2f}, seed {seed})"
    return JudgeMatrix(np.asarray(sim.probs, np.float32), observed, labels, mask, name)


def budget_grid(num_items: int, *, step: int | None = None, extra=(), symmetric: bool = False,
                most: int | None = None) -> list[int]:
    """Budgets from ``N - 1`` to ``N(N-1)`` in steps of ``step`` (default ``N - 1``), plus ``extra``.

    Symmetric budgets are rounded up to even numbers and start at ``2(N - 1)``
    (both orders of a spanning tree). ``most`` caps the grid (e.g. ``N(N-1)/2``
    for greedy selection without repeats).

    Raises:
        ValueError: ``num_items < 2`` or ``step < 1`` (or not integers).
    """
    n = _validate.integer("num_items", num_items, low=2)
    step = n - 1 if step is None else _validate.integer("step", step, low=1)
    top = n * (n - 1) if most is None else min(most, n * (n - 1))
    least = 2 * (n - 1) if symmetric else n - 1
    grid = set(range(n - 1, top + 1, step)) | {top} | {int(r) for r in extra}
    if symmetric:
        grid = {r + r % 2 for r in grid}
    return sorted(r for r in grid if least <= r <= top)


def select_nested(judge: JudgeMatrix, *, num_subsets: int, max_budget: int, key, selection: str = "random",
                  symmetric: bool = False) -> Comparisons:
    """One nested selection of ``max_budget`` comparisons per (subset, context): ``Comparisons [S, C, R]``.

    ``selection="random"`` draws from :func:`jaxrank.random_comparisons` (a random
    spanning tree first, so every prefix of ``>= N - 1`` slots is connected);
    ``"greedy"`` from :func:`jaxrank.greedy_comparisons` (a random chain per subset,
    then D-optimal picks). For an incomplete store (not every pair judged) only
    ``"random"`` applies: a uniformly random order of the judged comparisons.
    Probabilities come from ``judge.probs`` (:func:`jaxrank.gather_comparisons`).
    """
    C, n = judge.mask.shape
    keys = jax.random.split(key, num_subsets * C).reshape(num_subsets, C)
    mask = jnp.asarray(judge.mask)
    if not judge.complete:
        if selection != "random" or symmetric:
            raise ValueError("an incomplete judge (not every ordered pair judged) supports only random, "
                             "non-symmetric selection")
        i, j = _observed_order(keys, jnp.asarray(judge.observed), max_budget)
    elif selection == "random":
        i, j = random_comparisons(keys, n, max_budget, symmetric=symmetric, item_mask=mask)
    elif selection == "greedy":
        i, j = greedy_comparisons(keys, n, max_budget, symmetric=symmetric, item_mask=mask)
    else:
        raise ValueError(f"selection must be 'random' or 'greedy', got {selection!r}")
    return gather_comparisons(jnp.asarray(judge.probs), i, j, item_mask=mask)


@functools.partial(jax.jit, static_argnames=("budget",))
def _observed_order(keys, observed, budget):
    def one(key, obs):
        n = obs.shape[-1]
        prio = jnp.where(obs.reshape(-1), jax.random.uniform(key, (n * n,)), -1.0)
        top, idx = jax.lax.top_k(prio, budget)
        a, b = (idx // n).astype(jnp.int32), (idx % n).astype(jnp.int32)
        return a, jnp.where(top >= 0, b, a)           # unobserved slots: i == j (weight 0)
    return jax.vmap(jax.vmap(one, (0, 0)), (0, None))(keys, observed)


MAX_BUDGETS_PER_CALL = 8
"""Budgets per batched call in :func:`efficiency_curves`."""


@functools.partial(jax.jit, static_argnames=("scorer", "correlations"))
def _curve_chunk(sel: Comparisons, labels, mask, budgets, scorer: str, correlations=("spearman",)):
    """Mean per-context correlations ``[m, b, s]`` of ``sel [s, C, R]`` cut to each of ``budgets [b]``
    (one row per name of ``correlations``, :data:`jaxrank.metrics.CORRELATIONS`; the scores are computed once)."""
    shape = budgets.shape + sel.i.shape
    live = (jnp.arange(sel.num_comparisons) < budgets[:, None]).astype(sel.weight.dtype)
    bc = lambda x, tail: jnp.broadcast_to(x, budgets.shape + x.shape[:-1] + tail)
    c = Comparisons(i=bc(sel.i, shape[-1:]), j=bc(sel.j, shape[-1:]), p=bc(sel.p, shape[-1:]),
                    weight=sel.weight[None] * live[:, None, None, :],
                    item_mask=bc(sel.item_mask, (sel.num_items,)), num_items=sel.num_items)
    scores = SCORERS[scorer](c)
    gold, where = jnp.broadcast_to(labels, scores.shape), jnp.broadcast_to(mask, scores.shape)
    return jnp.stack([metrics.context_mean(metrics.CORRELATIONS[name](scores, gold, where=where), axis=-1)
                      for name in correlations])


def efficiency_curves(sel: Comparisons, labels, mask, budgets, scorers, *, chunk: int = 40_000,
                      progress: Callable[[str], None] | None = None, correlations=None) -> dict:
    """Mean per-context Spearman (or Kendall tau-b, Pearson) of every scorer at every budget, for every subset.

    Args:
        sel: a nested selection ``[S, C, R]`` (:func:`select_nested`).
        labels, mask: human scores ``[C, N]`` and real candidates.
        budgets: budgets ``<= R``; budget ``r`` keeps the first ``r`` slots.
        scorers: names in :data:`SCORERS`.
        chunk: about how many (budget, subset, context) problems one call solves
            (at most :data:`MAX_BUDGETS_PER_CALL` budgets). Every call has the same
            shape, whatever the number of budgets (the last chunk is padded), so
            each scorer compiles once for all studies of one ``[S, C, R]`` shape.
        progress: optional callback taking a message per scorer.
        correlations: ``None`` (Spearman only, the output below) or names in
            :data:`jaxrank.metrics.CORRELATIONS` (``"spearman"``, ``"kendall_tau"``,
            ``"pearson"``; METHODS.md §7), all from the same scores.

    Returns:
        ``{scorer: float64 [len(budgets), S]}``, the context-mean Spearman per subset
        (NaN contexts skipped, METHODS.md §7); with ``correlations``,
        ``{correlation: {scorer: float64 [len(budgets), S]}}``.

    Raises:
        ValueError: a budget outside ``[1, R]``, an unknown scorer or correlation.
    """
    S, C, R = sel.i.shape
    budgets = np.asarray(budgets, np.int32)
    if budgets.ndim != 1 or budgets.min() < 1 or budgets.max() > R:
        raise ValueError(f"budgets must lie in [1, {R}], got {budgets.tolist()}")
    names = ("spearman",) if correlations is None else tuple(correlations)
    bad = [m for m in names if m not in metrics.CORRELATIONS]
    if bad or not names:
        raise ValueError(f"unknown correlation(s) {bad}; choose from {', '.join(metrics.CORRELATIONS)}")
    s_chunk = min(S, max(1, chunk // C))
    b_chunk = min(MAX_BUDGETS_PER_CALL, max(1, chunk // (s_chunk * C)))   # not len(budgets): shapes stay fixed
    nb, ns = math.ceil(len(budgets) / b_chunk), math.ceil(S / s_chunk)
    bpad = np.concatenate([budgets, np.full(nb * b_chunk - len(budgets), budgets[-1], np.int32)])
    spad = np.concatenate([np.arange(S), np.zeros(ns * s_chunk - S, int)])
    labels, mask = jnp.asarray(labels, jnp.float32), jnp.asarray(mask, bool)
    out = {}
    for name in scorers:
        if name not in SCORERS:
            raise ValueError(f"unknown scorer {name!r}; choose from {', '.join(SCORERS)}")
        res = np.empty((len(names), len(bpad), len(spad)))
        for a in range(ns):
            part = jax.tree.map(lambda x: x[spad[a * s_chunk:(a + 1) * s_chunk]], sel)
            for b in range(nb):
                bs = jnp.asarray(bpad[b * b_chunk:(b + 1) * b_chunk])
                res[:, b * b_chunk:(b + 1) * b_chunk, a * s_chunk:(a + 1) * s_chunk] = np.asarray(
                    _curve_chunk(part, labels, mask, bs, name, names))
        out[name] = res[:, :len(budgets), :S]
        if progress:
            progress(name)
    if correlations is None:
        return {name: v[0] for name, v in out.items()}
    return {m: {name: v[k] for name, v in out.items()} for k, m in enumerate(names)}


def run_study(judge: JudgeMatrix, *, scorers, budgets, num_subsets: int, seed: int = 0, selection: str = "random",
              symmetric: bool = False, chunk: int = 40_000, progress=None, **fields) -> tuple[list[dict], dict]:
    """One efficiency study: select, score every budget, summarise.

    The selection has the full ``N(N-1)`` slots whatever the scheme (greedy without
    repeats selects ``N(N-1)/2``; the rest are weight-0 padding), so every study of
    the same ``(subsets, contexts, N)`` reuses each scorer's compiled function. The
    key depends on ``seed``, ``selection`` and ``symmetric`` only: two judges on the
    same labels see the same subsets (common random numbers).

    Args:
        judge: the judge and labels.
        scorers: names in :data:`SCORERS`.
        budgets: requested budgets; those above the scheme's maximum are dropped.
        num_subsets: random subsets (selections) per budget and context.
        seed, selection, symmetric: see :func:`select_nested`.
        chunk, progress: see :func:`efficiency_curves`.
        **fields: copied into every row (e.g. ``aspect=``, ``judge=``).

    Returns:
        ``(rows, curves)``: :func:`summarise` rows (with ``selection`` and
        ``symmetric``), and ``{scorer: [budgets, subsets]}`` for the budgets kept.

    Raises:
        ValueError: ``num_subsets < 1``; no budget in ``budgets`` at or below the
            scheme's maximum (named in the message); see :func:`efficiency_curves`.
    """
    num_subsets = _validate.integer("num_subsets", num_subsets, low=1)
    n = judge.mask.shape[-1]
    full = n * (n - 1) if judge.complete else int(judge.observed.sum((1, 2)).max())
    most = n * (n - 1) // 2 if (selection == "greedy" and not symmetric) else full
    asked = [int(r) for r in budgets]
    budgets = [r for r in asked if r <= most]
    if not budgets:
        raise ValueError(f"budgets must hold at least one budget <= {most} (the maximum of selection="
                         f"{selection!r}, symmetric={bool(symmetric)} for N={n}); got {asked}")
    key = jax.random.fold_in(jax.random.key(seed), 2 * (selection == "greedy") + bool(symmetric))
    sel = select_nested(judge, num_subsets=num_subsets, max_budget=most, key=key, selection=selection,
                        symmetric=symmetric)
    if most < full:
        pad = lambda x, v: jnp.concatenate([x, jnp.full(x.shape[:-1] + (full - most,), v, x.dtype)], -1)
        sel = dataclasses.replace(sel, i=pad(sel.i, 0), j=pad(sel.j, 0), p=pad(sel.p, 0.5), weight=pad(sel.weight, 0))
    curves = efficiency_curves(sel, judge.labels, judge.mask, budgets, scorers, chunk=chunk, progress=progress)
    return summarise(curves, budgets, selection=selection, symmetric=bool(symmetric), **fields), curves


def summarise(curves: dict[str, np.ndarray], budgets, **fields) -> list[dict]:
    """Rows ``{**fields, scorer, budget, mean, std, subsets}`` (mean and std over subsets)."""
    rows = []
    for name, v in curves.items():
        for k, r in enumerate(budgets):
            x = v[k][~np.isnan(v[k])]
            rows.append(dict(fields, scorer=name, budget=int(r), mean=float(x.mean()) if len(x) else math.nan,
                             std=float(x.std()) if len(x) else math.nan, subsets=int(len(x))))
    return rows


def judge_human_pairs(judge: JudgeMatrix) -> tuple[np.ndarray, np.ndarray]:
    """Every judged ordered pair's probability ``p`` and human score difference ``h_A - h_B`` (flat arrays)."""
    dh = judge.labels[:, :, None] - judge.labels[:, None, :]
    return judge.probs[judge.observed].astype(np.float64), dh[judge.observed].astype(np.float64)


def binned_mean(dh, p, *, max_levels: int = 41, num_bins: int = 20) -> list[dict]:
    """Mean judge probability per human score difference (PoE Figures 9/10).

    Score differences take few distinct values on the papers' data sets (averages
    of a few Likert ratings): with at most ``max_levels`` distinct values (to 1e-6)
    each is its own bin, otherwise ``num_bins`` equal-width bins.

    Returns:
        Rows ``{dh, count, mean_p, std_p, frac_a}`` (``frac_a``: fraction with ``p > 0.5``).
    """
    dh, p = np.asarray(dh, np.float64), np.asarray(p, np.float64)
    levels = np.unique(np.round(dh, 6))
    if len(levels) <= max_levels:
        idx = np.searchsorted(levels, np.round(dh, 6))
        centres = levels
    else:
        edges = np.linspace(dh.min(), dh.max(), num_bins + 1)
        idx = np.clip(np.searchsorted(edges, dh, side="right") - 1, 0, num_bins - 1)
        centres = 0.5 * (edges[1:] + edges[:-1])
    rows = []
    for k, c in enumerate(centres):
        x = p[idx == k]
        if len(x):
            rows.append(dict(dh=float(c), count=int(len(x)), mean_p=float(x.mean()), std_p=float(x.std()),
                             frac_a=float((x > 0.5).mean())))
    return rows


_MOVED_TO_SCRIPTS = ("LABELS", "load_judge", "store_judge")


def __getattr__(name):
    if name == "Judge":                                  # renamed: deprecated for one release
        return _deprecation.renamed(__name__, "Judge", "JudgeMatrix")
    if name in _MOVED_TO_SCRIPTS:
        raise AttributeError(f"{__name__}.{name} moved out of the package to experiments/_common.py "
                             "(the experiment scripts' glue)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
