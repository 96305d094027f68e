"""The statistics behind :mod:`jaxrank.assessment.report` (private): bootstrap intervals over contexts, the
field's agreement per context and per system with the human ceiling, order consistency (:func:`order_agreement`,
shared with ``judge --diagnose``), the label-mass
paragraph, the Laplace ranking of a report without human scores (the equations are in report's docstring), and
the checks of a report's labels and per-context ids."""

from __future__ import annotations

import jax
import numpy as np

from jaxrank import metrics
from jaxrank.data import ASPECTS
from jaxrank.data.raters import MEANS_ONLY, NO_SYSTEMS, human_ceiling, system_ids, system_interval
from jaxrank.uncertainty import laplace_bradley_terry, rank_intervals, score_intervals


def tie_equal_texts(scores: np.ndarray, texts) -> np.ndarray:
    """``scores [C, N]`` with the items of one context that have equal ``texts`` (per context, one key per
    item: its text or a hash of it; ``None`` for none) given the mean of their scores, so that two copies of
    one text are tied, not ordered by float noise. Rows without ``texts`` are left as they are."""
    if texts is None:
        return scores
    out = np.array(scores, copy=True)
    for r, row in enumerate(texts):
        if row is None:
            continue
        groups: dict = {}
        for n, t in enumerate(list(row)[: out.shape[-1]]):
            if t is not None:
                groups.setdefault(t, []).append(n)
        for items in groups.values():
            if len(items) > 1:
                out[r, items] = out[r, items].mean()
    return out


