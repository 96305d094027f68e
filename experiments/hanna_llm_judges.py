"""Real LLM ratings of HANNA replayed as pairwise judges (issue 15).

For each LLM (Beluga-13B, OrcaPlatypus, Mistral-7B, Llama-13B, ChatGPT) and aspect, the
4 stored absolute ratings of every story (:func:`jaxrank.data.load_llm_ratings`) become
pairwise probabilities (:mod:`jaxrank.judges.rating_replay`: ``variant_share``,
``logistic`` with T = 1, ``gaussian``) over all 55 pairs of each of the 96 prompts, and
every scorer of the scorer table (plus the direct mean rating, averaged exactly so that equal
means tie: :meth:`jaxrank.data.LLMRatings.mean_rating`) is scored by Spearman per prompt against the HANNA human scores: mean over prompts and a 95 % percentile bootstrap
CI over prompts (METHODS.md §7). The efficiency curve (budget vs Spearman, random vs
greedy selection, :func:`jaxrank.studies.run_study`) is run for the ``variant_share``
judge on the aspects in ``--curve-aspects``.

Outputs: ``experiments/results/hanna_llm_{scores.csv,scores.md,efficiency.csv,efficiency.png}``
(``_smoke`` suffix with ``--smoke``).

Usage: ``python experiments/hanna_llm_judges.py [--smoke] [--subsets 20] [--boot 1000]``
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import rating_judge_matrix  # noqa: E402
from jaxrank import studies  # noqa: E402
from jaxrank.data import LLM_JUDGES, load_llm_ratings, match_systems  # noqa: E402
from jaxrank.data.loaders import ASPECTS  # noqa: E402
from jaxrank.judges.rating_replay import METHODS, replay_comparisons, replay_probabilities  # noqa: E402
from jaxrank.metrics import spearman  # noqa: E402
from jaxrank.scorer_table import SCORERS, score  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def per_prompt_spearman(pred, human, mask) -> np.ndarray:
    """``[K]`` Spearman of each prompt's scores against the human scores (NaN if undefined)."""
    return np.asarray(spearman(np.asarray(pred, np.float32), human, where=mask), np.float64)


