"""The human ceiling: how well one rater agrees with the mean of the others (issue 32).

For every data set whose file keeps each rater's score (HANNA, PersonaChat USR, WebNLG 2020) and every
aspect, :func:`jaxrank.data.human_ceiling`: per context, Spearman, Kendall tau-b and Pearson between one
rater's scores of the candidates and the mean of the other raters' scores, averaged over raters, then over
contexts, with a 95 % percentile bootstrap interval over contexts; and at the system level (per-system means
of one rater against those of the others; percentile interval, contexts resampled). For HANNA, beside it,
the five stored LLM raters of the HANNA release (:func:`jaxrank.data.load_llm_ratings`, the mean of their 4
prompt variants) against the mean of all raters: the judges the ceiling is for. The data sets whose files
hold means only are listed with the reason, as are those whose files name no systems (SummEval: the mean of
its 3 experts per summary, and a ``summary_id`` that is a position, not a system: neither its per-expert
ceiling nor its system level can be computed from the file).

Outputs: ``experiments/results/human_ceiling.{md,csv}`` (``_smoke`` with ``--smoke``).

Usage: ``python experiments/human_ceiling.py [--smoke] [--boot 2000]``
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxrank import metrics  # noqa: E402
from jaxrank.data import (ASPECTS, LLM_JUDGES, MEANS_ONLY, NO_SYSTEMS, PER_RATER, human_ceiling,  # noqa: E402
                          load_llm_ratings, match_systems)
from jaxrank.data.raters import system_interval  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NAMES = {"spearman": "Spearman", "kendall_tau": "Kendall", "pearson": "Pearson"}


def _cell(value: float, interval) -> str:
    if not np.isfinite(value):
        return "—"
    lo, hi = interval
    return f"{value:+.3f}" + (f" [{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) else "")


def _bootstrap(values: np.ndarray, *, num: int, seed: int = 0) -> tuple[float, float]:
    from scipy import stats

    ok = values[np.isfinite(values)]
    res = stats.bootstrap((ok,), np.mean, n_resamples=num, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


UNITS = int(np.lcm.reduce(np.arange(1, 13)))
"""The common denominator of :func:`exact_mean`: every fraction with a denominator up to 12 is a whole number of
``1 / UNITS``."""


def exact_mean(values, axis: int = -1) -> np.ndarray:
    """The mean over ``axis`` with ties kept: equal true means give equal floats, so ranks do not split them.

    HANNA's stored LLM ratings are thirds, sixths, ... held as float32 (:func:`jaxrank.data.load_llm_ratings`),
    and a float mean of them splits exact ties (``7/3 + 2/3`` and ``3/2 + 3/2`` differ in the last bits), which
    changes Spearman. Each value is read as a whole number of ``1 / UNITS`` (every fraction with a denominator
    up to 12), summed exactly and divided once. Values that are no such fraction (further than ``1e-6`` times
    ``max(1, |value|)`` from one, float32's rounding) are averaged in float64 as they are.
    """
    x = np.asarray(values, np.float64)
    units = np.round(x * UNITS)
    if not np.all(np.abs(x * UNITS - units) <= 1e-6 * UNITS * np.maximum(1.0, np.abs(x))):   # float32's error
        return x.mean(axis)
    return units.sum(axis) / (UNITS * x.shape[axis])


def llm_rows(aspect: str, *, boot: int, systems) -> list[dict]:
    """HANNA's stored LLM raters (mean of the 4 prompt variants, exact: ``LLMRatings.mean_rating``) against the
    mean human score."""
    rows = []
    names = sorted({s for row in systems for s in row})
    sid = np.array([[names.index(s) for s in row] for row in systems])
    for judge in LLM_JUDGES:
        r = load_llm_ratings(judge, aspect, systems=systems)
        pred = r.mean_rating()      # exact: equal means tie (LLMRatings.mean_rating)
        row = {"dataset": "hanna", "aspect": aspect, "who": judge, "contexts": len(r.context_ids),
               "systems": len(names)}
        for m, fn in metrics.CORRELATIONS.items():
            per = np.asarray(fn(pred, r.human, where=r.mask), np.float64)
            row[m] = float(np.nanmean(per))
            row[f"{m}_lo"], row[f"{m}_hi"] = _bootstrap(per, num=boot)
            at = metrics.system_level(pred, r.human, sid, where=r.mask, names=(m,))[m]
            row[f"system_{m}"] = float(at)
            row[f"system_{m}_lo"], row[f"system_{m}_hi"] = system_interval(
                lambda w, m=m: metrics.system_level(pred, r.human, sid, where=r.mask, weights=w, names=(m,))[m],
                len(r.context_ids), level=0.95, num=boot, seed=0)
        rows.append(row)
    return rows


def slot_rows(aspect: str, *, systems) -> dict:
    """HANNA: the mean per-story Spearman between two rater slots, and between one slot and each stored LLM."""
    from jaxrank.data import rater_scores

    x = rater_scores("hanna", aspect).scores
    r0 = load_llm_ratings(LLM_JUDGES[0], aspect, systems=systems)

    def rho(a, b):
        return float(np.nanmean(np.asarray(metrics.spearman(a, b, where=r0.mask), np.float64)))

    k = x.shape[-1]
    pairs = [rho(x[..., a], x[..., b]) for a in range(k) for b in range(a + 1, k)]
    llms = [rho(x[..., a], load_llm_ratings(j, aspect, systems=systems).mean_rating())
            for j in LLM_JUDGES for a in range(k)]
    return {"aspect": aspect, "slot_slot": float(np.mean(pairs)), "slot_llm": float(np.mean(llms)),
            "mean_llm": float(np.mean([rho(exact_mean(x),
                                           load_llm_ratings(j, aspect, systems=systems).mean_rating())
                                       for j in LLM_JUDGES]))}


def ceiling_row(name: str, aspect: str, *, boot: int) -> dict:
    h = human_ceiling(name, aspect, num_bootstrap=boot)
    row = {"dataset": name, "aspect": aspect, "who": "human ceiling", "contexts": h.defined(),
           "systems": h.num_systems}
    for m in metrics.CORRELATIONS:
        row[m], (row[f"{m}_lo"], row[f"{m}_hi"]) = h.mean[m], h.interval[m]
        row[f"system_{m}"] = h.system.get(m, float("nan"))
        row[f"system_{m}_lo"], row[f"system_{m}_hi"] = h.system_interval.get(m, (float("nan"), float("nan")))
    return row


def _table(rows: list[dict], *, first: str) -> list[str]:
    cols = [NAMES[m] for m in metrics.CORRELATIONS] + [f"system {NAMES[m]}" for m in metrics.CORRELATIONS]
    out = [f"| {first} | contexts | systems | " + " | ".join(cols) + " |", "|---|---:|---:|" + "---:|" * len(cols)]
    for r in rows:
        key = f"{r['dataset']} {r['aspect']}" if first == "data set, aspect" else f"{r['aspect']}: {r['who']}"
        cells = [_cell(r[m], (r[f"{m}_lo"], r[f"{m}_hi"])) for m in metrics.CORRELATIONS]
        cells += [_cell(r[f"system_{m}"], (r[f"system_{m}_lo"], r[f"system_{m}_hi"])) for m in metrics.CORRELATIONS]
        out.append(f"| {key} | {r['contexts']} | {r['systems'] or '—'} | " + " | ".join(cells) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one aspect per data set, few bootstrap draws (seconds)")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap draws over contexts")
    ap.add_argument("--out", default=str(RESULTS), help="output folder")
    args = ap.parse_args(argv)
    boot = 200 if args.smoke else args.boot
    start = time.time()
    ceilings = []
    for name in PER_RATER:
        for aspect in ASPECTS[name][:1] if args.smoke else ASPECTS[name]:
            ceilings.append(ceiling_row(name, aspect, boot=boot))
            print(f"{name} {aspect}: Spearman {ceilings[-1]['spearman']:+.3f}", flush=True)
    systems = match_systems()
    judges, hanna, slots = [], [r for r in ceilings if r["dataset"] == "hanna"], []
    for aspect in ASPECTS["hanna"][:1] if args.smoke else ASPECTS["hanna"]:
        judges += [r for r in hanna if r["aspect"] == aspect] + llm_rows(aspect, boot=boot, systems=systems)
        slots.append(slot_rows(aspect, systems=systems))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "human_ceiling" + ("_smoke" if args.smoke else "")
    fields = list(ceilings[0])
    with (out / f"{stem}.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in ceilings + [r for r in judges if r["who"] != "human ceiling"]:
            w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()})
    lines = ["# The human ceiling: one rater against the mean of the others", "",
             "Generated by `experiments/human_ceiling.py` (`jaxrank.data.human_ceiling`). Per context: Spearman, "
             "Kendall tau-b and Pearson between one rater's scores of the candidates and the mean of the other "
             "raters' scores of the same candidates, averaged over raters, then over contexts (`contexts`: where "
             "it is defined), 95% percentile bootstrap interval over contexts. System level: the same between "
             "per-system means, averaged over raters, percentile bootstrap interval with contexts resampled "
             "(a correlation of means over resampled contexts is biased low, so this interval can lie below the "
             "estimate: read it as the spread). One rater is "
             "compared with the mean of one rater fewer than a judge's gold (the mean of all): the ceiling is "
             "conservative, and a judge can pass it: it then agrees with the raters' mean better than one rater "
             "does, not better than the mean.", "",
             "Who the raters are: " + "; ".join(f"{k}: {v}" for k, v in PER_RATER.items()) + ". In HANNA and "
             "WebNLG 2020 a rater is a slot (the k-th rating of each candidate), not one person across a "
             "context's candidates.", "", *_table(ceilings, first="data set, aspect"), "",
             "## Beside the judges: HANNA's stored LLM raters", "",
             "Each LLM's rating (the mean of its 4 prompt variants, as released, averaged exactly so that equal "
             "means tie) against the mean of the 3 human raters, beside the human ceiling, the same correlations "
             "and intervals.", "",
             *_table(judges, first="aspect: who"), "",
             "HANNA's rater slots, per story (mean Spearman over prompts): two slots against each other, one slot "
             "against each stored LLM, and the mean of the slots against each LLM. If each slot were the true score "
             "plus its own independent error, no judge could agree with one slot better than the square root of "
             "the slots' agreement with each other (their reliability; roughly, for rank correlations). Where "
             "`slot vs LLM` passes `sqrt(slot vs slot)`, or the slots do not agree at all while each agrees with "
             "the LLMs, their errors are not independent (the release does not say a slot is one annotator), and "
             "the per-story ceiling is no bound on what the mean of the slots carries.", "",
             "| aspect | slot vs slot | sqrt(slot vs slot) | slot vs LLM | mean of slots vs LLM |",
             "|---|---:|---:|---:|---:|",
             *[f"| {r['aspect']} | {r['slot_slot']:+.3f} | "
               + (f"{np.sqrt(r['slot_slot']):.3f}" if r['slot_slot'] > 0 else "—")
               + f" | {r['slot_llm']:+.3f} | {r['mean_llm']:+.3f} |" for r in slots], "",
             "## Not computable from these files", ""]
    for name, why in MEANS_ONLY.items():
        lines.append(f"- {name}: no human ceiling: means only ({why})" +
                     (f"; no system level: {NO_SYSTEMS[name]}" if name in NO_SYSTEMS else "") + ".")
    lines += ["", f"Ran in {time.time() - start:.0f} s ({boot} bootstrap draws).", ""]
    (out / f"{stem}.md").write_text("\n".join(lines))
    print(f"wrote {out / (stem + '.md')} and {out / (stem + '.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
