"""The full SummEval efficiency sweep: jaxrank vs a per-context NumPy/SciPy loop, side by side.

The sweep of ``experiments/efficiency.py`` (main study): SummEval, 100 articles x
16 summaries, every aspect (4), a simulated FlanT5-3B-like judge per aspect
(68.6% pairwise accuracy, P(A) = 0.37; :mod:`jaxrank.simulate`), every budget
of the grid from 15 to 240 (every multiple of N - 1 = 15, plus 48), 100 random
subsets per budget, every scorer; the mean per-context Spearman per subset.

(a) jaxrank: :func:`jaxrank.experiments.run_study`-style, timed end to end per
    scorer (one nested selection per subset and article, all budgets as weight
    masks; one compiled function per scorer, batched calls of ~40k problems),
    including tracing and compilation (first aspect) and the selection.
(b) a vectorised NumPy/SciPy peer (``benchmarks/_vec_peers.py``: one call per
    budget over every sampled problem, ``np.bincount`` over offset items, batched
    ``np.linalg.pinv``, batched Newton for PoE-BT, ``rankdata(axis=1)``), the
    strongest way a NumPy user runs it, ``--vec-repeats`` runs (median);
(c) baseline: the papers' way, a Python loop over (budget, subset, article)
    calling the NumPy/SciPy scorers of ``benchmarks/poe_protocol.py``
    (``np_win_ratio``, ``np_average_probability``, ``np_bradley_terry`` (Zermelo/MM),
    ``np_poe_gaussian`` (lstsq, soft and hard), ``np_poe_bradley_terry`` (SciPy
    BFGS)) and ``scipy.stats.spearmanr``, on a sample of the same problems
    (``--baseline-subsets`` subsets x every article x every budget, first aspect):
    the same selections and probabilities. Its time per problem times the
    number of problems of the sweep estimates the loop's time for the full sweep.

Ratio = estimated baseline time for the whole sweep / measured jaxrank time for
the whole sweep, per scorer and over the six scorers that have a baseline (ML
ranking has none: timed, left out of the ratio). Also the largest difference of
the per-subset mean Spearman between the two on the sampled problems. Writes
``benchmarks/results/efficiency_sweep[_smoke].{md,csv}``.

    python benchmarks/efficiency_sweep.py [--subsets 100] [--aspects ...] [--baseline-subsets 1] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from poe_protocol import SCORERS as _PROTOCOL_SCORERS  # noqa: E402
from _vec_peers import np_scorer, vec_scorer, vec_spearman  # noqa: E402
from _report import write_results  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

BASELINES = {name: np_scorer(name) for name in _PROTOCOL_SCORERS}
SCORERS = list(BASELINES) + ["max_likelihood_ranking"]


def baseline_curves(name, sel, labels, budgets, subsets):
    """Per-context loop on ``subsets`` of the selection: ``[budgets, subsets]`` context-mean Spearman, seconds."""
    fn = BASELINES[name]
    i, j, p, w = (np.asarray(x) for x in (sel.i, sel.j, sel.p, sel.weight))
    i, j, p = i.astype(np.int64), j.astype(np.int64), p.astype(np.float64)
    n = sel.num_items
    out = np.empty((len(budgets), subsets))
    t0 = time.perf_counter()
    for b, r in enumerate(budgets):
        for s in range(subsets):
            rho = []
            for c in range(labels.shape[0]):
                live = w[s, c, :r] > 0
                scores = fn(i[s, c, :r][live], j[s, c, :r][live], p[s, c, :r][live], n)
                rho.append(stats.spearmanr(scores, labels[c])[0])
            out[b, s] = np.nanmean(rho)
    return out, time.perf_counter() - t0


def vectorised_curves(name, sel, labels, budgets, subsets, repeats):
    """The vectorised NumPy peer (``_vec_peers``) on the same sample, one call per budget: curves, seconds a run.

    Timed ``repeats`` times (returns every run's seconds); every comparison within a budget must be live.
    """
    i, j, p, w = (np.asarray(x) for x in (sel.i, sel.j, sel.p, sel.weight))
    n, C = sel.num_items, labels.shape[0]
    gold = np.tile(labels, (subsets, 1))
    out, times = np.empty((len(budgets), subsets)), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for b, r in enumerate(budgets):
            if not (w[:subsets, :, :r] > 0).all():
                raise SystemExit("the vectorised peer expects every comparison within a budget live")
            take = lambda x, t: x[:subsets, :, :r].reshape(-1, r).astype(t)
            rho = vec_spearman(vec_scorer(name)(take(i, np.int64), take(j, np.int64), take(p, np.float64), n), gold)
            out[b] = np.nanmean(rho.reshape(subsets, C), axis=1)
        times.append(time.perf_counter() - t0)
    return out, times


def main(argv=None):
    from jaxrank import data, studies as ex

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", type=int, default=100, help="random subsets per budget (default 100)")
    ap.add_argument("--aspects", default=None, help="comma-separated SummEval aspects (default all 4)")
    ap.add_argument("--baseline-subsets", type=int, default=1, help="subsets the baseline loop runs (default 1)")
    ap.add_argument("--vec-repeats", type=int, default=3, help="runs of the vectorised NumPy peer on the sample")
    ap.add_argument("--scorers", default=",".join(SCORERS), help="comma-separated scorers")
    ap.add_argument("--chunk", type=int, default=40_000, help="problems per batched jaxrank call")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny run: 1 aspect, 10 articles, 3 subsets")
    ap.add_argument("--out", default=None, help="output stem (default benchmarks/results/efficiency_sweep[_smoke])")
    args = ap.parse_args(argv)
    aspects = args.aspects.split(",") if args.aspects else list(data.ASPECTS["summeval"])
    contexts = slice(None)
    if args.smoke:
        aspects, contexts, args.subsets = aspects[:1], slice(0, 10), min(args.subsets, 3)
    scorers = args.scorers.split(",")
    stem = Path(args.out) if args.out else \
        Path(__file__).parent / "results" / ("efficiency_sweep_smoke" if args.smoke else "efficiency_sweep")
    warnings.filterwarnings("ignore", category=stats.ConstantInputWarning)
    out = []
    say = lambda s="": (print(s, flush=True), out.append(s))

    ds = data.load_dataset("summeval")
    judges = {}
    for k, a in enumerate(aspects):
        lm = data.label_matrix(ds, a)
        judges[a] = ex.simulated_judge(lm.labels[contexts], lm.mask[contexts], accuracy=0.686, p_a=0.37, seed=k)
    n = judges[aspects[0]].mask.shape[-1]
    C = judges[aspects[0]].mask.shape[0]
    budgets = ex.budget_grid(n, extra=[round(0.2 * n * (n - 1))])
    problems = len(aspects) * len(budgets) * args.subsets * C

    # ------------------------------------------------------------ jaxrank
    jax.numpy.zeros(1).block_until_ready()
    t_jax = dict.fromkeys(scorers, 0.0)
    t_aspect = {s: [] for s in scorers}
    t_sel, jax_curves, sels = 0.0, {}, {}
    for a in aspects:
        t0 = time.perf_counter()
        sel = ex.select_nested(judges[a], num_subsets=args.subsets, max_budget=n * (n - 1),
                               key=jax.random.key(args.seed))
        jax.block_until_ready(sel)
        t_sel += time.perf_counter() - t0
        sels[a] = sel
        for s in scorers:
            t0 = time.perf_counter()
            jax_curves[a, s] = ex.efficiency_curves(sel, judges[a].labels, judges[a].mask, budgets, [s],
                                                    chunk=args.chunk)[s]
            t_aspect[s].append(time.perf_counter() - t0)
            t_jax[s] += t_aspect[s][-1]
            print(f"  jaxrank {a:12s} {s:24s} {t_jax[s]:7.2f}s cumulative", flush=True)
    t_jax_total = sum(t_jax.values()) + t_sel

    # ------------------------------------------------------------ baseline on a sample
    a0 = aspects[0]
    nb = min(args.baseline_subsets, args.subsets)
    sample = len(budgets) * nb * C
    rows = []
    for s in scorers:
        later = t_aspect[s][1:]
        compile_s = t_aspect[s][0] - float(np.median(later)) if later else float("nan")
        row = dict(scorer=s, t_jaxrank_s=t_jax[s], compile_est_s=compile_s,
                   us_per_problem_jaxrank=1e6 * t_jax[s] / problems)
        if s in BASELINES:
            curve, t_b = baseline_curves(s, sels[a0], judges[a0].labels.astype(np.float64), budgets, nb)
            per = t_b / sample
            diff = np.nanmax(np.abs(curve - jax_curves[a0, s][:, :nb]))
            vcurve, t_v = vectorised_curves(s, sels[a0], judges[a0].labels.astype(np.float64), budgets, nb,
                                            args.vec_repeats)
            per_v = float(np.median(t_v)) / sample
            row.update(t_baseline_sample_s=t_b, us_per_problem_baseline=1e6 * per,
                       t_baseline_est_s=per * problems, ratio=per * problems / t_jax[s], max_abs_diff=float(diff),
                       t_vec_sample_median_s=float(np.median(t_v)), t_vec_sample_min_s=min(t_v),
                       t_vec_sample_max_s=max(t_v), us_per_problem_vec=1e6 * per_v, t_vec_est_s=per_v * problems,
                       ratio_vec=per_v * problems / t_jax[s],
                       max_abs_diff_vec=float(np.nanmax(np.abs(vcurve - jax_curves[a0, s][:, :nb]))))
            print(f"  baseline {s:24s} {t_b:7.2f}s on {sample} problems, max |diff| {diff:.2e}", flush=True)
        rows.append(row)
    with_base = [r for r in rows if "ratio" in r]
    t_jb = sum(r["t_jaxrank_s"] for r in with_base)
    t_bb = sum(r["t_baseline_est_s"] for r in with_base)

    say(f"# Efficiency sweep: SummEval, {len(aspects)} aspect(s) x {C} articles x {n} summaries, "
        f"{len(budgets)} budgets ({budgets[0]}..{budgets[-1]}), {args.subsets} subsets")
    say()
    say(f"Simulated FlanT5-3B-like judge per aspect (accuracy 0.686, P(A) 0.37). {problems:,} problems per scorer "
        f"(aspect x budget x subset x article). jaxrank: measured end to end, compilation included (first "
        f"aspect), judges simulated before timing, selection {t_sel:.1f}s on top. Baseline: per-article NumPy/SciPy loop on {sample:,} of the "
        f"same problems ({nb} subset(s) x {C} articles x {len(budgets)} budgets, {a0}), time per problem "
        f"x {problems:,}.")
    say(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores (shared), jax "
        f"{jax.__version__} on {jax.devices()[0].platform}, numpy {np.__version__}.")
    say()
    t_vb = sum(r["t_vec_est_s"] for r in with_base)
    say("| scorer | jaxrank, whole sweep (s) | of which compile (est. s) | us/problem jaxrank | us/problem vectorised "
        "NumPy, median [min, max] | vectorised, whole sweep (est. s) | vectorised / jaxrank | us/problem loop | "
        "loop, whole sweep (est. s) | loop / jaxrank | max abs diff of Spearman (sample: vectorised; loop) |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b = r.get("ratio")
        say(f"| {r['scorer']} | {r['t_jaxrank_s']:.1f} | {r['compile_est_s']:.1f} | {r['us_per_problem_jaxrank']:.1f} | "
            + (f"{r['us_per_problem_vec']:.1f} [{1e6 * r['t_vec_sample_min_s'] / sample:.1f}, "
               f"{1e6 * r['t_vec_sample_max_s'] / sample:.1f}] | {r['t_vec_est_s']:.0f} | {r['ratio_vec']:.2f}x | "
               f"{r['us_per_problem_baseline']:.0f} | {r['t_baseline_est_s']:.0f} | {b:.3g}x | "
               f"{r['max_abs_diff_vec']:.1e}; {r['max_abs_diff']:.1e} |" if b else "— | — | — | — | — | — | — |"))
    say(f"| **six scorers with a baseline** | {t_jb:.1f} | | | | {t_vb:.0f} | **{t_vb / t_jb:.2f}x** | | {t_bb:.0f} | "
        f"{t_bb / t_jb:.3g}x | |")
    say()
    say(f"Vectorised NumPy peer (`benchmarks/_vec_peers.py`, the strongest way a NumPy user runs it: one call per "
        f"budget over all sampled problems, no Python loop): {args.vec_repeats} runs on the sample, median; it is "
        f"not interleaved with jaxrank's sweep (estimates, like the loop's). Load average now {os.getloadavg()[0]:.2f}.")
    say()
    say("Compile estimate: first aspect's time minus the median of the later aspects'. BT and PoE-g-hard give "
        "exactly equal scores to items with equal win records; float32 (jaxrank) and float64 (baseline) rounding "
        "split such ties differently, hence their larger Spearman differences. The others agree to float32 "
        "rounding.")
    say()
    say(f"Whole sweep with jaxrank ({len(scorers)} scorers, selection included): {t_jax_total:.1f}s "
        f"({t_jax_total / 60:.1f} min). The loop would take about {t_bb / 60:.0f} min for the six scorers it has.")
    write_results(stem, out, rows)
    return rows


if __name__ == "__main__":
    main()