def _constant(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``[C]`` True where the valid entries of a row are all equal (or fewer than 2 are valid)."""
    big = np.where(where, values, -np.inf).max(-1)
    small = np.where(where, values, np.inf).min(-1)
    spread = np.where(where.sum(-1) >= 2, big - small, 0.0)
    return spread <= 1e-6 * (1.0 + np.abs(np.where(np.isfinite(big), big, 0.0)))


MIN_CONTEXTS = 5
"""Fewest contexts (with a defined value) for a bootstrap interval: below it the interval is NaN."""


def _bootstrap_mean(values: np.ndarray, *, level: float, num: int, seed: int) -> tuple[float, float]:
    """Percentile interval of the mean of the finite entries of ``values`` under resampling of entries."""
    ok = np.asarray(values, np.float64)
    ok = ok[np.isfinite(ok)]
    if ok.size < MIN_CONTEXTS:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = ok[rng.integers(0, ok.size, size=(num, ok.size))].mean(-1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def _ratio_interval(num: np.ndarray, den: np.ndarray, *, level: float, draws: int, seed: int) -> tuple[float, float]:
    """Percentile interval of ``sum(num) / sum(den)`` under resampling of contexts."""
    keep = den > 0
    num, den = np.asarray(num, np.float64)[keep], np.asarray(den, np.float64)[keep]
    if num.size < MIN_CONTEXTS:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, num.size, size=(draws, num.size))
    ratio = num[pick].sum(-1) / den[pick].sum(-1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(ratio, [tail, 100 - tail])
    return float(lo), float(hi)


def label_mass_lines(records, *, threshold: float = 0.5) -> list[str]:
    """The report's paragraph on how much of the model's answer the labels hold, from store records.

    Args:
        records: the judgements reported (dicts with ``label_mass`` where the judge measured it).
        threshold: the judge's ``min_label_mass``.

    Returns:
        Markdown lines (empty when no record carries a label mass: a similarity judge, an old store).
    """
    mass = np.array([float(r["label_mass"]) for r in records if r.get("label_mass") is not None])
    if mass.size == 0:
        return []
    missing = len(records) - mass.size
    q = np.quantile(mass, [0.0, 0.05, 0.5, 0.95, 1.0])
    low = float(np.mean(mass < threshold))
    verdict = ("the judge reads the model's answer" if q[2] >= threshold else
               "**the labels hold little of the model's answer: its p compares answers the model hardly gives** "
               "(`jaxrank judge --diagnose` shows what it answers)")
    return [f"**Label mass.** The labels' share of the model's answer over {mass.size} judgements: median "
            f"{q[2]:.3f}, 5-95% {q[1]:.3f}-{q[3]:.3f}, min {q[0]:.3f}, max {q[4]:.3f}; {low:.1%} below "
            f"{threshold:g}: {verdict}." + (f" ({missing} judgements without a recorded mass.)" if missing else ""),
            ""]


def _field_agreement(rep, gold, where, human_const, *, contexts, candidates, systems, dataset, aspect,
                     data_path) -> None:
    """Fill ``rep``'s three correlations per context, its system level and its human ceiling."""
    level, num, seed = rep.level, rep.num_bootstrap, rep.seed
    for name, fn in metrics.CORRELATIONS.items():
        per, means, intervals = {}, {}, {}
        for m in rep.methods:
            r = rep.spearman[m] if name == "spearman" else np.asarray(fn(rep.scores[m], gold, where=where),
                                                                      np.float64)
            r = np.where(rep.constant_scores[m] | human_const, np.nan, r)
            per[m] = r
            means[m] = float(np.nanmean(r)) if np.isfinite(r).any() else float("nan")
            intervals[m] = _bootstrap_mean(r, level=level, num=num, seed=seed)
        rep.correlations[name], rep.correlation_mean[name], rep.correlation_interval[name] = per, means, intervals
    builtin = dataset in ASPECTS
    if systems is None and builtin and candidates is not None and contexts is not None:
        if dataset in NO_SYSTEMS:
            rep.system_note = f"not computable from this file: {NO_SYSTEMS[dataset]}"
        else:
            try:
                known = system_ids(dataset, path=data_path)
            except (OSError, ValueError) as e:
                rep.system_note = f"the systems could not be read ({e})"
            else:
                systems = [[known.get((str(ctx), str(cid))) for cid in cands]
                           for ctx, cands in zip(contexts, candidates)]
    if systems is not None:
        _system_level(rep, gold, where, systems)
    if not builtin or aspect is None:
        return
    if dataset in MEANS_ONLY:
        rep.ceiling_note = f"not computable from this file: means only ({MEANS_ONLY[dataset]})"
        return
    try:
        rep.ceiling = human_ceiling(dataset, aspect, path=data_path, contexts=contexts,
                                    candidates=None if candidates is None else [list(map(str, x)) for x in candidates],
                                    level=level, num_bootstrap=num, seed=seed)
    except (OSError, ValueError) as e:
        rep.ceiling_note = f"not computed ({e})"


def _system_level(rep, gold, where, systems) -> None:
    """``rep``'s system-level correlations: per-system mean scores against per-system mean human scores."""
    code: dict = {}
    sid = np.full(gold.shape, -1)
    for r, row in enumerate(systems):
        for n, s in enumerate(list(row)[: gold.shape[1]]):
            if s is not None:
                sid[r, n] = code.setdefault(s, len(code))
    use = where & (sid >= 0)
    rep.num_systems = len({sid[r, n] for r, n in zip(*np.nonzero(use))})
    if rep.num_systems < 2:
        rep.system_note = f"{rep.num_systems} system among the judged candidates: no system-level correlation"
        return
    for name in metrics.CORRELATIONS:
        rep.system[name], rep.system_interval[name] = {}, {}
        for m in rep.methods:
            def at(weights=None, m=m, name=name):
                return metrics.system_level(rep.scores[m], gold, sid, where=use, weights=weights, names=(name,))[name]

            rep.system[name][m] = float(at())
            rep.system_interval[name][m] = system_interval(at, gold.shape[0], level=rep.level,
                                                           num=rep.num_bootstrap, seed=rep.seed)


RANK_DRAWS = 2000
"""Posterior draws behind the rank intervals of a report without human scores."""

RANK_SCORE_PRIOR = 0.1
"""Precision ``lambda`` of the weak proper prior ``N(0, 1/lambda)`` on each score (standard deviation about 3.2
on the logit scale) behind the ranking of a report without human scores: without it a judge answering hard
0/1 on a consistent order has no finite maximum (scores run off to +-inf, intervals span hundreds); with it
the scores stay finite and ordered, and with soft or plentiful judgements it hardly moves them."""


def _ranking(c, *, level: float, seed: int) -> dict[str, np.ndarray]:
    """Soft Bradley-Terry scores of ``c`` under the prior :data:`RANK_SCORE_PRIOR`, with the intervals of
    their Laplace posterior for every score and every rank (:func:`jaxrank.uncertainty.score_intervals`,
    :func:`jaxrank.uncertainty.rank_intervals`)."""
    post = laplace_bradley_terry(c, score_prior=RANK_SCORE_PRIOR)
    lower, upper = score_intervals(post, level=level)
    ranks = rank_intervals(post, key=jax.random.key(seed), num_samples=RANK_DRAWS, level=level, where=c.item_mask)
    return {"score": np.asarray(post.mean), "lower": np.asarray(lower), "upper": np.asarray(upper),
            "rank": np.asarray(ranks.rank), "rank_lower": np.asarray(ranks.lower),
            "rank_upper": np.asarray(ranks.upper)}


def decided(p) -> np.ndarray:
    """1 where ``p > 0.5``, 0.5 where ``p = 0.5``, 0 below: a decision for position A, a tie counted one half."""
    p = np.asarray(p, np.float64)
    return (p > 0.5) + 0.5 * (p == 0.5)


def order_agreement(p_ab, p_ba) -> np.ndarray:
    """How far a pair's two orders pick the same candidate: 1 when they do, 0 when each order picks the one in
    position A (or each the one in B), one half when either order is a tie (``p = 0.5``), both ties included.

    It is the chance that the two decisions agree when each tie is settled by a fair coin,
    ``w_ab (1 - w_ba) + (1 - w_ab) w_ba`` with ``w`` = :func:`decided`: a pair tied in both orders prefers
    neither candidate, so it is no consistent preference and counts one half, as a pair with one tie does
    (a judge indifferent everywhere is half consistent, as it is half for position A). Shared by the report
    and ``jaxrank judge --diagnose``.
    """
    w_ab, w_ba = decided(p_ab), decided(p_ba)
    return w_ab * (1.0 - w_ba) + (1.0 - w_ab) * w_ba


def _order_consistency(i, j, p, active) -> tuple[np.ndarray, np.ndarray]:
    """Per context, (consistent pairs, pairs judged in both orders), on the first judgement of each order; a
    pair counts :func:`order_agreement` (one half where either order is a tie)."""
    num = np.zeros(i.shape[0])
    den = np.zeros(i.shape[0])
    for r in range(i.shape[0]):
        first: dict[tuple[int, int], float] = {}
        for a, b, q in zip(i[r][active[r]].tolist(), j[r][active[r]].tolist(), p[r][active[r]].tolist()):
            first.setdefault((a, b), q)
        for (a, b), q in first.items():
            if a < b and (b, a) in first:
                den[r] += 1
                num[r] += float(order_agreement(q, first[(b, a)]))
    return num, den


def _check_labels_and_ids(labels: np.ndarray, mask: np.ndarray, *, contexts, candidates, systems,
                          texts=None) -> None:
    """``labels`` finite or NaN (missing); ``contexts``, ``candidates``, ``systems`` and ``texts`` one entry per
    context (``C``), ``candidates``, ``systems`` and ``texts`` at least one id per real item and at most ``N``.
    ValueError naming the argument otherwise."""
    bad = np.isinf(labels)
    if bad.any():
        k = tuple(int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"labels must be finite human scores or NaN (missing); got {labels[k]} at {k} (a value "
                         "beyond float32's range reads as infinite)")
    num_c = mask.shape[0] if mask.ndim > 1 else 1
    real = mask.reshape(num_c, -1).sum(-1)
    n = mask.shape[-1]
    for name, value in (("contexts", contexts), ("candidates", candidates), ("systems", systems), ("texts", texts)):
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            raise ValueError(f"{name} must be a sequence with one entry per context ({num_c}), got "
                             f"{type(value).__name__}")
        if len(value) != num_c:
            raise ValueError(f"{name} has {len(value)} entries but the comparisons hold {num_c} context(s) "
                             f"(rows); give one per context, in row order")
        if name == "contexts":
            continue
        for r, row in enumerate(value):
            if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
                raise ValueError(f"{name}[{r}] must be a sequence of ids, one per item, got {type(row).__name__}")
            if not real[r] <= len(row) <= n:
                raise ValueError(f"{name}[{r}] has {len(row)} ids; context {r} has {int(real[r])} real item(s) "
                                 f"of {n} (give one id per item, at least the real ones)")
