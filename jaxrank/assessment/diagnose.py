"""Does a judge read the model's answer, and is that answer any good? (``jaxrank judge --diagnose``)

On ``N`` sampled pairs of a data set, judged in both orders, :func:`diagnose_judge`
reports for one judge and template:

* the model's top next tokens at the answer position (the first pair's, and
  how often each token is the top one),
* the **label mass**: the share of the model's answer the two labels hold
  (:mod:`jaxrank.judges.reading`),
* ``P(A)``: the share of prompts answered "A" (``p > 0.5``), whatever the order,
* **order consistency**: the share of pairs whose two orders agree once the
  second is flipped (``(p_ab > 0.5) == (p_ba < 0.5)``); a pair with a tie in
  either order, or in both, counts one half (a pair tied in both orders
  prefers neither candidate: it is no consistent preference), counted as the
  report counts it (:func:`~jaxrank.assessment._report_stats.order_agreement`),
  and the pairs tied in both orders are given apart,
* **pairwise accuracy** against the human scores where they exist (both
  orders averaged, ``p = (p_ab + 1 - p_ba) / 2``, human ties left out), with its
  95% Clopper-Pearson interval,

where a judge's tie (``p = 0.5``) counts one half, as in the assessment report
(:mod:`jaxrank.assessment.report`): a judge indifferent everywhere has
``P(A) = 0.5``, never a preference for B,

and a verdict in plain words.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats

from jaxrank.assessment._report_stats import decided as _won
from jaxrank.assessment._report_stats import order_agreement
from jaxrank.assessment.run import ContextSet, prepare_judge

__all__ = ["Diagnosis", "diagnose_judge", "sample_pairs"]


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """What :func:`diagnose_judge` measured (arrays over the ``2 N`` prompts, both orders).

    Attributes:
        judge, template: the judge's name and template key.
        labels: the label continuations read (``(" A", " B")`` after a prefix).
        answer_prefix: the answer prefix in the assistant turn ("" for none).
        pairs: ``[(context id, candidate id A, candidate id B), ...]`` in the order A, B.
        p: ``[N, 2]`` ``P(A better)`` for each pair in order AB and in order BA.
        label_mass: ``[N, 2]`` the labels' share of the model's answer.
        top_tokens: per prompt (``[N][2]``) the model's top next tokens ``[(text, prob), ...]``.
        human: ``[N, 2]`` the two candidates' human scores (NaN where there are none).
        threshold: the judge's ``min_label_mass``.
    """

    judge: str
    template: str
    labels: tuple[str, str]
    answer_prefix: str
    pairs: list
    p: np.ndarray
    label_mass: np.ndarray
    top_tokens: list
    human: np.ndarray
    threshold: float

    @property
    def p_a(self) -> float:
        """Share of prompts answered "A" (``p > 0.5``; ``p = 0.5`` counts one half), both orders."""
        return float(np.mean(_won(self.p)))

    @property
    def ties(self) -> int:
        """Prompts answered neither way (``p = 0.5``)."""
        return int(np.sum(self.p == 0.5))

    @property
    def double_ties(self) -> int:
        """Pairs tied in both orders (``p = 0.5`` as AB and as BA): they prefer neither candidate."""
        return int(np.sum((self.p == 0.5).all(1)))

    @property
    def order_consistency(self) -> float:
        """Share of pairs whose two orders pick the same candidate (``p_ab > 0.5`` and ``p_ba < 0.5``, or the
        reverse), as the assessment report counts it
        (:func:`~jaxrank.assessment._report_stats.order_agreement`): a pair with a tie in either order counts
        one half, a pair tied in both orders too (it prefers neither candidate, so it is no consistent
        preference; :attr:`double_ties` counts them)."""
        return float(np.mean(order_agreement(self.p[:, 0], self.p[:, 1])))

    def accuracy(self) -> tuple[float, float, float, int]:
        """``(accuracy, low, high, n)``: agreement with the humans over ``n`` untied pairs, both orders
        averaged, with the 95% Clopper-Pearson interval (NaN without human scores). A pair averaged to
        exactly 0.5 counts one half; the interval then runs from the Clopper-Pearson low of the agreements
        rounded down to the high of the agreements rounded up."""
        h = self.human
        keep = np.isfinite(h).all(1) & (h[:, 0] != h[:, 1])
        n = int(keep.sum())
        if n == 0:
            return float("nan"), float("nan"), float("nan"), 0
        avg = (self.p[keep, 0] + 1.0 - self.p[keep, 1]) / 2.0
        won = _won(avg)
        k = float(np.sum(np.where(h[keep, 0] > h[keep, 1], won, 1.0 - won)))
        low = stats.binomtest(int(np.floor(k)), n).proportion_ci(0.95, method="exact").low
        high = stats.binomtest(int(np.ceil(k)), n).proportion_ci(0.95, method="exact").high
        return k / n, float(low), float(high), n

    def verdict(self) -> str:
        """The diagnosis in plain words."""
        mass = float(np.median(self.label_mass))
        if mass < self.threshold:
            return (f"the labels hold {mass:.1%} of the model's answer: it is not reading what the model says; "
                    "set an answer prefix (--answer-prefix auto for a local judge, or the words the model writes before "
                    "the label, e.g. --answer-prefix Summary), other labels, or use another model")
        if self.ties == self.p.size:
            return (f"reads the answer (labels hold {mass:.1%}), but gives p = 0.5 in every prompt: it prefers "
                    "neither candidate, so it cannot rank them; use other labels, another template or model")
        if self.p_a >= 0.9 or self.p_a <= 0.1:
            side = "A" if self.p_a >= 0.5 else "B"
            return (f"reads the answer (labels hold {mass:.1%}), but answers {side} in "
                    f"{max(self.p_a, 1 - self.p_a):.0%} of prompts whatever the order: position decides, not the "
                    "texts; average both orders (the default) or use another model")
        acc, lo, hi, n = self.accuracy()
        if n and lo <= 0.5:
            return (f"reads the answer (labels hold {mass:.1%}); its agreement with the humans, {acc:.2f} "
                    f"[{lo:.2f}, {hi:.2f}] on {n} pairs, is not above chance")
        if n:
            return (f"usable: reads the answer (labels hold {mass:.1%}) and agrees with the humans on {acc:.0%} "
                    f"[{lo:.0%}, {hi:.0%}] of {n} pairs")
        return f"usable: reads the answer (labels hold {mass:.1%}); no human scores to check agreement"

    def markdown(self, top: int = 5) -> str:
        """The report ``jaxrank judge --diagnose`` prints."""
        acc, lo, hi, n = self.accuracy()
        m = self.label_mass
        counts: dict[str, int] = {}
        for row in self.top_tokens:
            for toks in row:
                counts[toks[0][0]] = counts.get(toks[0][0], 0) + 1
        common = ", ".join(f"{t!r} ({c} of {m.size})" for t, c in sorted(counts.items(), key=lambda x: -x[1])[:top])
        first = ", ".join(f"{t!r} {q:.3f}" for t, q in self.top_tokens[0][0][:top])
        lines = [f"## Diagnosis: judge {self.judge}, template {self.template}", "",
                 f"- answer prefix: {self.answer_prefix!r}; labels read: {self.labels[0]!r} / {self.labels[1]!r}",
                 f"- pairs: {len(self.pairs)}, each in both orders ({m.size} prompts)",
                 f"- top next tokens at the answer position (first prompt): {first}",
                 f"- most common top token: {common}",
                 f"- label mass: median {np.median(m):.4f}, min {m.min():.4f}, max {m.max():.4f} "
                 f"(threshold {self.threshold:g})",
                 f"- P(A): {self.p_a:.2f} (mean p {float(self.p.mean()):.3f}; ties p = 0.5 count one half: "
                 f"{self.ties} of {self.p.size} prompts)",
                 f"- order consistency: {self.order_consistency:.2f} (a tie in either order counts one half; "
                 f"{self.double_ties} of {len(self.pairs)} pairs tied in both orders)",
                 (f"- pairwise accuracy (both orders averaged): {acc:.2f} [{lo:.2f}, {hi:.2f}] on {n} untied pairs"
                  if n else "- pairwise accuracy: no human scores"),
                 "", f"**Verdict:** {self.verdict()}"]
        return "\n".join(lines)


def sample_pairs(cs: ContextSet, num_pairs: int, *, seed: int = 0) -> list[tuple[int, int, int]]:
    """``num_pairs`` pairs ``(context position, i, j)``, ``i < j``, spread over the contexts in turn.

    Where human scores exist, pairs whose two candidates have different scores are preferred.

    Raises:
        ValueError: ``num_pairs < 1`` or no context with two candidates.
    """
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    rng = np.random.default_rng(seed)
    usable = [k for k in range(len(cs.ids)) if len(cs.candidates[k]) >= 2]
    if not usable:
        raise ValueError("no context has two candidates to compare")
    pools = {}
    for k in usable:
        n = len(cs.candidates[k])
        a, b = np.triu_indices(n, 1)
        order = rng.permutation(len(a))
        if cs.labels is not None:
            lab = np.asarray(cs.labels[k], np.float64)
            order = sorted(order, key=lambda r: lab[a[r]] == lab[b[r]])       # untied first (stable)
        pools[k] = [(k, int(a[r]), int(b[r])) for r in order]
    out: list[tuple[int, int, int]] = []
    while len(out) < num_pairs and any(pools.values()):
        for k in usable:
            if pools[k] and len(out) < num_pairs:
                out.append(pools[k].pop(0))
    return out


def diagnose_judge(judge, cs: ContextSet, *, num_pairs: int = 8, seed: int = 0, top: int = 5) -> Diagnosis:
    """Judge ``num_pairs`` sampled pairs of ``cs`` in both orders and diagnose how the judge reads the model.

    Args:
        judge: a judge whose :class:`~jaxrank.judges.Judgement` carries ``label_mass``
            and ``top_ids`` (:class:`~jaxrank.judges.PromptJudge`), or a
            :class:`~jaxrank.judges.ServerJudge` reading log-probabilities (its ``last_alternatives``).
        cs: the contexts (:func:`~jaxrank.assessment.contexts_of`).
        num_pairs: pairs to judge (:func:`sample_pairs`).
        seed: which pairs.
        top: top tokens kept per prompt.

    Raises:
        ValueError: a judge that does not report its label mass, or no pair to judge.
    """
    pairs = sample_pairs(cs, num_pairs, seed=seed)
    prepare_judge(judge, cs, [pairs[0][0]])
    by_ctx: dict[int, list[int]] = {}
    for r, (k, _, _) in enumerate(pairs):
        by_ctx.setdefault(k, []).append(r)
    n = len(pairs)
    p, mass = np.zeros((n, 2)), np.zeros((n, 2))
    tops: list = [[None, None] for _ in range(n)]
    human = np.full((n, 2), np.nan)
    tok = getattr(getattr(judge, "lm", None), "tokenizer", None)     # a server judge has none: it returns texts
    for k, rows in by_ctx.items():
        i = [pairs[r][1] for r in rows] + [pairs[r][2] for r in rows]
        j = [pairs[r][2] for r in rows] + [pairs[r][1] for r in rows]
        res = judge.compare(cs.texts[k], cs.candidates[k], i, j)
        alts = getattr(judge, "last_alternatives", None)      # a server judge: the returned alternatives
        if getattr(res, "label_mass", None) is None or (getattr(res, "top_ids", None) is None and alts is None):
            raise ValueError(f"judge {judge.name} does not report its label mass and top tokens; "
                             "--diagnose needs an LLM judge (a server judge: one returning log-probabilities)")
        m = len(rows)
        for q, r in enumerate(rows):
            for o, col in ((0, q), (1, m + q)):
                p[r, o], mass[r, o] = res.p[col], res.label_mass[col]
                tops[r][o] = ([(t, float(np.exp(lp))) for t, lp in alts[col][:top]] if res.top_ids is None else
                              [(tok.decode([int(t)]), float(pr)) for t, pr in
                               zip(res.top_ids[col][:top], res.top_probs[col][:top])])
            if cs.labels is not None:
                human[r] = cs.labels[k][pairs[r][1]], cs.labels[k][pairs[r][2]]
    ids = [(cs.ids[k], cs.candidate_ids[k][a], cs.candidate_ids[k][b]) for k, a, b in pairs]
    return Diagnosis(judge.name, judge.template_key, tuple(judge.reading.texts), judge.template.answer_prefix, ids,
                     p, mass, tops, human, float(judge.min_label_mass))
