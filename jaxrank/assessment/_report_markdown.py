"""The markdown of an :class:`~jaxrank.assessment.report.Assessment`: its tables and the whole report.

A mixin of the report's dataclass, so that ``report.py`` keeps the figures and their verdicts and this
module the way they are written down (the per-scorer table, the three correlations, the per-context
table, the ranking without human scores).
"""

from __future__ import annotations

import numpy as np

from jaxrank import metrics
from jaxrank.assessment._report_stats import RANK_SCORE_PRIOR


class ReportMarkdown:
    """The tables and the markdown report; mixed into ``Assessment``, whose fields they read."""

    def table(self) -> str:
        """A markdown table: scorer, mean Spearman, interval, contexts used, verdict."""
        pct = f"{self.level:.0%}"
        out = [f"| scorer | mean Spearman | {pct} interval (contexts) | contexts | verdict |",
               "|---|---:|---:|---:|---|"]
        for m in self.methods:
            ok = np.isfinite(self.spearman[m])
            lo, hi = self.interval[m]
            ci = f"[{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) else "—"
            mean = f"{self.mean[m]:+.3f}" if np.isfinite(self.mean[m]) else "—"
            out.append(f"| {m} | {mean} | {ci} | {int(ok.sum())} / {len(ok)} | {self.verdict(m)} |")
        return "\n".join(out)

    def agreement_table(self) -> str:
        """A markdown table: per scorer (and the human ceiling), Spearman, Kendall tau-b and Pearson per context
        (mean and interval over contexts), and at the system level when there is one."""
        names = {"spearman": "Spearman", "kendall_tau": "Kendall", "pearson": "Pearson"}
        system = bool(self.system)

        def cell(value, interval):
            if not np.isfinite(value):
                return "—"
            lo, hi = interval
            return f"{value:+.3f}" + (f" [{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) else "")

        head = [names[m] for m in metrics.CORRELATIONS]
        if system:
            head += [f"system {names[m]}" for m in metrics.CORRELATIONS]
        out = ["| scorer | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
        for method in self.methods:
            cells = [cell(self.correlation_mean[m][method], self.correlation_interval[m][method])
                     for m in metrics.CORRELATIONS]
            if system:
                cells += [cell(self.system[m][method], self.system_interval[m][method]) for m in metrics.CORRELATIONS]
            out.append(f"| {method} | " + " | ".join(cells) + " |")
        h = self.ceiling
        if h is not None:
            cells = [cell(h.mean[m], h.interval[m]) for m in metrics.CORRELATIONS]
            if system:
                cells += [cell(h.system.get(m, float("nan")), h.system_interval.get(m, (np.nan, np.nan)))
                          for m in metrics.CORRELATIONS]
            out.append("| human ceiling (one rater vs the others) | " + " | ".join(cells) + " |")
        return "\n".join(out)

    def agreement_lines(self) -> list[str]:
        """The report's paragraph on the three correlations, the system level and the human ceiling."""
        if not self.correlations:
            return []
        pct = f"{self.level:.0%}"
        system = (f" At the system level ({self.num_systems} systems): the correlation over systems of each "
                  "system's mean score with its mean human score, its percentile bootstrap interval from resampling "
                  "contexts (a correlation of means over resampled contexts is biased low: the interval can lie "
                  "below the estimate)." if self.system else "")
        lines = [f"**Agreement as the field reports it.** Spearman, Kendall tau-b and Pearson per context, mean "
                 f"over contexts, {pct} percentile bootstrap interval over contexts.{system}", "",
                 self.agreement_table(), ""]
        h = self.ceiling
        if h is not None:
            lines += [f"Human ceiling: {h.dataset} {h.aspect}, one rater against the mean of the others "
                      f"({h.raters}), on the same {_count(len(h.contexts), 'context')} and candidates, averaged "
                      f"over raters (defined in {h.defined()}); against one rater fewer than the judge's gold, "
                      "so a conservative ceiling.", ""]
        if self.ceiling_note:
            lines += [f"Human ceiling: {self.ceiling_note}.", ""]
        if self.system_note:
            lines += [f"System level: {self.system_note}.", ""]
        return lines

    def context_table(self, extra: dict[str, list[str]] | None = None) -> str:
        """Per-context markdown table: ``P(A)``, accuracy, Spearman per scorer (where undefined: ``const``, or
        ``const (humans)``, ``no humans`` or ``one human`` for the human scores)."""
        extra = extra or {}
        cols = list(extra) + list(self.methods)
        out = ["| context | items | comparisons | P(A) | accuracy | " + " | ".join(cols) + " |",
               "|---|---:|---:|---:|---:|" + "---:|" * len(cols)]
        for r, ctx in enumerate(self.contexts):
            cells = [extra[c][r] for c in extra]
            for m in self.methods:
                v = self.spearman[m][r]
                cells.append(f"{v:+.3f}" if np.isfinite(v) else
                             self._human_gap(r) if self.constant_humans[r] else "const")
            acc = f"{self.accuracy[r]:.2f}" if np.isfinite(self.accuracy[r]) else "—"
            out.append(f"| {ctx} | {int(self.num_items[r])} | {int(self.num_comparisons[r])} | "
                       f"{self.positional_bias[r]:.2f} | {acc} | " + " | ".join(cells) + " |")
        return "\n".join(out)

    def _human_gap(self, r: int) -> str:
        """Why context ``r``'s human scores give no Spearman: none, one, or constant."""
        count = None if self.human_counts is None else int(self.human_counts[r])
        return "no humans" if count == 0 else "one human" if count == 1 else "const (humans)"

    def markdown(self, title: str, *, preamble: list[str] | tuple[str, ...] = (),
                 extra: dict[str, list[str]] | None = None) -> str:
        """The whole report: the judge, the scorers with intervals and verdicts, notes, per-context table.

        Without human scores: the judge, one line saying there are no agreement figures, and each
        context's ranking with intervals (:attr:`ranking`)."""
        if not self.has_humans:
            return self._ranking_markdown(title, preamble, extra)
        pct = f"{self.level:.0%}"
        lo, hi = self.accuracy_interval
        acc_ci = f" [{lo:.3f}, {hi:.3f}]" if np.isfinite(lo) else ""
        after = ""
        if self.debias != "none" and np.isfinite(self.debiased_accuracy):
            dlo, dhi = self.debiased_accuracy_interval
            after = (f"; after debiasing ({self.debias}), as the scorers read them: {self.debiased_accuracy:.3f}"
                     + (f" [{dlo:.3f}, {dhi:.3f}]" if np.isfinite(dlo) else ""))
        lines = [f"# {title}", "", *preamble,
                 f"**Judge.** {self._judge_words()} Pairwise accuracy against the humans, of the comparisons "
                 f"as judged (before any debiasing): {self.overall_accuracy:.3f}{acc_ci}{after} (0.5 = chance; "
                 "comparisons of candidates with different human scores).", "",
                 f"**Set-up.** {self._setup_words()} Spearman per context, mean over contexts, {pct} percentile "
                 "bootstrap interval over contexts.", "", self.table(), ""]
        verdict = self.verdict_line()
        if verdict is not None:
            lines += [verdict, ""]
        lines += self.agreement_lines()
        notes = self.notes()
        if notes:
            lines += ["Notes:", *[f"- {n}" for n in notes], ""]
        lines += ["Per context:", "", self.context_table(extra), ""]
        return "\n".join(lines)

    def _judge_words(self) -> str:
        cons = (f"; order consistency {self.overall_consistency:.3f} (pairs judged in both orders whose two "
                "decisions agree; 1 = consistent)" if np.isfinite(self.overall_consistency) else "")
        return (f"P(A) = {self.overall_positional_bias:.3f} (0.5 = no positional bias): "
                f"{self.bias_words()}{cons}.")

    def _setup_words(self) -> str:
        return (f"{_count(len(self.contexts), 'context')}, {_span(self.num_items)} candidates and "
                f"{_span(self.num_comparisons)} comparisons per context; debias: {self.debias}.")

    def _ranking_markdown(self, title, preamble, extra) -> str:
        pct = f"{self.level:.0%}"
        extra = extra or {}
        lines = [f"# {title}", "", *preamble, f"**Judge.** {self._judge_words()}", "",
                 "**No human scores**, so no agreement figures (Spearman, pairwise accuracy, verdict): the "
                 f"candidates are ranked with {pct} intervals.", "",
                 f"**Set-up.** {self._setup_words()} Ranking by soft Bradley-Terry (the mean of its Laplace "
                 f"posterior, under a weak prior N(0, {1 / RANK_SCORE_PRIOR:g}) on each score, so that a "
                 "consistent order of hard 0/1 answers gets finite scores); "
                 f"{pct} intervals of each score and of each rank (posterior draws; rank 1 = best). "
                 "Candidates whose intervals overlap are not clearly ordered.", ""]
        cols = list(extra)
        lines += ["| context | items | comparisons | P(A) | " + "".join(f"{c} | " for c in cols),
                  "|---|---:|---:|---:|" + "---:|" * len(cols)]
        for r, ctx in enumerate(self.contexts):
            lines.append(f"| {ctx} | {int(self.num_items[r])} | {int(self.num_comparisons[r])} | "
                         f"{self.positional_bias[r]:.2f} | " + "".join(f"{extra[c][r]} | " for c in cols))
        lines.append("")
        rk = self.ranking
        for r, ctx in enumerate(self.contexts):
            n = int(self.num_items[r])
            names = self.candidates[r] if self.candidates is not None else [str(k) for k in range(n)]
            lines += [f"## Context {ctx}", "", f"| rank | candidate | score | {pct} interval | rank {pct} interval |",
                      "|---:|---|---:|---:|---:|"]
            for k in np.argsort(-rk["score"][r, :n], kind="stable"):
                lo_r, hi_r = int(rk["rank_lower"][r, k]), int(rk["rank_upper"][r, k])
                lines.append(f"| {int(rk['rank'][r, k])} | {names[k]} | {rk['score'][r, k]:+.3f} | "
                             f"[{rk['lower'][r, k]:+.3f}, {rk['upper'][r, k]:+.3f}] | "
                             f"{lo_r if lo_r == hi_r else f'{lo_r}-{hi_r}'} |")
            lines.append("")
        return "\n".join(lines)


def _span(values) -> str:
    """``"16"`` when every value is 16, else ``"12-16"``."""
    lo, hi = int(np.min(values)), int(np.max(values))
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _count(n: int, noun: str) -> str:
    """``"1 context"``, ``"5 contexts"``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