def bootstrap_ci(values, *, draws: int, seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap CI of the mean over prompts (NaN prompts dropped)."""
    x = values[~np.isnan(values)]
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (draws, len(x)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one judge, one aspect, few subsets/draws (seconds)")
    ap.add_argument("--subsets", type=int, default=20, help="random subsets per budget of the efficiency curve")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap draws over prompts")
    ap.add_argument("--curve-aspects", default="coherence", help="comma-separated aspects for the efficiency curve")
    ap.add_argument("--out", default=str(RESULTS), help="output folder")
    args = ap.parse_args(argv)
    judges = LLM_JUDGES[-1:] if args.smoke else LLM_JUDGES
    aspects = ("coherence",) if args.smoke else ASPECTS["hanna"]
    subsets, boot = (3, 100) if args.smoke else (args.subsets, args.boot)
    suffix = "_smoke" if args.smoke else ""
    scorers = [n for n, e in SCORERS.items() if e.in_report]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    systems = match_systems()
    rows, curve_rows = [], []
    for judge in judges:
        for aspect in aspects:
            r = load_llm_ratings(judge, aspect, systems=systems)
            direct = per_prompt_spearman(r.mean_rating(), r.human, r.mask)
            lo, hi = bootstrap_ci(direct, draws=boot)
            below = int(r.num_below_scale)
            rows.append(dict(judge=judge, aspect=aspect, pairwise_p="-", scorer="mean_rating (pointwise)",
                             spearman=np.nanmean(direct), ci_low=lo, ci_high=hi, prompts=int((~np.isnan(direct)).sum()),
                             below_scale=below))
            # sensitivity: the release's cells below 1 average in its -1 "no rating" code; the mean over a
            # story's cells >= 1 only (a story with none is left out)
            on = np.asarray(r.mask) & np.asarray(r.valid).any(-1)
            kept = np.where(on, r.mean_rating(valid_only=True), 0.0)
            clean = per_prompt_spearman(kept, r.human, on)
            lo, hi = bootstrap_ci(clean, draws=boot)
            rows.append(dict(judge=judge, aspect=aspect, pairwise_p="-",
                             scorer="mean_rating (pointwise, cells >= 1 only)", spearman=np.nanmean(clean),
                             ci_low=lo, ci_high=hi, prompts=int((~np.isnan(clean)).sum()), below_scale=below))
            for method in METHODS:
                c = replay_comparisons(r.ratings, r.mask, method=method)
                for name in scorers:
                    rho = per_prompt_spearman(score(name, c), r.human, r.mask)
                    lo, hi = bootstrap_ci(rho, draws=boot)
                    rows.append(dict(judge=judge, aspect=aspect, pairwise_p=method, scorer=name,
                                     spearman=np.nanmean(rho), ci_low=lo, ci_high=hi,
                                     prompts=int((~np.isnan(rho)).sum()), below_scale=below))
            if aspect in args.curve_aspects.split(","):
                jm = rating_judge_matrix(r.ratings, r.human, r.mask, f"{judge} variant_share")
                n = r.mask.shape[-1]
                for selection in ("random", "greedy"):
                    got, _ = studies.run_study(jm, scorers=["win_ratio", "poe_gaussian", "bradley_terry"],
                                               budgets=studies.budget_grid(n, step=n - 1), num_subsets=subsets,
                                               seed=0, selection=selection, llm=judge, aspect=aspect)
                    curve_rows += got
            print(f"{judge} {aspect}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
    write(out, suffix, rows, curve_rows)
    print(f"wrote {out}/hanna_llm_*{suffix}.* in {time.perf_counter() - t0:.0f} s")
    return 0


def write(out: Path, suffix: str, rows: list[dict], curve_rows: list[dict]) -> None:
    """CSV + markdown tables and the efficiency plot."""
    with open(out / f"hanna_llm_scores{suffix}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    if curve_rows:
        with open(out / f"hanna_llm_efficiency{suffix}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(curve_rows[0]))
            w.writeheader()
            w.writerows(curve_rows)
    lines = ["# HANNA: stored LLM ratings replayed as pairwise judges", "",
             "Spearman per prompt vs the HANNA human scores, mean over 96 prompts [95 % bootstrap CI over prompts].",
             "Generated by `experiments/hanna_llm_judges.py`. The stored ratings are the release's means of each "
             "LLM's repeated ratings, its -1 \"no rating\" code averaged in: `cells < 1` counts the story variants "
             "whose mean is below the 1-5 scale, of 4,224 per judge and aspect (a lower bound of those holding a -1). "
             "The judges replay the ratings as stored; the row `cells >= 1 only` is the pointwise mean without them. "
             "The pointwise means average a story's 4 variants exactly, so that equal means tie "
             "(`LLMRatings.mean_rating`; a float mean splits some ties and moves the Spearman in the third decimal).",
             "", "| judge | aspect | pairwise p | scorer | Spearman | 95 % CI | cells < 1 |",
             "|---|---|---|---|---|---|---:|"]
    for r in rows:
        lines.append(f"| {r['judge']} | {r['aspect']} | {r['pairwise_p']} | {r['scorer']} | "
                     f"{r['spearman']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {r['below_scale']} |")
    (out / f"hanna_llm_scores{suffix}.md").write_text("\n".join(lines) + "\n")
    if not curve_rows:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for colour, judge in enumerate(dict.fromkeys(r["llm"] for r in curve_rows)):
        for selection, style in (("random", "-"), ("greedy", "--")):
            pts = [r for r in curve_rows if r["llm"] == judge and r["selection"] == selection
                   and r["scorer"] == "poe_gaussian"]
            if pts:
                ax.plot([r["budget"] / 110 for r in pts], [r["mean"] for r in pts], style,
                        color=f"C{colour}", label=f"{judge} {selection}")
    ax.set_xlabel("fraction of the 110 ordered comparisons")
    ax.set_ylabel("Spearman (mean over prompts)")
    ax.set_title(f"HANNA {curve_rows[0]['aspect']}: PoE-g on replayed LLM ratings")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"hanna_llm_efficiency{suffix}.png", dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
