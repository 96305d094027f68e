"""Score judged comparisons with every scorer and compare with human labels (``jaxrank assess``).

What the report measures (METHODS.md §7; llm-comparative-assessment §3.5, Table 5):

* **Spearman per context** between each scorer's scores and the human scores,
  averaged over the contexts where it is defined, with a percentile bootstrap
  interval over contexts (contexts resampled with replacement). A context where
  a scorer gives constant scores (a hard scorer when the judge chose the same
  position in every comparison), or where the humans gave constant scores or
  fewer than two of its candidates have a human score, has no Spearman: it is
  counted and named (``no human scores`` apart from ``constant``), never shown
  as a bare NaN.
* **Agreement as the field reports it**: Spearman, Kendall tau-b and Pearson per
  context (:data:`jaxrank.metrics.CORRELATIONS`), each averaged over the contexts
  where it is defined with the same bootstrap interval; and, when the data set
  names the system behind each candidate (``systems``, or looked up from a
  built-in ``dataset``: :func:`jaxrank.data.system_ids`), at the **system level**:
  the correlation over systems between each system's mean score and its mean human
  score, ``corr(m, h)`` with ``m_s = mean of the scores of system s's candidates``
  (:func:`jaxrank.metrics.system_level`), its percentile bootstrap interval from
  resampling contexts (:func:`jaxrank.data.raters.system_interval`).
* **The human ceiling** beside every scorer, for a built-in data set whose file
  keeps each rater's score (HANNA, PersonaChat, WebNLG 2020): one rater against
  the mean of the others, the same three correlations on the same contexts and
  candidates (:func:`jaxrank.data.human_ceiling`); for a file of means only
  (SummEval, TopicalChat, Newsroom, WebNLG 2017) the report says it cannot be
  computed from that file.
* **Positional bias** ``P(A)``: the weighted fraction of comparisons decided for
  position A (``p > 0.5``; ``p = 0.5`` counts one half); 0.5 means no bias.
* **Order consistency**: of the pairs judged in both orders, the fraction whose
  two decisions pick the same candidate (``p_ij > 0.5`` and ``p_ji < 0.5``, or
  the reverse); a pair with ``p = 0.5`` in either order, or in both, counts one
  half (a pair tied in both orders prefers neither candidate).
* **Pairwise accuracy** against the humans: over the comparisons whose two
  candidates have different human scores, the weighted fraction where the
  judge's decision (``p > 0.5``; ``p = 0.5`` counts one half) picks the
  candidate the humans scored higher. 0.5 is chance.
* **A verdict** in plain words from the interval: better than chance when the
  interval lies above 0, no better than chance when it covers 0, and too few
  contexts to tell below :data:`MIN_CONTEXTS` contexts. It names a best scorer
  only when the top scorer's lead over every other one is beyond chance: the
  percentile bootstrap interval of the paired difference of mean Spearman (the
  same contexts resampled for both) lies above 0. Scorers within that interval
  of the top are reported as tied, never ranked.
* **Without human scores** (every label NaN: one's own texts, ``jaxrank assess
  --data FILE``), no agreement figure exists: the report says so in one line and
  ranks the candidates of each context by the soft Bradley-Terry fit under a
  weak proper prior ``N(0, 1/0.1)`` on each score (:data:`RANK_SCORE_PRIOR`:
  finite, ordered scores even for a hard 0/1 judge on a consistent order), with
  the intervals of its Laplace posterior for every score and every rank.
* **Copies of one text** (``texts``): items of a context with equal texts get
  the mean of their scores, so they are tied in every correlation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxrank import _validate, metrics, scorer_table
from jaxrank.comparisons import stack_contexts
from jaxrank.data.raters import HumanCeiling
from jaxrank.debias import positional_bias
from jaxrank.assessment._report_markdown import ReportMarkdown
from jaxrank.assessment._report_stats import (  # noqa: F401  (label_mass_lines, MIN_CONTEXTS: public here)
    MIN_CONTEXTS, RANK_SCORE_PRIOR, _bootstrap_mean, _check_labels_and_ids, _constant, _field_agreement,
    _order_consistency, _ranking, _ratio_interval, label_mass_lines, tie_equal_texts)

__all__ = ["label_mass_lines", "Assessment", "assess_comparisons", "DEFAULT_METHODS", "MIN_CONTEXTS"]

DEFAULT_METHODS = ("win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_bradley_terry")


@dataclasses.dataclass
class Assessment(ReportMarkdown):
    """Agreement of each scorer with the human scores, and what the judge did.

    Attributes:
        methods: scorer names.
        spearman: ``{method: [C]}`` per-context Spearman (NaN where undefined;
            see ``constant_scores`` and ``constant_humans`` for why).
        mean: ``{method: float}`` mean Spearman over the contexts where it is defined.
        interval: ``{method: (low, high)}`` bootstrap interval of ``mean`` over contexts.
        scores: ``{method: [C, N]}`` scores (padded items 0 / 0.5).
        constant_scores: ``{method: [C]}`` True where the scorer's scores are constant.
        constant_humans: ``[C]`` True where the human scores are constant (or fewer than two of the
            context's candidates have one: see ``human_counts``).
        positional_bias: ``[C]`` ``P(A)`` per context.
        overall_positional_bias: ``P(A)`` over all comparisons.
        consistency: ``[C]`` order consistency per context (NaN without pairs in both orders).
        overall_consistency: order consistency over all pairs judged in both orders.
        accuracy: ``[C]`` pairwise accuracy against the humans (NaN without a
            comparison of candidates with different human scores).
        overall_accuracy: pairwise accuracy over all such comparisons.
        accuracy_interval: bootstrap interval of ``overall_accuracy`` over contexts.
            The accuracy is of the comparisons as judged, before any debiasing.
        contexts: context ids (row order).
        num_comparisons: ``[C]`` comparisons per context.
        num_items: ``[C]`` candidates per context.
        constant_judge: ``[C]`` True where the judge gave the same ``p`` to every comparison.
        debias: the debiasing applied before scoring.
        level: the intervals' coverage (default 0.95).
        num_bootstrap, seed: the bootstrap's resamples and seed (the paired
            differences of :meth:`tied` draw the same resamples as the intervals).
        has_humans: False when no item has a human score: every agreement figure
            is NaN, and ``ranking`` holds the ranking with intervals instead.
        candidates: per context, the candidate id of each item (or ``None``).
        ranking: without human scores, ``{"score", "lower", "upper", "rank",
            "rank_lower", "rank_upper"}`` ``[C, N]`` from the Laplace posterior of
            soft Bradley-Terry (rank 1 = best); ``None`` otherwise.
        debiased_accuracy, debiased_accuracy_interval: with a ``debias``
            transform, the pairwise accuracy of the transformed comparisons (what
            the scorers read) and its interval; NaN without one.
        correlations: ``{metric: {method: [C]}}`` per-context Spearman, Kendall tau-b and Pearson
            (:data:`jaxrank.metrics.CORRELATIONS`; undefined where ``spearman`` is).
        correlation_mean, correlation_interval: ``{metric: {method: ...}}`` their means over contexts and
            bootstrap intervals.
        system: ``{metric: {method: float}}``, the system-level correlations (empty without systems).
        system_interval: ``{metric: {method: (low, high)}}``, contexts resampled.
        num_systems: systems at the system level (0 without).
        system_note: why there is no system level (``None`` when there is one, or nothing to say).
        ceiling: the human ceiling on the same contexts and candidates, or ``None``.
        ceiling_note: why there is no human ceiling (``None`` when there is one, or nothing to say).
        human_counts: ``[C]`` the candidates of each context with a human score (0: no human scores
            there, not constant ones); ``None`` when not known.
    """

    methods: tuple[str, ...]
    spearman: dict[str, np.ndarray]
    mean: dict[str, float]
    interval: dict[str, tuple[float, float]]
    scores: dict[str, np.ndarray]
    constant_scores: dict[str, np.ndarray]
    constant_humans: np.ndarray
    positional_bias: np.ndarray
    overall_positional_bias: float
    consistency: np.ndarray
    overall_consistency: float
    accuracy: np.ndarray
    overall_accuracy: float
    accuracy_interval: tuple[float, float]
    contexts: list[str]
    num_comparisons: np.ndarray
    num_items: np.ndarray
    constant_judge: np.ndarray
    debias: str = "none"
    level: float = 0.95
    num_bootstrap: int = 2000
    seed: int = 0
    has_humans: bool = True
    candidates: list[list[str]] | None = None
    ranking: dict[str, np.ndarray] | None = None
    debiased_accuracy: float = float("nan")
    debiased_accuracy_interval: tuple[float, float] = (float("nan"), float("nan"))
    correlations: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    correlation_mean: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    correlation_interval: dict[str, dict[str, tuple[float, float]]] = dataclasses.field(default_factory=dict)
    system: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    system_interval: dict[str, dict[str, tuple[float, float]]] = dataclasses.field(default_factory=dict)
    num_systems: int = 0
    system_note: str | None = None
    ceiling: HumanCeiling | None = None
    ceiling_note: str | None = None
    human_counts: np.ndarray | None = None

    # ------------------------------------------------------------ plain words
    def verdict(self, method: str) -> str:
        """One sentence on ``method``'s agreement with the humans, read off its interval."""
        ok = int(np.isfinite(self.spearman[method]).sum())
        lo, hi = self.interval[method]
        pct = f"{self.level:.0%}"
        if ok < MIN_CONTEXTS or not np.isfinite(lo):
            return (f"too few contexts ({ok} with a defined Spearman; an interval needs {MIN_CONTEXTS}) "
                    "to tell from chance")
        if lo > 0:
            return f"better than chance ({pct} interval above 0)"
        if hi < 0:
            return f"worse than chance: ranks against the humans ({pct} interval below 0)"
        return f"no better than chance at this size ({pct} interval covers 0)"

    def tied(self) -> list[str]:
        """The scorers not told apart from the top one (the highest mean Spearman), the top first.

        A scorer is apart when the percentile bootstrap interval (``level``) of its paired difference from
        the top, ``mean(rho_top - rho_m)`` over the contexts where both are defined with those contexts
        resampled, lies above 0; with fewer than :data:`MIN_CONTEXTS` such contexts none is apart. One
        name: a best scorer; several: a tie. Empty when no scorer has a defined mean.
        """
        ok = [m for m in self.methods if np.isfinite(self.mean[m])]
        if not ok:
            return []
        top = max(ok, key=lambda m: self.mean[m])
        out = [top]
        for m in ok:
            if m == top:
                continue
            a, b = np.asarray(self.spearman[top], np.float64), np.asarray(self.spearman[m], np.float64)
            both = np.isfinite(a) & np.isfinite(b)
            lo, _ = _bootstrap_mean(np.where(both, a - b, np.nan), level=self.level, num=self.num_bootstrap,
                                    seed=self.seed)
            if not (np.isfinite(lo) and lo > 0):
                out.append(m)
        return out

    def verdict_line(self) -> str | None:
        """The report's verdict: the best scorer, or the scorers tied at the top, with the top's verdict."""
        tied = self.tied()
        if not tied:
            return None
        top = tied[0]
        pct = f"{self.level:.0%}"
        ok = [m for m in self.methods if np.isfinite(self.mean[m])]
        if len(self.methods) == 1:
            return (f"**Verdict.** One scorer: {top}, mean Spearman {self.mean[top]:+.3f}: {self.verdict(top)}; "
                    "no other scorer to compare it with.")
        if len(ok) == 1:
            rest = ", ".join(m for m in self.methods if m != top)
            return (f"**Verdict.** Only {top} has a defined mean Spearman ({self.mean[top]:+.3f}): "
                    f"{self.verdict(top)}; no comparison with the others ({rest}), which have none.")
        if len(tied) == 1:
            return (f"**Verdict.** Best scorer: {top}, mean Spearman {self.mean[top]:+.3f}: {self.verdict(top)}; "
                    f"ahead of every other scorer ({pct} paired bootstrap interval of each difference above 0).")
        names = [f"{m} ({self.mean[m]:+.3f})" for m in tied]
        every = "" if len(ok) == len(self.methods) else " with a defined mean Spearman"
        who = (f"all {len(tied)} scorers{every}" if len(tied) == len(ok) else
               ", ".join(names[:-1]) + " and " + names[-1])
        return (f"**Verdict.** No best scorer: {who} are tied within their intervals (the {pct} paired bootstrap "
                f"interval of each one's difference from the top, {top} at {self.mean[top]:+.3f}, covers 0, or "
                f"too few contexts to tell); the top: {self.verdict(top)}.")

    def bias_words(self) -> str:
        """The positional bias in words."""
        pa = self.overall_positional_bias
        side = "A" if pa >= 0.5 else "B"
        gap = abs(pa - 0.5)
        if gap < 0.05:
            return "little positional bias"
        strength = "extreme" if gap >= 0.35 else "strong" if gap >= 0.15 else "some"
        return f"{strength} bias towards position {side}"

    def notes(self) -> list[str]:
        """Why some Spearman values are undefined, one line per affected scorer."""
        out = []
        hum = self.constant_humans
        counts = self.human_counts if self.human_counts is not None else np.full(len(hum), 2)
        for which, words in ((hum & (counts == 0), "no human scores"),
                             (hum & (counts == 1), "a single human score"),
                             (hum & (counts >= 2), "humans gave constant scores")):
            if which.any():
                names = ", ".join(self.contexts[k] for k in np.nonzero(which)[0][:5])
                out.append(f"{words} in {int(which.sum())} of {len(hum)} contexts ({names}): no Spearman there")
        for m in self.methods:
            const = self.constant_scores[m] & ~hum
            if not const.any():
                continue
            one_sided = (self.positional_bias >= 1.0) | (self.positional_bias <= 0.0)
            if self.constant_judge[const].all():
                why = " (the judge gave the same p to every comparison there)"
            elif one_sided[const].all() and scorer_table.SCORERS[m].hard:
                why = (" (the judge chose the same position in every comparison there, so every item has the "
                       "same wins)")
            else:
                why = ""
            out.append(f"{m}: constant scores in {int(const.sum())} of {len(const)} contexts{why}: "
                       "Spearman undefined there, left out of its mean")
        return out


