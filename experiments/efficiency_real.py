"""Efficiency curves of a real judge, from a judgement store holding every ordered comparison of a slice.

The PoE protocol (PoE §4.2, Tables 1-2, Figures 1 and 3; METHODS.md §7) on a real LLM judge's stored
judgements (``experiments/long_judge.py``), beside two simulated judges on the same contexts and labels
(:func:`jaxrank.studies.simulated_judge`: one calibrated to this judge's measured accuracy and P(A), one
to FlanT5-3B's, LCA Tables 5 and 7) and the paper's numbers.

* The slice: the store's contexts in which every ordered pair of ``--candidates`` candidates (default: the
  most any context has) was judged; others (still being judged, or judged on fewer candidates) are left out
  and counted.
* Selections: ``random`` (a random spanning tree, then uniform; PoE §4.2), ``greedy`` (D-optimal for the
  Gaussian PoE, PoE eq. 16, no repeats: up to ``N(N-1)/2``) and ``active`` (Laplace-BT, PoE §3.6 and
  App. A.6: a random spanning tree, then one Laplace-BT pick a round on the stored matrix, as
  :func:`jaxrank.selection.active_assess` without its stopping rule, up to ``N(N-1)``). Every selection
  is nested: budget ``R`` keeps its first ``R`` comparisons.
* Scorers: win ratio, BT, average probability, PoE-g, PoE-g-hard, PoE-BT, ML ranking, and the debiased
  variants (threshold win ratio, PoE-g beta = mean p, PoE-BT gamma = mean p, PoE-BT learnt gamma).
* Per (selection, scorer, budget): the mean over ``--subsets`` selections of the mean per-context
  Spearman (the paper's number), its std over selections, and a 95% percentile bootstrap interval over
  contexts of the per-context Spearman averaged over selections. Greedy and active minus random at every
  budget, with the bootstrap interval over contexts of the per-context difference. Kendall tau-b and Pearson
  (METHODS.md §7), per context from the same scores, get the same three statistics in the CSV's last columns
  (:data:`EXTRA`); the reproduction section prints all three at the full budget.
* The judge as LCA Tables 5-7 report it: P(A) (share of ``p > 0.5``), pairwise accuracy against the humans
  (human ties left out) raw, after threshold debiasing (LCA eq. 9-10: ``tau`` the median ``p`` of the
  slice, so that P(A) = 0.5) and after permutation debiasing (both orders averaged,
  ``(p_ab + 1 - p_ba) / 2``), with bootstrap intervals over contexts.

Writes ``efficiency_<data>_<judge>.{csv,md,png}`` to ``--out`` (default ``experiments/results``).

    python experiments/efficiency_real.py --data topicalchat --judge qwen2.5-coder-1.5b \\
        --store experiments/results/stores/topicalchat-coherence-qwen2.5-coder-1.5b-auto.jsonl \\
        --template topicalchat-coherence-3f581bd9-4ebd11
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # _common.py, efficiency.py beside this file

from efficiency import DEBIAS, MAIN, write_results   # noqa: E402  (the simulated study's scorer lists, its files)
from efficiency_real_report import (  # noqa: E402,F401  (the report's parts; reproduction.py reads them here)
    FLANT5, PAPER, PAPER_POINT, PROTOCOL, agreement_table, flant5_words, reproduction_section,
)

SCORERS = MAIN + DEBIAS
SIMULATED = ["win_ratio", "bradley_terry", "average_probability", "poe_gaussian", "poe_bradley_terry"]
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="topicalchat")
    ap.add_argument("--aspect", default="coherence")
    ap.add_argument("--store", required=True, help="judgement store (.jsonl)")
    ap.add_argument("--judge", required=True, help="judge name in the store")
    ap.add_argument("--template", default=None, help="template key in the store (the reading)")
    ap.add_argument("--candidates", type=int, default=None, help="candidates per context (default: the most)")
    ap.add_argument("--subsets", type=int, default=100, help="random/greedy selections per context (default 100)")
    ap.add_argument("--active-seeds", type=int, default=20, help="active selections per context (default 20)")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap draws over contexts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compilation-cache", metavar="DIR", default=None, help="JAX persistent compilation cache")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--tag", default=None, help="file name tag (default <data>_<judge>)")
    ap.add_argument("--smoke", action="store_true", help="4 subsets, 2 active seeds, 3 scorers, files *_smoke")
    return ap.parse_args(argv)


def complete_slice(jm, n: int | None):
    """The contexts of a store's :class:`JudgeMatrix` whose first ``n`` candidates (in the store's order of first
    appearance) were judged in every ordered pair, cut to those ``n``.

    Returns ``(JudgeMatrix [C', n, n], kept positions, left-out count)``; ``n`` defaults to the most candidates
    any context has (a context judged on more candidates gives its first ``n``).
    """
    from jaxrank.studies import JudgeMatrix

    counts = jm.mask.sum(1)
    n = int(n or counts.max())
    full = ~np.eye(n, dtype=bool)
    keep = [k for k in range(len(counts)) if jm.mask[k, :n].all() and np.array_equal(jm.observed[k, :n, :n], full)]
    if not keep:
        raise SystemExit(f"no context of the store has every ordered pair of {n} candidates judged")
    cut = lambda x: x[keep][:, :n, :n] if x.ndim == 3 else x[keep][:, :n]
    return JudgeMatrix(cut(jm.probs), cut(jm.observed), cut(jm.labels), cut(jm.mask), jm.name), keep, \
        len(counts) - len(keep)


def boot_ci(per_ctx, draws: int, seed: int):
    """95% percentile bootstrap interval over contexts of the mean of ``per_ctx [C]`` (NaN skipped)."""
    x = np.asarray(per_ctx, np.float64)
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(x), (draws, len(x)))
    m = x[idx].mean(1)
    return float(np.quantile(m, 0.025)), float(np.quantile(m, 0.975))


def judge_tables(jm, draws: int, seed: int) -> dict:
    """LCA Tables 5-7 from the full matrix: P(A), accuracy raw / threshold-debiased / permutation-debiased."""
    C, n = jm.mask.shape
    pa, acc, acc_t, acc_p = [], [], [], []
    tau = float(np.median(jm.probs[jm.observed]))
    for k in range(C):
        p, h = jm.probs[k].astype(np.float64), jm.labels[k].astype(np.float64)
        a, b = np.nonzero(jm.observed[k])
        dh = h[a] - h[b]
        real = dh != 0
        pa.append(np.mean(p[a, b] > 0.5))
        acc.append(np.mean((p[a, b] > 0.5)[real] == (dh > 0)[real]) if real.any() else np.nan)
        acc_t.append(np.mean((p[a, b] > tau)[real] == (dh > 0)[real]) if real.any() else np.nan)
        sym = (p[a, b] + 1 - p[b, a]) / 2
        acc_p.append(np.mean((sym > 0.5)[real] == (dh > 0)[real]) if real.any() else np.nan)
    out = dict(tau=tau, mean_p=float(jm.probs[jm.observed].mean()))
    for name, v in (("p_a", pa), ("accuracy", acc), ("accuracy_threshold", acc_t), ("accuracy_permutation", acc_p)):
        out[name] = float(np.nanmean(v))
        out[name + "_ci"] = boot_ci(v, draws, seed)
    return out


CORRELATIONS = ("spearman", "kendall_tau", "pearson")
"""Per-context agreement of every row (:data:`jaxrank.metrics.CORRELATIONS`): Spearman is the CSV's ``mean``,
``std``, ``ci_lo``, ``ci_hi``; Kendall tau-b and Pearson are ``<name>``, ``<name>_std``, ``<name>_ci_lo``,
``<name>_ci_hi`` (the same statistics), the CSV's last columns."""
EXTRA = [f"{m}{t}" for m in CORRELATIONS[1:] for t in ("", "_std", "_ci_lo", "_ci_hi")]


def per_context_curves(sel, jm, budgets, scorers):
    """``{correlation: {scorer: [B, S, C]}}`` per-context Spearman, Kendall tau-b and Pearson
    (:func:`jaxrank.studies.efficiency_curves`, one context a call, the three from the same scores)."""
    import jax

    from jaxrank import studies as ex

    C = jm.mask.shape[0]
    out = {m: {s: np.empty((len(budgets), sel.i.shape[0], C)) for s in scorers} for m in CORRELATIONS}
    for k in range(C):
        part = jax.tree.map(lambda x: x[:, k:k + 1], sel)
        cur = ex.efficiency_curves(part, jm.labels[k:k + 1], jm.mask[k:k + 1], budgets, scorers,
                                   correlations=CORRELATIONS)
        for m in CORRELATIONS:
            for s in scorers:
                out[m][s][:, :, k] = cur[m][s]
    return out


def nested_selection(jm, selection: str, num: int, seed: int):
    """``Comparisons [S, C, N(N-1)]`` nested selections (``random``/``greedy``: :func:`jaxrank.studies.select_nested`,
    greedy padded with weight 0 past ``N(N-1)/2``; ``active``: a random spanning tree, then one Laplace-BT pick
    a round, :func:`jaxrank.selection.laplace_comparisons`, for every selection and context in one call)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from jaxrank import studies as ex
    from jaxrank.selection import gather_comparisons, laplace_comparisons, random_comparisons

    C, n = jm.mask.shape
    full = n * (n - 1)
    key = jax.random.fold_in(jax.random.key(seed), {"random": 0, "greedy": 2, "active": 4}[selection])
    if selection in ("random", "greedy"):
        most = full // 2 if selection == "greedy" else full
        sel = ex.select_nested(jm, num_subsets=num, max_budget=most, key=key, selection=selection)
        if most < full:
            pad = lambda x, v: jnp.concatenate([x, jnp.full(x.shape[:-1] + (full - most,), v, x.dtype)], -1)
            sel = dataclasses.replace(sel, i=pad(sel.i, 0), j=pad(sel.j, 0), p=pad(sel.p, 0.5),
                                      weight=pad(sel.weight, 0))
        return sel
    keys = jax.random.split(key, num * C).reshape(num, C)
    mask = jnp.asarray(jm.mask)
    probs = jnp.asarray(jm.probs)
    i0, j0 = random_comparisons(keys, n, n - 1, item_mask=mask)      # a random spanning tree, as active_assess
    ii, jj, ww = np.zeros((num, C, full), np.int32), np.zeros((num, C, full), np.int32), np.zeros((num, C, full),
                                                                                                  np.float32)
    ii[..., :n - 1], jj[..., :n - 1], ww[..., :n - 1] = np.asarray(i0), np.asarray(j0), 1.0
    for t in range(n - 1, full):     # one Laplace-BT pick a round for every (selection, context) at once
        c = gather_comparisons(probs, jnp.asarray(ii), jnp.asarray(jj), item_mask=mask)
        c = dataclasses.replace(c, weight=c.weight * jnp.asarray(ww))
        ni, nj = (np.asarray(x)[..., 0] for x in laplace_comparisons(c, 1, key=jax.random.fold_in(key, t)))
        ii[..., t], jj[..., t], ww[..., t] = ni, nj, (ni != nj)
    c = gather_comparisons(probs, jnp.asarray(ii), jnp.asarray(jj), item_mask=mask)
    return dataclasses.replace(c, weight=c.weight * jnp.asarray(ww))


def _summary(v, draws, seed):
    """``(mean, std over selections of the context mean, ci_lo, ci_hi, per-context mean [C])`` of ``v [S, C]``."""
    ctx_mean = np.nanmean(v, axis=-1)              # [S]
    per_ctx = np.nanmean(v, axis=0)                # [C], averaged over selections
    return (float(np.nanmean(ctx_mean)), float(np.nanstd(ctx_mean))) + boot_ci(per_ctx, draws, seed) + (per_ctx,)


def study_rows(curves, budgets, draws, seed, **fields):
    """Rows: mean/std over selections of the context mean, bootstrap interval over contexts, for Spearman
    (``mean``...) and for Kendall tau-b and Pearson (:data:`EXTRA`); per-context Spearman means."""
    rows, per = [], {}
    for s, v in curves["spearman"].items():          # v [B, S, C]
        for b, r in enumerate(budgets):
            m, sd, lo, hi, per_ctx = _summary(v[b], draws, seed)
            row = dict(fields, scorer=s, budget=int(r), mean=m, std=sd, ci_lo=lo, ci_hi=hi,
                       subsets=int(v.shape[1]), contexts=int(np.sum(~np.isnan(per_ctx))))
            for name in CORRELATIONS[1:]:
                row.update(zip((f"{name}{t}" for t in ("", "_std", "_ci_lo", "_ci_hi")),
                               _summary(curves[name][s][b], draws, seed)[:4]))
            rows.append(row)
            per[(s, int(r))] = per_ctx
    return rows, per


def run(args, say):
    from _common import load_judge
    from jaxrank.simulate import judge_stats
    from jaxrank.studies import budget_grid, simulated_judge

    jm0, label = load_judge(data=args.data, aspect=args.aspect, store=args.store, judge=args.judge,
                            template=args.template)
    jm, keep, dropped = complete_slice(jm0, args.candidates)
    from jaxrank.assessment.store import JudgementStore
    ids = JudgementStore(args.store).comparisons(judge=args.judge, template=args.template).contexts
    keep = [ids[k] for k in keep]
    C, n = jm.mask.shape
    full = n * (n - 1)
    budgets = budget_grid(n, extra=[round(f * full) for f in (0.2, 0.25, 0.5, 0.6)])
    scorers = ["win_ratio", "average_probability", "poe_gaussian"] if args.smoke else SCORERS
    subsets, seeds = (4, 2) if args.smoke else (args.subsets, args.active_seeds)
    st = judge_stats(jm.probs, jm.labels, jm.mask)
    lca = judge_tables(jm, args.boot, args.seed)
    say(f"Judge `{args.judge}`, template `{args.template}`, store `{Path(args.store).name}`: {C} contexts x {n} "
        f"candidates, every ordered pair ({full} per context, {C * full} judgements); {dropped} store contexts "
        f"left out (fewer candidates, or not every pair of the first ones judged yet). "
        f"Contexts: {', '.join(map(str, keep))}.")
    rows, per, times = [], {}, {}
    judges = [("real", jm, ("random", "greedy", "active"), scorers, st["accuracy"], st["p_a"])]
    sims = [("sim-matched", st["accuracy"], st["p_a"], 1.5)]
    if (args.data, args.aspect) in FLANT5:
        acc, pa, _, noise = FLANT5[(args.data, args.aspect)]
        sims.append(("sim-flant5", acc, pa, noise))
    else:
        say(f"- no sim-flant5 judge: the LCA paper gives no FlanT5-3B figures for {args.data} {args.aspect}")
    for kind, acc, pa, noise in sims:
        try:
            sim = simulated_judge(jm.labels, jm.mask, accuracy=acc, p_a=pa, item_noise=noise, seed=args.seed)
        except (ValueError, RuntimeError) as err:
            say(f"- simulated judge {kind} (accuracy {acc:.3f}, P(A) {pa:.2f}) not built: {err}")
            continue
        judges.append((kind, sim, ("random", "greedy"), [s for s in scorers if s in SIMULATED], acc, pa))
    for kind, j, selections, names, acc, pa in judges:
        for selection in selections:
            t0 = time.perf_counter()
            sel = nested_selection(j, selection, seeds if selection == "active" else subsets, args.seed)
            bs = [r for r in budgets if selection != "greedy" or r <= full // 2]
            r, p = study_rows(per_context_curves(sel, j, bs, names), bs, args.boot, args.seed,
                              judge_kind=kind, selection=selection, data=args.data, aspect=args.aspect,
                              judge_accuracy=float(acc), judge_p_a=float(pa))
            times[(kind, selection)] = time.perf_counter() - t0
            print(f"  {kind} {selection}: {len(names)} scorers x {len(bs)} budgets in "
                  f"{times[(kind, selection)]:.0f} s", flush=True)
            rows += r
            per.update({(kind, selection) + k: v for k, v in p.items()})
    return dict(jm=jm, keep=keep, stats=st, lca=lca, rows=rows, per=per, budgets=budgets, times=times, label=label)


def differences(res, draws, seed):
    """Rows: greedy and active minus random at every budget both have, per scorer, with the interval over contexts."""
    out = []
    for kind in ("real", "sim-matched", "sim-flant5"):
        for other in ("greedy", "active"):
            for (k, sel, s, r), v in res["per"].items():
                if k != kind or sel != other or (kind, "random", s, r) not in res["per"]:
                    continue
                d = v - res["per"][(kind, "random", s, r)]
                lo, hi = boot_ci(d, draws, seed)
                out.append(dict(judge_kind=kind, versus=f"{other} - random", scorer=s, budget=r,
                                diff=float(np.nanmean(d)), ci_lo=lo, ci_hi=hi))
    return out


def markdown(res, diffs, args):
    from _common import LABELS

    jm, lca, st = res["jm"], res["lca"], res["stats"]
    C, n = jm.mask.shape
    full = n * (n - 1)
    rows = res["rows"]
    flant5 = FLANT5.get((args.data, args.aspect))
    f = lambda x: f"{100 * x:.1f}"
    L = [f"# Efficiency curves of a real judge: {args.data} {args.aspect}, {args.judge}", "",
         f"Generated by `experiments/efficiency_real.py` from the store `{Path(args.store).name}` (template "
         f"`{args.template}`). {C} contexts x {n} candidates, all {full} ordered comparisons of each judged. "
         "Spearman x 100: mean over selections of the mean per-context Spearman with the human scores "
         "(the papers' number), ± its std over selections, [95% bootstrap interval over contexts of the "
         "per-context Spearman averaged over selections]. Random and greedy: "
         f"{4 if args.smoke else args.subsets} selections per context; active (Laplace-BT, one comparison a round): "
         f"{2 if args.smoke else args.active_seeds}.", "",
         "## The judge (LCA Tables 5-7)", "",
         "| judge | P(A) | accuracy (mean over contexts) | accuracy, threshold-debiased | "
         "accuracy, permutation-debiased | mean p |",
         "|---|---:|---:|---:|---:|---:|",
         f"| {args.judge} | {lca['p_a']:.3f} [{lca['p_a_ci'][0]:.3f}, {lca['p_a_ci'][1]:.3f}] | "
         f"{lca['accuracy']:.3f} [{lca['accuracy_ci'][0]:.3f}, {lca['accuracy_ci'][1]:.3f}] | "
         f"{lca['accuracy_threshold']:.3f} [{lca['accuracy_threshold_ci'][0]:.3f}, "
         f"{lca['accuracy_threshold_ci'][1]:.3f}] "
         f"(tau {lca['tau']:.3f}) | {lca['accuracy_permutation']:.3f} [{lca['accuracy_permutation_ci'][0]:.3f}, "
         f"{lca['accuracy_permutation_ci'][1]:.3f}] | {lca['mean_p']:.3f} |",
         ] + ([f"| {flant5[2].split(':')[0]} ({flant5[2].split(': ', 1)[1]}) | {flant5[1]:.2f} | "
                f"{flant5[0]:.3f} | | | |"] if flant5 else []) + ["",
         f"Per context, then mean over contexts (intervals: bootstrap over contexts); the stored judge reports "
         "(`stores/*.md`) pool the accuracy over comparisons instead. "
         f"`jaxrank.simulate.judge_stats` (pooled over comparisons): accuracy {st['accuracy']:.3f}, P(A) "
         f"{st['p_a']:.3f}: the "
         "`sim-matched` judge is calibrated to these"
         + (f"; the `sim-flant5` judge to {flant5[2]}" if flant5 else "") + ".", "",
         PROTOCOL + ".", ""]
    def budget_table(title, sub, cell):
        """A section: a scorer per row, a budget of ``sub`` per column, ``cell(row)`` for each (row, budget)."""
        bs = sorted({r["budget"] for r in sub})
        out = [title, "", "| scorer | " + " | ".join(f"R = {b}" for b in bs) + " |", "|---|" + "---:|" * len(bs)]
        for s in dict.fromkeys(r["scorer"] for r in sub):
            cells = [next((cell(r) for r in sub if r["scorer"] == s and r["budget"] == b), "") for b in bs]
            out.append(f"| {LABELS.get(s, s)} | " + " | ".join(cells) + " |")
        return out + [""]

    for kind in dict.fromkeys(r["judge_kind"] for r in rows):
        for sel in dict.fromkeys(r["selection"] for r in rows if r["judge_kind"] == kind):
            L += budget_table(f"## {kind} judge, {sel} selection",
                              [r for r in rows if r["judge_kind"] == kind and r["selection"] == sel],
                              lambda r: f"{f(r['mean'])} ± {f(r['std'])} [{f(r['ci_lo'])}, {f(r['ci_hi'])}]")
    for kind in dict.fromkeys(d["judge_kind"] for d in diffs):
        for vs in dict.fromkeys(d["versus"] for d in diffs if d["judge_kind"] == kind):
            L += budget_table(f"## {kind} judge: {vs}, at every budget (Spearman points, [95% bootstrap over "
                              "contexts])", [d for d in diffs if d["judge_kind"] == kind and d["versus"] == vs],
                              lambda d: f"{100 * d['diff']:+.1f} [{100 * d['ci_lo']:+.1f}, {100 * d['ci_hi']:+.1f}]")
    L += ["## The paper", "", PAPER.get(args.data, "(no paper row for this data set)") + ". Theirs: "
          "7B-11B judges on every aspect; ours: one aspect, a 1.5B judge, the slice above.", ""]
    return L


def plot(res, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import LABELS

    rows = res["rows"]
    get = lambda kind, sel, s: sorted((r["budget"], r["mean"], r["ci_lo"], r["ci_hi"]) for r in rows
                                      if r["judge_kind"] == kind and r["selection"] == sel and r["scorer"] == s)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    panels = [("real judge, random selection (bands: 95% over contexts)",
               [("real", "random", s) for s in MAIN]),
              ("real judge, debiasing (random selection)",
               [("real", "random", s) for s in ("win_ratio", "win_ratio_debiased", "poe_gaussian",
                                                 "poe_gaussian_debiased", "poe_bradley_terry",
                                                 "poe_bradley_terry_debiased", "poe_bradley_terry_learnt")]),
              ("real judge: random (solid) / greedy (dashed) / active (dotted)",
               [("real", sel, s) for sel in ("random", "greedy", "active")
                for s in ("win_ratio", "average_probability", "poe_gaussian", "poe_bradley_terry")]),
              ("real (solid) vs simulated: matched (dashed), FlanT5-3B-like (dotted)",
               [(k, "random", s) for k in ("real", "sim-matched", "sim-flant5")
                for s in ("win_ratio", "average_probability", "poe_gaussian")])]
    ls = {"random": "-", "greedy": "--", "active": ":", "real": "-", "sim-matched": "--", "sim-flant5": ":"}
    colour = {s: plt.cm.tab20(k) for k, s in enumerate(dict.fromkeys(MAIN + DEBIAS))}
    for ax, (name, lines) in zip(axes.flat, panels):
        for kind, sel, s in lines:
            pts = get(kind, sel, s)
            if not pts:
                continue
            x, m, lo, hi = (np.array(t) for t in zip(*pts))
            style = ls[sel] if name.startswith("real judge: random") else ls[kind] if name.startswith("real (") \
                else "-"
            ax.plot(x, m, marker=".", ms=3, ls=style, color=colour[s],
                    label=f"{LABELS.get(s, s)}" + (f" [{sel}]" if "greedy" in name else f" [{kind}]"
                                                   if name.startswith("real (") else ""))
            if name.startswith("real judge, random"):
                ax.fill_between(x, lo, hi, color=colour[s], alpha=0.08)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("comparisons per context R")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6, ncol=2)
    for ax in axes[:, 0]:
        ax.set_ylabel("Spearman (mean over contexts)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    if args.compilation_cache:
        import jax
        jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    lines = []
    say = lambda s="": (print(s, flush=True), lines.append(s))
    res = run(args, say)
    diffs = differences(res, args.boot, args.seed)
    tag = "efficiency_" + (args.tag or f"{args.data}_{res['label']}") + ("_smoke" if args.smoke else "")
    md = markdown(res, diffs, args)
    md[4:4] = lines + [""]          # the slice, before the judge's table
    md += [f"Time: {time.perf_counter() - t0:.0f} s in all (" + ", ".join(
        f"{k} {s} {t:.0f} s" for (k, s), t in res["times"].items()) + ")."]
    calib = ["judge_accuracy", "judge_p_a"]     # the (pooled / simulated) judge's accuracy and P(A)
    head = [k for k in res["rows"][0] if k not in EXTRA + calib]
    write_results(out / tag, md, res["rows"] + [dict(d, selection=d["versus"].split()[0], mean="", std="",
                                                     data=args.data, aspect=args.aspect) for d in diffs],
                  head + ["versus", "diff"] + EXTRA + calib)     # new columns last
    plot(res, out / f"{tag}.png", f"{args.data} {args.aspect}: {args.judge}, {res['jm'].mask.shape[0]} contexts x "
                                  f"{res['jm'].mask.shape[1]} candidates")
    print(f"wrote {out / tag}.{{md,csv,png}}", flush=True)
    return res


if __name__ == "__main__":
    main()
