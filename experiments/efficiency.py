"""Efficiency curves: Spearman with the humans vs the number of comparisons (PoE Figures 1 and 3).

For every budget ``R`` of a grid from ``N - 1`` to ``N(N-1)`` (default: every
multiple of ``N - 1``, plus the 20% point, 48 of 240 on SummEval), ``--subsets``
random subsets of ``R`` comparisons per context (PoE §4.2: 100), every scorer;
reported: the mean and std over subsets of the mean per-context Spearman
(METHODS.md §7). The sweep is :func:`jaxrank.studies.run_study`: one nested
selection per (subset, context), every budget a weight mask on it, one compiled
function per scorer for all budgets, subsets and contexts.

Judges:

* simulated (default): :mod:`jaxrank.simulate` on the real human scores of
  ``--data`` (every aspect, or ``--aspects``), calibrated to ``--accuracy`` and
  ``--p-a`` (default FlanT5-3B on SummEval coherence: 68.6% pairwise accuracy,
  LCA Table 7; P(A) = 0.37, LCA Table 5), a fresh judge per aspect;
* a judgement store (``--store PATH --judge NAME``, from ``jaxrank judge``):
  labels from ``--data``/``--aspects`` (one aspect) by context and candidate ids.

Studies (``--variants`` on the first aspect by default; all on the main one):

* ``main``: random selection, every scorer and the debiased variants
  (threshold-debiased win ratio, PoE-g with beta = mean p, PoE-BT with
  gamma from mean p or learnt);
* ``symmetric``: both orders of each selected pair, with and without permutation
  averaging for the hard-decision scorers;
* ``greedy`` / ``greedy_symmetric``: D-optimal selection (PoE eq. 16);
* ``unbiased``: the same judge accuracy with P(A) = 0.5, random selection, to
  see whether debiasing matters most for the biased judge (simulated judge only).

Writes ``efficiency_<tag>.{csv,md}`` and ``efficiency_<tag>[_<aspect>_variants].png``
to ``--out`` (default ``experiments/results``); ``--smoke`` is a seconds-long run
(8 contexts, 3 subsets, cheap scorers) whose files end in ``_smoke``.

    python experiments/efficiency.py [--data summeval] [--aspects coherence,...]
        [--store FILE --judge NAME] [--subsets 100] [--step 15] [--variants coherence|all|none]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # _common.py (the scripts' shared glue) beside this file

MAIN = ["win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_gaussian_hard",
        "poe_bradley_terry", "max_likelihood_ranking"]
DEBIAS = ["win_ratio_debiased", "poe_gaussian_debiased", "poe_bradley_terry_debiased", "poe_bradley_terry_learnt"]
SYMMETRIC = ["win_ratio", "win_ratio_permavg", "bradley_terry", "bradley_terry_permavg", "poe_gaussian_hard",
             "poe_gaussian_hard_permavg", "average_probability", "poe_gaussian", "poe_bradley_terry"]
GREEDY = ["win_ratio", "average_probability", "poe_gaussian", "poe_bradley_terry"]
UNBIASED = ["win_ratio", "win_ratio_debiased", "average_probability", "poe_gaussian", "poe_gaussian_debiased",
            "poe_bradley_terry", "poe_bradley_terry_debiased", "poe_bradley_terry_learnt"]
SMOKE = {"win_ratio", "win_ratio_permavg", "average_probability", "poe_gaussian", "poe_gaussian_debiased"}
"""The smoke run's scorers (cheap to compile); it skips the greedy symmetric study."""
PAPER_R48 = "win ratio 34.1, BT 36.6, avg prob 38.4, PoE-BT 42.6, PoE-g 42.4; all 43.6-44.3 at R = 240"