def assess_comparisons(comparisons, labels, *, contexts=None, methods=DEFAULT_METHODS, debias="none",
                       level: float = 0.95, num_bootstrap: int = 2000, seed: int = 0,
                       candidates=None, systems=None, dataset: str | None = None, aspect: str | None = None,
                       data_path=None, texts=None) -> Assessment:
    """Score ``comparisons`` ``[C, R]`` with each method and compare with ``labels`` ``[C, N]``.

    Args:
        comparisons: a padded :class:`~jaxrank.Comparisons` batch, or one context (``batch_shape ()``, as
            :func:`jaxrank.assessment.judge_comparisons` returns it): read as a batch of one, with ``labels`` ``[N]``
            (or ``[1, N]``), ``contexts`` one id (or a list of one) and ``candidates``, ``systems`` and
            ``texts`` one row of per-item ids (or a list of one row).
        labels: human scores aligned with the items (NaN for a missing score:
            that item is left out of its context's correlation and accuracy).
        contexts: context ids for the report.
        methods: names of :data:`jaxrank.scorer_table.SCORERS` (one name: that scorer alone).
        debias: ``"none"``, or a transform of the comparisons applied before
            scoring (:data:`jaxrank.scorer_table.TRANSFORMS`): ``"permutation"``
            (average both orders) or ``"threshold"`` (LCA eq. 9-10).
        level: coverage of the bootstrap intervals, in (0, 1).
        num_bootstrap: bootstrap resamples of the contexts.
        seed: seed of the bootstrap (and of the posterior draws of the rank intervals), an int ``>= 0``.
        candidates: per context, the candidate id of each item, for the ranking of a report
            without human scores (default: item positions), and to find each item's system and
            raters in a built-in ``dataset``.
        systems: per context, the system of each item (any hashable ids; ``None`` for an item of no
            system): the system level is reported when given, or when ``dataset`` names the systems.
        dataset: the built-in data set judged (:data:`jaxrank.data.DATASETS`), with ``aspect``: the
            systems of its candidates (:func:`jaxrank.data.system_ids`) and the human ceiling on the same
            contexts and candidates (:func:`jaxrank.data.human_ceiling`, needs ``contexts`` and
            ``candidates``), or the report's words on why there is none. Any other name (one's own
            texts) adds neither.
        data_path: the data folder of ``dataset`` (default :func:`jaxrank.data.data_dir`).
        texts: per context, the text of each item (or any key of it, e.g. a hash): items of one context
            with equal texts get the mean of their scores under every scorer before any correlation,
            so copies of one text are tied, never ordered by float noise (SummEval repeats some
            summaries). Default: no ties made.

    Without any human score (``labels`` all NaN), the agreement figures are NaN,
    ``has_humans`` is False and ``ranking`` holds each context's ranking with
    intervals (see :class:`Assessment`).

    Raises:
        ValueError: ``comparisons`` not a Comparisons of one or ``[C]`` contexts, no methods, an unknown or
            repeated method, an unknown debias, labels of the wrong shape or infinite, ``contexts``,
            ``candidates`` or ``systems`` not one entry per context (or a candidates / systems row shorter
            than the context's real items or longer than ``N``), a bad level, num_bootstrap or seed.
    """
    methods = _check_methods(methods)
    _validate.number("level", level, low=0.0, high=1.0, low_open=True, high_open=True)
    _validate.integer("num_bootstrap", num_bootstrap, low=1)
    _validate.integer("seed", seed, low=0)
    _validate.comparisons("comparisons", comparisons)
    if len(comparisons.batch_shape) > 1:
        raise ValueError(f"comparisons must be one context or a [C] batch of contexts, got batch shape "
                         f"{comparisons.batch_shape} (flatten the batch axes into one)")
    if comparisons.batch_shape == ():               # one context, as judge_comparisons returns it: a batch of one
        comparisons = stack_contexts([comparisons])
        if np.ndim(labels) == 1:
            labels = np.asarray(labels)[None]
        contexts = [contexts] if isinstance(contexts, str) else contexts
        candidates, systems, texts = (_one_row(x) for x in (candidates, systems, texts))
    c = comparisons
    with np.errstate(over="ignore"):               # beyond float32's range: refused below as infinite
        labels = np.asarray(labels, np.float32)
    if labels.shape != c.item_mask.shape:
        raise ValueError(f"labels must have shape {c.item_mask.shape} (contexts x items), got {labels.shape}")
    _check_labels_and_ids(labels, np.asarray(c.item_mask), contexts=contexts, candidates=candidates,
                          systems=systems, texts=texts)
    if debias not in ("none",) + scorer_table.TRANSFORMS:
        raise ValueError(f"debias must be 'none', 'permutation' or 'threshold', got {debias!r}")
    c = scorer_table.transform(c, debias)
    where = np.asarray(c.item_mask) & np.isfinite(labels)
    gold = np.where(where, labels, 0.0)
    human_const = _constant(gold, where)
    spear, mean, interval, scores, const = {}, {}, {}, {}, {}
    for m in methods:
        entry = scorer_table.SCORERS[m]
        s = tie_equal_texts(np.asarray(entry.load()(c, **entry.keywords())), texts)
        rho = np.asarray(metrics.spearman(s, gold, where=where), np.float64)
        const[m] = _constant(s, where)
        rho = np.where(const[m] | human_const, np.nan, rho)
        spear[m], scores[m] = rho, s
        mean[m] = float(np.nanmean(rho)) if np.isfinite(rho).any() else float("nan")
        interval[m] = _bootstrap_mean(rho, level=level, num=num_bootstrap, seed=seed)

    # what the judge did, on the comparisons as judged (before any debiasing)
    i, j = np.asarray(comparisons.i), np.asarray(comparisons.j)
    p, w = np.asarray(comparisons.p, np.float64), np.asarray(comparisons.weight, np.float64)
    active = w > 0
    pa = np.asarray(positional_bias(comparisons))
    won = (p > 0.5) + 0.5 * (p == 0.5)
    overall_pa = float((w * won).sum() / max(w.sum(), 1e-30))
    hi_ = np.take_along_axis(gold, i, -1)
    hj_ = np.take_along_axis(gold, j, -1)
    valid = np.take_along_axis(where, i, -1) & np.take_along_axis(where, j, -1)
    decided = active & valid & (hi_ != hj_)

    def agreement(p_):
        won_ = (p_ > 0.5) + 0.5 * (p_ == 0.5)
        correct = np.where(hi_ > hj_, won_, 1.0 - won_)
        return (w * correct * decided).sum(-1), (w * decided).sum(-1)

    acc_num, acc_den = agreement(p)
    deb_acc, deb_ci = float("nan"), (float("nan"), float("nan"))
    if debias != "none":                       # the transformed comparisons keep their slots and weights
        d_num, d_den = agreement(np.asarray(c.p, np.float64))
        if d_den.sum() > 0:
            deb_acc = float(d_num.sum() / d_den.sum())
            deb_ci = _ratio_interval(d_num, d_den, level=level, draws=num_bootstrap, seed=seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(acc_den > 0, acc_num / np.where(acc_den > 0, acc_den, 1.0), np.nan)
    overall_acc = float(acc_num.sum() / acc_den.sum()) if acc_den.sum() > 0 else float("nan")
    acc_ci = _ratio_interval(acc_num, acc_den, level=level, draws=num_bootstrap, seed=seed)
    cons_num, cons_den = _order_consistency(i, j, p, active)
    with np.errstate(invalid="ignore", divide="ignore"):
        consistency = np.where(cons_den > 0, cons_num / np.where(cons_den > 0, cons_den, 1), np.nan)
    overall_cons = float(cons_num.sum() / cons_den.sum()) if cons_den.sum() > 0 else float("nan")
    ids = list(contexts) if contexts is not None else [str(k) for k in range(labels.shape[0])]
    has_humans = bool(where.any())
    ranking = None if has_humans else _ranking(c, level=level, seed=seed)
    rep = Assessment(methods, spear, mean, interval, scores, const, human_const, pa, overall_pa,
                     consistency, overall_cons, accuracy, overall_acc, acc_ci, ids, active.sum(-1),
                     np.asarray(c.item_mask).sum(-1), _constant(p, active), debias, level, num_bootstrap, seed,
                     has_humans, None if candidates is None else [list(map(str, x)) for x in candidates], ranking,
                     deb_acc, deb_ci, human_counts=where.sum(-1))
    if has_humans:
        _field_agreement(rep, gold, where, human_const, contexts=contexts, candidates=candidates, systems=systems,
                         dataset=dataset, aspect=aspect, data_path=data_path)
    return rep


def _check_methods(methods) -> tuple[str, ...]:
    """``methods`` as a tuple of known, distinct scorer names (one name alone: that scorer); ValueError naming
    ``methods`` otherwise."""
    known = ", ".join(scorer_table.SCORERS)
    if isinstance(methods, str):
        methods = (methods,)
    try:
        methods = tuple(methods)
    except TypeError:
        raise ValueError(f"methods must be a scorer name or a sequence of them (known: {known}), got "
                         f"{type(methods).__name__}") from None
    if not methods:
        raise ValueError(f"methods is empty: name at least one scorer (known: {known})")
    unknown = [m for m in methods if not isinstance(m, str) or m not in scorer_table.SCORERS]
    if unknown:
        raise ValueError(f"methods: unknown {unknown}; known: {known}")
    twice = sorted({m for m in methods if methods.count(m) > 1})
    if twice:
        raise ValueError(f"methods names {', '.join(twice)} more than once")
    return methods


def _one_row(value):
    """Per-item ids of one context as a list of one row: a flat row is wrapped, a list of one row kept."""
    if value is None or isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        return value                       # refused (or passed) by the checks of a batch
    if len(value) == 1 and hasattr(value[0], "__len__") and not isinstance(value[0], (str, bytes)):
        return value
    return [value]
