"""The joint distribution of the judge's probability and the human score difference (PoE Figures 9/10).

For every judged ordered pair ``(a, b)`` (``a`` in position A): the judge's
``p = P(A better)`` against the human score difference ``h_a - h_b``. Shows:

* a 2D histogram (hexbin) of ``p`` vs ``h_a - h_b``, with the mean ``p`` (± std)
  per score difference (:func:`jaxrank.studies.binned_mean`);
* the fraction of decisions for A per score difference;
* two fitted models of ``E[p | dh]``: the linear-Gaussian PoE's straight line
  (PoE eq. 11: ``p`` linear in the score difference, constant variance; its
  intercept at ``dh = 0`` is the positional bias ``beta``) and the Bradley-Terry
  sigmoid ``sigmoid(k dh + c)``.

Judges: a judgement store (``--store PATH --judge NAME``, from ``jaxrank judge``)
or the simulated judge (default: FlanT5-3B-like on SummEval coherence, 68.6%
accuracy, P(A) = 0.37; :mod:`jaxrank.simulate`). Writes
``judge_vs_human_<tag>.{png,csv,md}`` to ``--out`` (default
``experiments/results``; ``_smoke`` names with ``--smoke``).

    python experiments/judge_vs_human.py [--data summeval] [--aspect coherence]
        [--store FILE --judge NAME | --accuracy 0.686 --p-a 0.37] [--out DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # _common.py (the scripts' shared glue) beside this file


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="summeval", help="data set of the human scores (default summeval)")
    ap.add_argument("--aspect", default="coherence", help="human aspect (default coherence)")
    ap.add_argument("--contexts", default=None, help="slice of contexts, e.g. 0:20 (default all)")
    ap.add_argument("--store", default=None, help="judgement store (.jsonl) from `jaxrank judge`")
    ap.add_argument("--judge", default=None, help="judge name in --store")
    ap.add_argument("--template", default=None, help="template name in --store (if it holds several)")
    ap.add_argument("--accuracy", type=float, default=0.686, help="simulated judge's pairwise accuracy")
    ap.add_argument("--p-a", type=float, default=0.37, help="simulated judge's P(A)")
    ap.add_argument("--item-noise", type=float, default=1.5, help="simulated judge's per-candidate noise")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output folder (default experiments/results)")
    ap.add_argument("--tag", default=None, help="file name tag (default from the data, aspect and judge)")
    ap.add_argument("--smoke", action="store_true", help="tiny run (10 contexts), files named *_smoke")
    return ap.parse_args(argv)


def judge_of(args):
    """The judge of the command line (a store or simulated) and the file tag."""
    from _common import load_judge

    if args.store and not args.judge:
        raise SystemExit("--store needs --judge")
    try:
        j, label = load_judge(data=args.data, aspect=args.aspect, contexts=args.contexts, store=args.store,
                              judge=args.judge, template=args.template, accuracy=args.accuracy, p_a=args.p_a,
                              item_noise=args.item_noise, seed=args.seed)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return j, args.tag or f"{args.data}_{args.aspect}_{label}"


def fit_models(dh, p):
    """Least-squares line ``p = beta + slope dh`` and sigmoid ``p = sigmoid(k dh + c)``; with their R^2."""
    from scipy import optimize
    from scipy.special import expit

    a = np.stack([np.ones_like(dh), dh], 1)
    (beta, slope), *_ = np.linalg.lstsq(a, p, rcond=None)
    tot = np.sum((p - p.mean()) ** 2)
    r2_lin = 1 - np.sum((p - beta - slope * dh) ** 2) / tot
    (k, c), _ = optimize.curve_fit(lambda x, k, c: expit(k * x + c), dh, p, p0=(1.0, 0.0))
    r2_sig = 1 - np.sum((p - expit(k * dh + c)) ** 2) / tot
    return dict(beta=float(beta), slope=float(slope), r2_linear=float(r2_lin), k=float(k), c=float(c),
                r2_sigmoid=float(r2_sig))


def plot(dh, p, bins, fits, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.special import expit

    x = np.array([b["dh"] for b in bins])
    m = np.array([b["mean_p"] for b in bins])
    sd = np.array([b["std_p"] for b in bins])
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.2))
    ax = axes[0]
    hb = ax.hexbin(dh, p, gridsize=(30, 20), bins="log", cmap="viridis", mincnt=1)
    fig.colorbar(hb, ax=ax, label="judged pairs (log)")
    ax.errorbar(x, m, yerr=sd, color="red", marker="o", ms=3, lw=1, capsize=2, label="mean p ± std")
    xs = np.linspace(dh.min(), dh.max(), 100)
    ax.plot(xs, fits["beta"] + fits["slope"] * xs, "k--", lw=1.2, label="linear fit (PoE-g)")
    ax.plot(xs, expit(fits["k"] * xs + fits["c"]), "orange", lw=1.2, label="sigmoid fit (BT)")
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("human score difference h_A - h_B")
    ax.set_ylabel("judge p = P(A better)")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[1]
    ax.plot(x, m, marker="o", label="mean p")
    ax.plot(x, [b["frac_a"] for b in bins], marker="s", label="fraction of decisions for A (p > 0.5)")
    ax.plot(x, sd, marker="^", label="std of p (PoE-g assumes constant)")
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("human score difference h_A - h_B")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    from jaxrank import studies as ex

    args = parse_args(argv)
    if args.smoke:
        args.contexts = args.contexts or "0:10"
    out_dir = Path(args.out) if args.out else Path(__file__).parent / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    judge, tag = judge_of(args)
    stem = out_dir / ("judge_vs_human_" + tag + ("_smoke" if args.smoke else ""))
    p, dh = ex.judge_human_pairs(judge)
    bins = ex.binned_mean(dh, p)
    fits = fit_models(dh, p)
    diff = dh != 0
    acc = float(((p > 0.5) == (dh > 0))[diff].mean())
    corr = float(np.corrcoef(p, dh)[0, 1])
    lines = [f"# Judge vs human: {args.data} {args.aspect}, {judge.name}", "",
             f"{len(p)} judged ordered pairs in {judge.mask.shape[0]} contexts. Pairwise accuracy "
             f"{acc:.3f} (pairs with different human scores), P(A) = {np.mean(p > 0.5):.3f}, mean p = "
             f"{p.mean():.3f}, Pearson(p, h_A - h_B) = {corr:.3f}.", "",
             f"Linear-Gaussian fit (PoE eq. 11): E[p] = {fits['beta']:.3f} + {fits['slope']:.3f} (h_A - h_B), "
             f"R^2 = {fits['r2_linear']:.3f}; the intercept is the bias beta (0.5 for an unbiased judge). "
             f"Sigmoid fit (Bradley-Terry): E[p] = sigmoid({fits['k']:.3f} (h_A - h_B) + {fits['c']:.3f}), "
             f"R^2 = {fits['r2_sigmoid']:.3f}. Std of p per score difference from {min(b['std_p'] for b in bins):.3f} "
             f"to {max(b['std_p'] for b in bins):.3f} (PoE-g assumes it constant).", "",
             "| h_A - h_B | pairs | mean p | std p | fraction p > 0.5 |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {b['dh']:+.3f} | {b['count']} | {b['mean_p']:.3f} | {b['std_p']:.3f} | {b['frac_a']:.3f} |"
              for b in bins]
    print("\n".join(lines))
    plot(dh, p, bins, fits, stem.with_suffix(".png"), f"{args.data} {args.aspect}: {judge.name}")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    with open(stem.with_suffix(".csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(bins[0]))
        w.writeheader()
        w.writerows(bins)
    print(f"wrote {stem}.{{png,md,csv}}")
    return dict(bins=bins, fits=fits, accuracy=acc, p_a=float(np.mean(p > 0.5)))


if __name__ == "__main__":
    main()
