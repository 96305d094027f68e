"""The general Product-of-Experts solver against the specialised scorers, on the PoE protocol's shapes.

Data: the PoE paper's SummEval protocol (``benchmarks/poe_protocol.py``): 100
articles x 16 summaries, the simulated FlanT5-3B-like judge, ``--repeats`` random
subsets of ``--budget`` of the 240 ordered pairs per article, all in one batch
``[repeats * 100, budget]``.

Side by side in one process, on the same ``Comparisons``:

* ``jr.poe_bradley_terry(c)`` (the specialised soft-BT Newton solver) against
  ``jr.fit_poe(c, ProductOfExpertsSolver(experts.soft_bradley_terry()))`` (the
  general solver, the curvature from autodiff of the expert's log-density);
  also with ``debias="learn"`` (a learnt ``gamma``);
* ``jr.poe_gaussian(c)`` (the closed form: one Cholesky solve per context)
  against the general solver with ``experts.gaussian()`` (a Newton pass from
  the least-squares start, and a second pass that confirms convergence).

Each pair is compiled first (first call timed, compile included), then timed in
interleaved rounds (``_report.interleaved``: every scorer once per round, so load
hits all alike); reported: median [min, max] seconds over the rounds, and the
ratio general / specialised as the median of the per-round ratios (goal: at most
1.5). The largest score difference between the two is reported too.

    python benchmarks/poe_general.py [--repeats 100] [--rounds 5] [--smoke]

``--smoke`` (10 repeats, 3 rounds) writes ``results/poe_general_smoke.{md,csv}``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import jaxrank as jr
from jaxrank.data import label_matrix, load_dataset
from jaxrank.scoring import experts
from _report import Report, interleaved, machine, spread  # noqa: E402  (benchmarks/ is on sys.path)
from poe_protocol import draw_subsets, simulate_judge  # noqa: E402


def pairs(c):
    """``{name: (specialised, general)}`` zero-argument functions, each blocking on its scores."""
    general = lambda e: (lambda: jax.block_until_ready(jr.fit_poe(c, jr.ProductOfExpertsSolver(e)).scores))
    block = lambda f: (lambda: jax.block_until_ready(f()))
    return {
        "soft_bt": (block(lambda: jr.poe_bradley_terry(c)), general(experts.soft_bradley_terry())),
        "soft_bt_learn": (block(lambda: jr.poe_bradley_terry(c, debias="learn")),
                          general(experts.soft_bradley_terry("learn"))),
        "gaussian": (block(lambda: jr.poe_gaussian(c)), general(experts.gaussian())),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=100, help="random subsets per article (default 100)")
    ap.add_argument("--budget", type=int, default=48, help="comparisons per article (default 48 of 240)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="10 repeats, 3 rounds")
    ap.add_argument("--out", default=None, help="output stem (default results/poe_general[_smoke])")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeats, args.rounds = min(args.repeats, 10), min(args.rounds, 3)
    rep = Report("poe_general", smoke=args.smoke, out=args.out)

    lm = label_matrix(load_dataset("summeval"), "coherence")
    h = lm.labels.astype(np.float64)
    contexts, n = h.shape
    p_full, pa, pb = simulate_judge(h, args.seed)
    sel = draw_subsets(len(pa), contexts, args.repeats, args.budget, args.seed)
    i = pa[sel].reshape(-1, args.budget).astype(np.int32)
    j = pb[sel].reshape(-1, args.budget).astype(np.int32)
    p = np.take_along_axis(p_full[None], sel, axis=2).reshape(-1, args.budget)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    b = c.batch_shape[0]

    rep.say(f"# General PoE solver vs the specialised scorers: SummEval protocol, [{b}, {args.budget}] "
            f"({args.repeats} repeats x {contexts} articles, {n} summaries)")
    rep.say()
    rep.say(f"Machine: {machine()}.")
    rep.say()
    fns = pairs(c)
    first, diffs, iters = {}, {}, {}
    for name, (spec, gen) in fns.items():
        for label, f in (("specialised", spec), ("general", gen)):
            t0 = time.perf_counter()
            f()
            first[name, label] = time.perf_counter() - t0
        diffs[name] = float(np.max(np.abs(np.asarray(spec()) - np.asarray(gen()))))
    for name, e in (("soft_bt", experts.soft_bradley_terry()), ("soft_bt_learn", experts.soft_bradley_terry("learn")),
                    ("gaussian", experts.gaussian())):
        sol = jr.fit_poe(c, jr.ProductOfExpertsSolver(e))
        iters[name] = (float(sol.iterations.mean()), int(sol.iterations.max()),
                       float(np.mean(np.asarray(sol.result) == jr.RESULTS.successful)))
    flat = {f"{name}/{label}": f for name, (spec, gen) in fns.items()
            for label, f in (("specialised", spec), ("general", gen))}
    times, loads = interleaved(flat, args.rounds)
    rows = []
    for name in fns:
        ts, tg = np.array(times[f"{name}/specialised"]), np.array(times[f"{name}/general"])
        ratio = tg / ts
        rows.append([name, spread(ts), spread(tg), spread(ratio, fmt="{:.2f}") + "x",
                     f"{first[name, 'specialised']:.2f} / {first[name, 'general']:.2f}", f"{diffs[name]:.1e}",
                     f"{iters[name][0]:.1f} / {iters[name][1]}", f"{100 * iters[name][2]:.1f}%"])
        rep.row(scorer=name, contexts=b, budget=args.budget, rounds=args.rounds,
                specialised_median_s=float(np.median(ts)), specialised_min_s=float(ts.min()),
                specialised_max_s=float(ts.max()), general_median_s=float(np.median(tg)),
                general_min_s=float(tg.min()), general_max_s=float(tg.max()),
                ratio_median=float(np.median(ratio)), ratio_min=float(ratio.min()), ratio_max=float(ratio.max()),
                first_specialised_s=first[name, "specialised"], first_general_s=first[name, "general"],
                max_abs_score_diff=diffs[name], general_iterations_mean=iters[name][0],
                general_successful=iters[name][2], load_median=float(np.median(loads)))
    rep.say(f"Steady state, {args.rounds} interleaved rounds: seconds per call on all {b} contexts, "
            "median [min, max]; ratio = general / specialised per round (goal <= 1.5x). First call = "
            "tracing + compilation + run. Iterations: general solver's passes per context (mean / max).")
    rep.say()
    rep.table(["pair", "specialised (s)", "general (s)", "ratio general/specialised", "first call spec / gen (s)",
               "max |score diff|", "general passes", "general successful"], rows)
    rep.say(f"Load average (1 min) per round: {', '.join(f'{x:.1f}' for x in loads)}.")
    ok = {r[0]: float(np.median(np.array(times[f'{r[0]}/general']) / np.array(times[f'{r[0]}/specialised'])))
          for r in rows}
    rep.say("Goal (general within 1.5x of the specialised scorer): " + ", ".join(
        f"{k} {'met' if v <= 1.5 else 'MISSED'} ({v:.2f}x)" for k, v in ok.items()) + ".")
    rep.write()


if __name__ == "__main__":
    main()
