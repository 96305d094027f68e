"""Score judged comparisons with every scorer and compare with human labels (``jaxrank assess``).

METHODS.md §7: summary-level Spearman per context, averaged over contexts whose
human scores (and predicted scores) are not constant; the judge's positional
bias ``P(A)`` (the fraction of comparisons won by position A, llm-comparative-assessment §3.5).
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Assessment", "assess_comparisons", "DEFAULT_METHODS"]

DEFAULT_METHODS = ("win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_bradley_terry")


@dataclasses.dataclass
class Assessment:
    """Per-method agreement with human scores.

    Attributes:
        methods: scorer names.
        spearman: ``{method: [C]}`` per-context Spearman (NaN where undefined).
        mean: ``{method: float}`` mean over defined contexts.
        scores: ``{method: [C, N]}`` scores (padded items 0 / 0.5).
        positional_bias: ``[C]`` ``P(A)`` per context, and ``overall`` over all comparisons.
        contexts: context ids (row order).
        num_comparisons: ``[C]`` comparisons per context.
    """

    methods: tuple[str, ...]
    spearman: dict[str, np.ndarray]
    mean: dict[str, float]
    scores: dict[str, np.ndarray]
    positional_bias: np.ndarray
    overall_positional_bias: float
    contexts: list[str]
    num_comparisons: np.ndarray

    def table(self) -> str:
        """A markdown table: method, mean Spearman, contexts used."""
        out = ["| method | mean Spearman | contexts |", "|---|---:|---:|"]
        for m in self.methods:
            ok = np.isfinite(self.spearman[m])
            out.append(f"| {m} | {self.mean[m]:.3f} | {int(ok.sum())} / {len(ok)} |")
        return "\n".join(out)


def assess_comparisons(comparisons, labels, *, contexts=None, methods=DEFAULT_METHODS, debias="none") -> Assessment:
    """Score ``comparisons`` ``[C, R]`` with each method and correlate with ``labels`` ``[C, N]``.

    Args:
        comparisons: a padded :class:`~jaxrank.Comparisons` batch.
        labels: human scores aligned with the items (NaN for a missing score:
            that item is left out of its context's correlation).
        contexts: context ids for the report.
        methods: names of :data:`jaxrank.SCORERS`.
        debias: ``"none"``, ``"permutation"`` (average both orders) or
            ``"threshold"`` (eq. 9-10) applied before scoring.
    """
    import jaxrank as jr
    from jaxrank import metrics

    unknown = [m for m in methods if m not in jr.SCORERS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {', '.join(jr.SCORERS)}")
    c = comparisons
    labels = np.asarray(labels, np.float32)
    if labels.shape != c.item_mask.shape:
        raise ValueError(f"labels must have shape {c.item_mask.shape} (contexts x items), got {labels.shape}")
    if debias == "permutation":
        c = jr.permutation_average(c)
    elif debias == "threshold":
        c = jr.threshold_debias(c)
    elif debias != "none":
        raise ValueError(f"debias must be 'none', 'permutation' or 'threshold', got {debias!r}")
    where = np.asarray(c.item_mask) & np.isfinite(labels)
    gold = np.where(where, labels, 0.0)
    spear, mean, scores = {}, {}, {}
    for m in methods:
        s = np.asarray(jr.SCORERS[m](c))
        rho = np.asarray(metrics.spearman(s, gold, where=where))
        spear[m], scores[m] = rho, s
        mean[m] = float(np.nanmean(rho)) if np.isfinite(rho).any() else float("nan")
    pa = np.asarray(jr.positional_bias(comparisons))
    w = np.asarray(comparisons.weight)
    won = np.asarray(comparisons.p) > 0.5
    overall = float((w * won).sum() / max(w.sum(), 1e-30))
    ids = list(contexts) if contexts is not None else [str(k) for k in range(labels.shape[0])]
    return Assessment(tuple(methods), spear, mean, scores, pa, overall, ids, (w > 0).sum(-1))