def write_results(stem, lines: list[str], rows: list[dict], fieldnames: list[str] | None = None) -> None:
    """An experiment's result files: ``<stem>.md`` (the markdown ``lines``) and ``<stem>.csv`` (``rows``, floats
    to 6 significant digits; the columns are ``fieldnames``, by default the keys of the first row)."""
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    with open(f"{stem}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if fieldnames is None else fieldnames)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="summeval", help="data set of the human scores (default summeval)")
    ap.add_argument("--aspects", default=None, help="comma-separated aspects (default: all of --data; "
                                                    "one for a store)")
    ap.add_argument("--contexts", default=None, help="slice of contexts, e.g. 0:20 (default all)")
    ap.add_argument("--store", default=None, help="judgement store (.jsonl) from `jaxrank judge`")
    ap.add_argument("--judge", default=None, help="judge name in --store")
    ap.add_argument("--template", default=None, help="template name in --store (if it holds several)")
    ap.add_argument("--accuracy", type=float, default=0.686, help="simulated judge's pairwise accuracy "
                                                                  "(default 0.686: FlanT5-3B, LCA Table 7)")
    ap.add_argument("--p-a", type=float, default=0.37, help="simulated judge's P(A) (default 0.37, LCA Table 5)")
    ap.add_argument("--item-noise", type=float, default=1.5, help="simulated judge's per-candidate noise")
    ap.add_argument("--subsets", type=int, default=100, help="random subsets per budget (default 100)")
    ap.add_argument("--step", type=int, default=None, help="budget grid step (default N - 1)")
    ap.add_argument("--budgets", default=None, help="extra budgets, comma-separated (default: 20%% of N(N-1))")
    ap.add_argument("--scorers", default=None, help="scorers of the main study (default: all + debiased)")
    ap.add_argument("--variants", default=None, help="aspects that get the symmetric/greedy/unbiased studies: "
                                                     "names, 'all' or 'none' (default: the first aspect)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=40_000, help="problems per batched call (memory vs speed)")
    ap.add_argument("--compilation-cache", metavar="DIR", default=None, help="JAX persistent compilation cache")
    ap.add_argument("--out", default=None, help="output folder (default experiments/results)")
    ap.add_argument("--tag", default=None, help="file name tag (default from the data and judge)")
    ap.add_argument("--smoke", action="store_true", help="tiny run: 8 contexts, 3 subsets, cheap scorers")
    return ap.parse_args(argv)


def load_judges(args):
    """``{aspect: {"biased": JudgeMatrix, "unbiased": JudgeMatrix | None}}`` and the tag."""
    from _common import load_judge
    from jaxrank import data

    aspects = args.aspects.split(",") if args.aspects else list(data.ASPECTS[args.data])
    if args.store and not args.judge:
        raise SystemExit("--store needs --judge")
    common = dict(data=args.data, contexts=args.contexts, item_noise=args.item_noise, accuracy=args.accuracy)
    try:
        if args.store:
            j, label = load_judge(aspect=aspects[0], store=args.store, judge=args.judge, template=args.template,
                                  **common)
            return {aspects[0]: dict(biased=j, unbiased=None)}, args.tag or f"{args.data}_{label}"
        ds = data.load_dataset(args.data)
        judges = {}
        for k, aspect in enumerate(aspects):
            kw = dict(common, aspect=aspect, seed=args.seed + k, dataset=ds)
            biased, label = load_judge(p_a=args.p_a, **kw)
            judges[aspect] = dict(biased=biased,
                                  unbiased=load_judge(p_a=0.5, **kw)[0] if args.p_a != 0.5 else None)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return judges, args.tag or f"{args.data}_{label}"


def run(args, judges, say):
    """Every study; returns the rows and the timings."""
    from jaxrank import studies as ex
    from jaxrank.simulate import judge_stats

    keep = (lambda names: [s for s in names if s in SMOKE]) if args.smoke else (lambda names: names)
    main_scorers = args.scorers.split(",") if args.scorers else MAIN + DEBIAS
    variants = set(judges) if args.variants == "all" else set() if args.variants == "none" else \
        set(args.variants.split(",")) if args.variants else {next(iter(judges))}
    rows, times = [], {}
    for aspect, pair in judges.items():
        jb = pair["biased"]
        n = jb.mask.shape[-1]
        extra = [int(x) for x in args.budgets.split(",")] if args.budgets else [round(0.2 * n * (n - 1))]
        grid = ex.budget_grid(n, step=args.step, extra=extra)
        sym_grid = ex.budget_grid(n, step=args.step, extra=extra, symmetric=True)
        st = judge_stats(jb.probs, jb.labels, jb.mask) if jb.complete else None
        say(f"- {aspect}: {jb.name}; {jb.mask.shape[0]} contexts x up to {n} candidates"
            + (f"; measured accuracy {st['accuracy']:.3f}, P(A) {st['p_a']:.3f}, mean p {st['mean_p']:.3f}"
               if st else "; incomplete (not every pair judged): random selection of the judged pairs only"))
        studies = [("main", jb, "biased", "random", False, keep(main_scorers), grid)]
        if aspect in variants and jb.complete:
            studies += [("symmetric", jb, "biased", "random", True, keep(SYMMETRIC), sym_grid),
                        ("greedy", jb, "biased", "greedy", False, keep(GREEDY), grid)]
            if not args.smoke:
                studies.append(("greedy_symmetric", jb, "biased", "greedy", True, keep(GREEDY), sym_grid))
            if pair["unbiased"] is not None:
                studies.append(("unbiased", pair["unbiased"], "unbiased", "random", False, keep(UNBIASED), grid))
        for study, judge, tag, selection, symmetric, scorers, budgets in studies:
            t0 = time.perf_counter()
            r, _ = ex.run_study(judge, scorers=scorers, budgets=budgets, num_subsets=args.subsets, seed=args.seed,
                                selection=selection, symmetric=symmetric, chunk=args.chunk, aspect=aspect,
                                study=study, judge_kind=tag, num_items=n)
            times[(aspect, study)] = time.perf_counter() - t0
            print(f"  {aspect} {study}: {len(scorers)} scorers x {len({x['budget'] for x in r})} budgets x "
                  f"{args.subsets} subsets x {judge.mask.shape[0]} contexts in {times[(aspect, study)]:.1f}s",
                  flush=True)
            rows += r
    return rows, times


def lookup(rows, **match):
    """The first row matching every field, or None."""
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def table(rows, aspect, study, budgets):
    """Markdown table: one row per scorer, mean ± std at each budget."""
    sub = [r for r in rows if r["aspect"] == aspect and r["study"] == study]
    scorers = list(dict.fromkeys(r["scorer"] for r in sub))
    cols = [b for b in budgets if any(r["budget"] == b for r in sub)]
    from _common import LABELS
    out = ["| scorer | " + " | ".join(f"R = {b}" for b in cols) + " |", "|---|" + "---:|" * len(cols)]
    for s in scorers:
        cells = []
        for b in cols:
            r = lookup(sub, scorer=s, budget=b)
            cells.append("" if r is None else f"{r['mean']:.4f} ± {r['std']:.4f}")
        out.append(f"| {LABELS.get(s, s)} | " + " | ".join(cells) + " |")
    return out


def findings(rows, judges):
    """A short paragraph on the papers' qualitative findings, computed from the rows."""
    out = []
    fmt = lambda x: f"{100 * x:.1f}"
    ok_order, where = [], []
    for aspect, pair in judges.items():
        n = pair["biased"].mask.shape[-1]
        r20, full = round(0.2 * n * (n - 1)), max(r["budget"] for r in rows if r["aspect"] == aspect
                                                    and r["study"] == "main")
        v = lambda s, b=r20, study="main", judge="biased": (lookup(rows, aspect=aspect, study=study, scorer=s,
                                                                    budget=b, judge_kind=judge) or {}).get("mean")
        wr, ap = v("win_ratio"), v("average_probability")
        poe = {name: v(s) for name, s in (("PoE-g", "poe_gaussian"), ("PoE-BT", "poe_bradley_terry"))
               if v(s) is not None}
        if wr is not None and ap is not None and poe:
            holds = max(poe.values()) > ap > wr
            ok_order.append(holds)
            where.append(f"{aspect} {'yes' if holds else 'NO'} (win ratio {fmt(wr)}, avg prob {fmt(ap)}, "
                         + ", ".join(f"{k} {fmt(x)}" for k, x in poe.items()) + ")")
        at_full = {r["scorer"]: r["mean"] for r in rows if r["aspect"] == aspect and r["study"] == "main"
                   and r["budget"] == full and not r["scorer"].endswith(("debiased", "learnt"))}
        stds = [r["std"] for r in rows if r["aspect"] == aspect and r["study"] == "main" and r["budget"] == full]
        if at_full:
            lo, hi = min(at_full, key=at_full.get), max(at_full, key=at_full.get)
            out.append(f"{aspect}: at R = {full} (every comparison) the scorers span {fmt(at_full[lo])} "
                       f"({lo}) to {fmt(at_full[hi])} ({hi}), spread {fmt(at_full[hi] - at_full[lo])} points, std "
                       f"over subsets {max(stds):.1e}; at R = {r20} the spread is "
                       f"{fmt(max(v(s) for s in at_full) - min(v(s) for s in at_full))} points.")
        for study, base, what in (("greedy", "main", "greedy instead of random selection"),
                                  ("greedy_symmetric", "symmetric", "greedy instead of random symmetric selection"),
                                  ("symmetric", "main", "symmetric instead of random selection")):
            d = [(s, v(s, study=study), v(s, study=base)) for s in ("win_ratio", "average_probability",
                                                                    "poe_gaussian", "poe_bradley_terry")]
            d = [(s, a - b) for s, a, b in d if a is not None and b is not None]
            if d:
                out.append(f"{aspect}, R = {r20}: {what} changes " + ", ".join(
                    f"{s} by {100 * x:+.1f}" for s, x in d) + " points.")
        perm = [(s, [v(f"{s}_permavg", b, "symmetric") - v(s, b, "symmetric") for b in (r20, full)])
                for s in ("win_ratio", "bradley_terry", "poe_gaussian_hard")
                if None not in (v(f"{s}_permavg", r20, "symmetric"), v(s, r20, "symmetric"),
                                v(f"{s}_permavg", full, "symmetric"), v(s, full, "symmetric"))]
        if perm:
            out.append(f"{aspect}, symmetric selection: permutation averaging before deciding changes " + ", ".join(
                f"{s} by {100 * a:+.1f} (R = {r20}) / {100 * b:+.1f} (R = {full})" for s, (a, b) in perm)
                + " points (the soft scorers are permutation-averaged already on a symmetric set).")
        gains = {}
        for judge in ("biased", "unbiased"):
            pairs = [("win_ratio_debiased", "win_ratio"), ("poe_gaussian_debiased", "poe_gaussian"),
                     ("poe_bradley_terry_debiased", "poe_bradley_terry"), ("poe_bradley_terry_learnt",
                                                                           "poe_bradley_terry")]
            g = {a: v(a, study="main" if judge == "biased" else "unbiased", judge=judge)
                 - v(b, study="main" if judge == "biased" else "unbiased", judge=judge) for a, b in pairs
                 if None not in (v(a, study="main" if judge == "biased" else "unbiased", judge=judge),
                                 v(b, study="main" if judge == "biased" else "unbiased", judge=judge))}
            if g:
                gains[judge] = g
        if "biased" in gains:
            pa = pair["biased"].probs[pair["biased"].observed]
            text = f"{aspect}, R = {r20}, debiasing gain (biased judge, P(A) {np.mean(pa > 0.5):.2f}): " + ", ".join(
                f"{s} {100 * x:+.1f}" for s, x in gains["biased"].items())
            if "unbiased" in gains:
                common = [s for s in gains["biased"] if s in gains["unbiased"]]
                more = sum(gains["biased"][s] > gains["unbiased"][s] for s in common)
                text += ("; unbiased judge (P(A) 0.50): " + ", ".join(f"{s} {100 * gains['unbiased'][s]:+.1f}"
                                                                      for s in common)
                         + f"; debiasing helps the biased judge more for {more} of {len(common)} variants")
            out.append(text + ".")
    head = []
    if ok_order:
        head.append(f"PoE (best of PoE-g, PoE-BT) > average probability > win ratio at 20% of the comparisons: "
                    f"{sum(ok_order)} of {len(ok_order)} aspects ({'; '.join(where)}). Paper (FlanT5-3B, SummEval "
                    f"coherence, R = 48): {PAPER_R48}.")
    return head + out


def plot_main(rows, judges, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import LABELS

    aspects = list(judges)
    ncol = 2 if len(aspects) == 4 else min(3, len(aspects))
    nrow = -(-len(aspects) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.6 * nrow), squeeze=False)
    for ax in axes.flat[len(aspects):]:
        ax.set_visible(False)
    for ax, aspect in zip(axes.flat, aspects):
        sub = [r for r in rows if r["aspect"] == aspect and r["study"] == "main"]
        for s in dict.fromkeys(r["scorer"] for r in sub):
            if s.endswith(("debiased", "learnt")):
                continue
            pts = sorted((r["budget"], r["mean"], r["std"]) for r in sub if r["scorer"] == s)
            x, m, sd = (np.array(t) for t in zip(*pts))
            ax.plot(x, m, marker=".", label=LABELS.get(s, s))
            ax.fill_between(x, m - sd, m + sd, alpha=0.15)
        ax.set_title(aspect)
        ax.set_xlabel("comparisons per context R")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("Spearman (mean over contexts)")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_variants(rows, aspect, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import LABELS

    base = lambda s: s.replace("_permavg", "").replace("_debiased", "").replace("_learnt", "")
    colour = {name: f"C{k}" for k, name in enumerate(MAIN)}
    studies = {"main": "C0", "symmetric": "C1", "greedy": "C2", "greedy_symmetric": "C3"}
    dash = {"poe_gaussian": "-", "poe_bradley_terry": "--", "average_probability": ":"}
    panels = [("selection: colour = scheme, line = scorer", [(st, s) for st in studies for s in dash]),
              ("symmetric selection, permutation averaging (dashed)",
               [("symmetric", s) for s in SYMMETRIC if "prob" not in s]),
              ("debiasing (dashed), biased judge", [("main", s) for s in UNBIASED]),
              ("debiasing (dashed), unbiased judge (P(A) = 0.5)", [("unbiased", s) for s in UNBIASED])]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    for ax, (name, lines) in zip(axes.flat, panels):
        for study, s in lines:
            pts = sorted((r["budget"], r["mean"]) for r in rows if r["aspect"] == aspect and r["study"] == study
                         and r["scorer"] == s)
            if not pts:
                continue
            x, m = zip(*pts)
            if name.startswith("selection"):
                style = dict(color=studies[study], ls=dash[s], label=f"{LABELS[s]} [{study}]")
            else:
                style = dict(color=colour.get(base(s), "k"), ls="-" if base(s) == s else "--",
                             label=LABELS.get(s, s))
                if s.endswith("learnt"):
                    style["ls"] = ":"
            ax.plot(x, m, marker=".", ms=3, **style)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("comparisons per context R")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6, ncol=2 if name.startswith("selection") else 1)
    for ax in axes[:, 0]:
        ax.set_ylabel("Spearman (mean over contexts)")
    fig.suptitle(f"{title}: {aspect}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    if args.smoke:
        args.subsets = min(args.subsets, 3)
        args.contexts = args.contexts or "0:8"
    if args.compilation_cache:
        import jax
        jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    out_dir = Path(args.out) if args.out else Path(__file__).parent / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    judges, tag = load_judges(args)
    tag = "efficiency_" + tag + ("_smoke" if args.smoke else "")
    lines = []
    say = lambda s="": (print(s, flush=True), lines.append(s))
    say(f"# Efficiency curves: {args.data}, {'store ' + args.store if args.store else 'simulated judge'}")
    say()
    say(f"Mean and std over {args.subsets} random subsets of the mean per-context Spearman with the human scores.")
    t1 = time.perf_counter()
    rows, times = run(args, judges, say)
    t_sweep = time.perf_counter() - t1
    main_t = sum(t for (a, s), t in times.items() if s == "main")
    say()
    say(f"Time: main studies {main_t:.1f}s, all studies {t_sweep:.1f}s, total with data and judges "
        f"{time.perf_counter() - t0:.1f}s (compilation included).")
    for aspect, pair in judges.items():
        n = pair["biased"].mask.shape[-1]
        cols = sorted({n - 1, round(0.2 * n * (n - 1)), n * (n - 1) // 2, n * (n - 1)})
        for study in dict.fromkeys(r["study"] for r in rows if r["aspect"] == aspect):
            say()
            say(f"## {aspect}: {study}")
            say()
            for line in table(rows, aspect, study, cols):
                say(line)
    say()
    say("## Findings")
    say()
    for f in findings(rows, judges):
        say(f"- {f}")
    title = f"{args.data}: {next(iter(judges.values()))['biased'].name}"
    plot_main(rows, judges, out_dir / f"{tag}.png", title)
    for aspect in dict.fromkeys(r["aspect"] for r in rows if r["study"] != "main"):
        plot_variants(rows, aspect, out_dir / f"{tag}_{aspect}_variants.png", title)
    write_results(out_dir / tag, lines, rows)
    print(f"wrote {out_dir / tag}.{{md,csv,png}}")
    return rows


if __name__ == "__main__":
    main()
