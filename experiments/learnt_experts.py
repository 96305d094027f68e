"""Learnt experts: fixed PoE-g / PoE-BT against a learnt judge calibration, on held-out contexts.

For each data set (SummEval coherence, HANNA coherence by default) the contexts are
split in half. A calibration of the judge (:mod:`jaxrank.calibration`) is learnt on the
*train* half from all its comparisons, with :func:`jaxrank.learning.fit` (optax adam):

* ``unsup``: temperature + bias per judge, to the marginal likelihood of the judge's
  outputs (Gaussian evidence of the calibrated logit margins, eq. E1 of
  :mod:`jaxrank.learning`; needs no human scores);
* ``sup``: temperature + bias, and ``sup-spline`` a monotone spline, to the pairwise
  logistic loss (eq. L1) of the calibrated PoE-g scores against the human order, on
  random subsets of the train contexts at the budgets below the full set (on the full,
  symmetric set a positional bias cancels out of the scores and could not be learnt).

Every method is then scored on the *test* half across budgets (fractions of the
``N(N-1)`` comparisons, nested random subsets, ``--subsets`` per budget): the mean over
subsets of the per-context Spearman, averaged over held-out contexts, with a 95%
percentile bootstrap interval over held-out contexts (``--boot`` resamples), and the
paired difference of each learnt method from its fixed scorer.

Judges: simulated on the real human scores (:func:`jaxrank.studies.simulated_judge`) at
FlanT5-3B's SummEval accuracy (68.6%, P(A) = 0.37; LCA Tables 5, 7; the same targets on
HANNA, whose pairwise accuracy the papers do not report), then passed through a
non-linear monotone distortion of the logit margin (``x -> 2 sign(x) |x|^0.6``: an
under-confident, saturating judge) that keeps every decision, so accuracy and P(A) are
unchanged. A second simulated judge (accuracy 0.65, P(A) 0.55, over-confident
``x -> 2 x``) makes a product of two judges (``product``: both judges' comparisons
concatenated, each judge with its own learnt calibration). A judgement store from
``jaxrank judge`` (``--store FILE --judge NAME --store-aspect ASPECT``) adds its judge, and
``--hanna-llm`` the real LLMs whose ratings HANNA stores (Beluga-13B, OrcaPlatypus,
Mistral-7B, Llama-13B, ChatGPT; ``p`` = the share of their four rating variants in which
A beats B, :func:`jaxrank.judges.replay_probabilities`); ``--data ""`` leaves the
simulated judges out.

Writes ``learnt_experts[_smoke].{csv,md}`` and ``learnt_experts_<data>[_smoke].png`` to
``--out`` (default ``experiments/results``). With ``--merge`` the files already there keep the
rows of every data set this run does not compute (the settings must match), so one row can be
rerun alone. The stored results were made by

    python experiments/learnt_experts.py --store experiments/results/stores/summeval-relevance-minilm-l6.jsonl \
        --judge minilm-l6-cos-k20 --store-data summeval --store-aspect relevance

(the store from ``jaxrank judge --data summeval --aspect relevance --judge minilm-l6 --store FILE``, about
two minutes on 2 cores; ``--data "" --merge`` with the same store options reruns its row alone) and
``--data "" --hanna-llm all --out experiments/results/learnt_experts_hanna_llm``.

    python experiments/learnt_experts.py [--data summeval,hanna] [--subsets 20] [--smoke]
        [--store FILE --judge NAME --store-data summeval --store-aspect relevance]
        [--hanna-llm all --hanna-aspect coherence] [--out DIR] [--merge]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # _common.py beside this file

from jaxrank import calibration as cal  # noqa: E402
from jaxrank import learning, metrics, studies  # noqa: E402
from jaxrank.comparisons import Comparisons  # noqa: E402
from jaxrank.scoring import poe_bradley_terry, poe_gaussian  # noqa: E402
from efficiency import write_results  # noqa: E402  (the result files, as efficiency.py writes them)

FRACTIONS = (0.1, 0.2, 0.3, 0.5, 1.0)
ASPECT = {"summeval": "coherence", "hanna": "coherence"}


def distort(probs, kind):
    """A monotone, decision-keeping distortion of the judge's logit margin."""
    x = np.log(np.clip(probs, 1e-6, 1 - 1e-6)) - np.log1p(-np.clip(probs, 1e-6, 1 - 1e-6))
    y = 2 * np.sign(x) * np.abs(x) ** 0.6 if kind == "saturating" else 2 * x
    return (1 / (1 + np.exp(-y))).astype(np.float32)


def fixed_g(params, c, judge):
    return poe_gaussian(c)


def fixed_bt(params, c, judge):
    return poe_bradley_terry(c)


LEARNT_G = learning.calibrated(poe_gaussian)
LEARNT_BT = learning.calibrated(poe_bradley_terry)


@functools.partial(jax.jit, static_argnames=("score_fn",))
def curve(params, sel: Comparisons, judge, slot, labels, mask, budgets, score_fn):
    """Per-context Spearman ``[B, S, C]`` of ``score_fn`` on ``sel [S, C, R]`` cut to each budget (slot < budget)."""
    live = (slot[None, :] < budgets[:, None]).astype(sel.weight.dtype)          # [B, R]
    shape = budgets.shape + sel.p.shape
    bc = lambda x: jnp.broadcast_to(x, budgets.shape + x.shape)
    c = Comparisons(i=bc(sel.i), j=bc(sel.j), p=bc(sel.p), weight=sel.weight[None] * live[:, None, None, :],
                    item_mask=bc(sel.item_mask), num_items=sel.num_items)
    judge = jnp.broadcast_to(judge, shape)
    scores = score_fn(params, c, judge)
    return metrics.spearman(scores, jnp.broadcast_to(labels, scores.shape), where=jnp.broadcast_to(mask, scores.shape))


def take(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def full_comparisons(jm, idx):
    c = Comparisons.from_matrix(jm.probs[idx], mask=jm.observed[idx])
    return Comparisons(c.i, c.j, c.p, c.weight, jnp.asarray(jm.mask[idx]), c.num_items)


def learn(judges, train, labels, mask, steps, seed=0):
    """Every learnt calibration of ``judges`` (a list of JudgeMatrix) on the train contexts.

    The unsupervised fit sees every comparison of the train contexts. The supervised fits
    see what the scorer will see at test time: ``TRAIN_SUBSETS`` random subsets per train
    context, one per budget of ``FRACTIONS`` below 1 (on the full, symmetric set a
    positional bias cancels out of the scores, so the ranking loss could not learn it).
    """
    parts = [full_comparisons(j, train) for j in judges]
    c, judge = cal.concatenate_judges(parts)
    nj = len(judges)
    out = {}
    ev = learning.fit(learning.marginal_nll, learning.EvidenceParams(cal.identity_temperature_bias(nj), jnp.zeros(())),
                      c, judge, steps=steps)
    out["unsup"] = ev.params.calibration
    n = mask.shape[-1]
    full = n * (n - 1)
    fractions = [f for f in FRACTIONS if f < 1]
    key = jax.random.fold_in(jax.random.key(seed), 1000)
    subsets = []
    for k, jm in enumerate(judges):
        jt = studies.JudgeMatrix(*(x[train] for x in jm[:4]), jm.name)
        sel = studies.select_nested(jt, num_subsets=len(fractions), max_budget=full, key=jax.random.fold_in(key, k))
        live = np.arange(full)[None, :] < (np.array(fractions) * full / nj).round()[:, None]     # [F, R]
        subsets.append(Comparisons(sel.i, sel.j, sel.p, sel.weight * jnp.asarray(live[:, None, :], sel.weight.dtype),
                                   sel.item_mask, sel.num_items))
    sub, sub_judge = cal.concatenate_judges(subsets)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    sub, sub_judge = jax.tree.map(flat, sub), flat(sub_judge)
    lab = jnp.tile(jnp.asarray(labels[train]), (len(fractions), 1))
    m = jnp.tile(jnp.asarray(mask[train]), (len(fractions), 1))
    for name, p0 in (("sup", cal.identity_temperature_bias(nj)), ("sup-spline", cal.identity_spline(nj))):
        loss = functools.partial(learning.ranking_loss, score_fn=LEARNT_G)
        out[name] = learning.fit(loss, p0, sub, sub_judge, lab, m, steps=steps).params
    return out


def bootstrap_ci(per_context, boot, seed=0):
    """Mean over contexts and its 95% percentile bootstrap interval (NaN contexts dropped)."""
    x = per_context[~np.isnan(per_context)]
    idx = np.random.default_rng(seed).integers(0, len(x), (boot, len(x)))
    means = x[idx].mean(1)
    return float(x.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def study(name, judges, labels, mask, args, say):
    """One data set: learn on train contexts, evaluate every method on held-out contexts across budgets."""
    C, n = mask.shape
    train, test = learning.split_contexts(C, 0.5, seed=args.seed)
    full = n * (n - 1)
    budgets = np.array(sorted({max(n - 1, round(f * full)) for f in FRACTIONS}), np.int32)
    t0 = time.perf_counter()
    learnt = {"judge 1": learn(judges[:1], train, labels, mask, args.steps, args.seed)}
    if len(judges) > 1:
        learnt["judge 2"] = learn(judges[1:2], train, labels, mask, args.steps, args.seed)
        learnt["product"] = learn(judges, train, labels, mask, args.steps, args.seed)
    t_learn = time.perf_counter() - t0
    key = jax.random.key(args.seed)
    sels = []
    for k, jm in enumerate(judges):
        sel = studies.select_nested(jm, num_subsets=args.subsets, max_budget=full, key=jax.random.fold_in(key, k))
        sels.append(take(sel, (slice(None), test)))
    lab, m = jnp.asarray(labels[test]), jnp.asarray(mask[test])
    slot1 = jnp.arange(full)
    rows, t1 = [], time.perf_counter()
    for who, parts in (("judge 1", [0]), ("judge 2", [1]), ("product", [0, 1])):
        if max(parts) >= len(judges):
            continue
        sel, judge = cal.concatenate_judges([sels[k] for k in parts])
        slot = jnp.concatenate([slot1] * len(parts))
        # the product sees the same total budget: each judge's first budget / (number of judges) slots
        bud = jnp.asarray(np.maximum(budgets // len(parts), 1))
        methods = {"PoE-g": (fixed_g, None), "PoE-BT": (fixed_bt, None)}
        for lname, params in learnt[who].items():
            methods[f"PoE-g {lname}"] = (LEARNT_G, params)
            methods[f"PoE-BT {lname}"] = (LEARNT_BT, params)
        per = {}
        for meth, (fn, params) in methods.items():
            rho = np.asarray(curve(params, sel, judge, slot, lab, m, bud, fn))     # [B, S, C]
            per[meth] = np.nanmean(rho, axis=1)                                      # [B, C] mean over subsets
        for meth, v in per.items():
            base = per["PoE-BT" if "BT" in meth else "PoE-g"]
            for b, r in enumerate(budgets):
                mean, lo, hi = bootstrap_ci(v[b], args.boot)
                dm, dlo, dhi = bootstrap_ci(v[b] - base[b], args.boot)
                rows.append(dict(data=name, judge=who, method=meth, budget=int(r), fraction=round(r / full, 3),
                                 spearman=mean, lo=lo, hi=hi, delta=dm, delta_lo=dlo, delta_hi=dhi,
                                 test_contexts=len(test), subsets=args.subsets))
    say(f"- {name}: {C} contexts x {n} candidates, {len(train)} train / {len(test)} test; learning "
        f"{t_learn:.1f}s, evaluation {time.perf_counter() - t1:.1f}s")
    return rows, learnt


def table(rows, name, say):
    for who in dict.fromkeys(r["judge"] for r in rows if r["data"] == name):
        sub = [r for r in rows if r["data"] == name and r["judge"] == who]
        budgets = sorted({r["budget"] for r in sub})
        say(f"\n### {name}: {who}\n")
        say("| method | " + " | ".join(f"R={b}" for b in budgets) + " |")
        say("|---|" + "---:|" * len(budgets))
        for meth in dict.fromkeys(r["method"] for r in sub):
            cells = []
            for b in budgets:
                r = next(x for x in sub if x["method"] == meth and x["budget"] == b)
                cell = f"{100 * r['spearman']:.1f} [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"
                if meth not in ("PoE-g", "PoE-BT"):
                    cell += f" ({100 * r['delta']:+.1f} [{100 * r['delta_lo']:+.1f}, {100 * r['delta_hi']:+.1f}])"
                cells.append(cell)
            say(f"| {meth} | " + " | ".join(cells) + " |")


def findings(rows, say):
    say("\n## Findings (computed from the rows above)\n")
    for name in dict.fromkeys(r["data"] for r in rows):
        for who in dict.fromkeys(r["judge"] for r in rows if r["data"] == name):
            sub = [r for r in rows if r["data"] == name and r["judge"] == who and r["method"] not in ("PoE-g", "PoE-BT")]
            helps = [r for r in sub if r["delta_lo"] > 0]
            hurts = [r for r in sub if r["delta_hi"] < 0]
            best = max(sub, key=lambda r: r["delta"])
            say(f"- {name}, {who}: learnt beats its fixed scorer (interval above 0) in {len(helps)} of {len(sub)} "
                f"(method, budget) cells, loses in {len(hurts)}; largest gain {100 * best['delta']:+.1f} points "
                f"({best['method']}, R={best['budget']}).")
        prod = [r for r in rows if r["data"] == name and r["judge"] == "product"]
        if prod:
            for b in sorted({r["budget"] for r in prod}):
                pbest = max((r for r in prod if r["budget"] == b), key=lambda r: r["spearman"])
                mbest = max((r for r in rows if r["data"] == name and r["judge"] != "product" and r["budget"] == b),
                            key=lambda r: r["spearman"])
                say(f"  - R={b}: best product {pbest['method']} {100 * pbest['spearman']:.1f} vs best single judge "
                    f"({mbest['judge']}, {mbest['method']}) {100 * mbest['spearman']:.1f}: the product "
                    f"{'beats' if pbest['lo'] > mbest['spearman'] else 'does not clearly beat'} its best member.")


def plot(rows, learnt, name, path, distortions):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    sub = [r for r in rows if r["data"] == name and r["judge"] == "judge 1"]
    for meth in dict.fromkeys(r["method"] for r in sub):
        pts = sorted((r["fraction"], r["spearman"], r["lo"], r["hi"]) for r in sub if r["method"] == meth)
        f, s, lo, hi = map(np.array, zip(*pts))
        ax.plot(f, s, marker="o", ls="-" if "BT" in meth else "--", label=meth)
        ax.fill_between(f, lo, hi, alpha=0.1)
    ax.set_xlabel("fraction of the N(N-1) comparisons")
    ax.set_ylabel("held-out Spearman (mean over contexts)")
    ax.set_title(f"{name}: judge 1, fixed vs learnt calibration")
    ax.legend(fontsize=7)
    x = np.linspace(-6, 6, 200).astype(np.float32)
    p = 1 / (1 + np.exp(-x))
    xd = np.log(distort(p, distortions[0])) - np.log1p(-distort(p, distortions[0]))
    for lname, params in learnt["judge 1"].items():
        ax2.plot(xd, np.asarray(cal.calibrate_logits(params, xd)), label=f"learnt {lname}")
    ax2.plot(xd, x, "k:", label="inverse of the distortion")
    ax2.set_xlabel("judge 1's logit margin")
    ax2.set_ylabel("calibrated margin f(x)")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


INTS = ("budget", "test_contexts", "subsets")
FLOATS = ("fraction", "spearman", "lo", "hi", "delta", "delta_lo", "delta_hi")


def merge_stored(stem: Path, lines: list[str], rows: list[dict]) -> tuple[list[str], list[dict], list[str]]:
    """``(lines, rows, kept)``: this run's opening ``lines`` and ``rows`` with the stored results (``<stem>.md``,
    ``<stem>.csv``) of every data set it did not compute, which are ``kept`` (in their stored order).

    The stored opening paragraph (subsets, resamples and steps) must equal this run's; a stored data set's
    bullets (``- <data>: ...``, ``- <data> judge k: ...``) are kept before this run's.

    Raises:
        SystemExit: no stored results at ``stem``, or they were made with other settings.
    """
    import csv

    md, table_ = Path(f"{stem}.md"), Path(f"{stem}.csv")
    if not (md.is_file() and table_.is_file()):
        raise SystemExit(f"--merge: no stored {md.name} and {table_.name} in {stem.parent}")
    old = md.read_text().splitlines()
    intro = "\n".join(lines[:2]).splitlines()
    if old[: len(intro)] != intro:
        raise SystemExit(f"--merge: {md} was made with other settings (its opening paragraph differs)")
    with open(table_, newline="") as f:
        stored = [{k: int(v) if k in INTS else float(v) if k in FLOATS else v for k, v in r.items()}
                  for r in csv.DictReader(f)]
    new = set(r["data"] for r in rows)
    kept = [d for d in dict.fromkeys(r["data"] for r in stored) if d not in new]
    mine = lambda x: any(x.startswith(f"- {d}:") or x.startswith(f"- {d} judge ") for d in kept)
    bullets = [x for x in old[len(intro):] if x.startswith("- ") and mine(x)]
    body = [x for y in lines[2:] for x in y.splitlines() if x.startswith("- ")]
    merged = [r for r in stored if r["data"] in kept] + rows
    return lines[:2] + bullets + body, merged, kept


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="summeval,hanna", help="data sets (default summeval,hanna; coherence)")
    ap.add_argument("--subsets", type=int, default=20, help="random subsets per budget (default 20)")
    ap.add_argument("--steps", type=int, default=150, help="optax steps per fit (default 150)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples of the held-out contexts")
    ap.add_argument("--store", default=None, help="a judgement store (.jsonl) from `jaxrank judge`")
    ap.add_argument("--judge", default=None, help="the judge's name in --store")
    ap.add_argument("--store-data", default="summeval", help="data set of --store (default summeval)")
    ap.add_argument("--store-aspect", default="coherence", help="human aspect of --store")
    ap.add_argument("--hanna-llm", default=None, metavar="LLM[,LLM]",
                    help="real HANNA LLM judges (their stored ratings replayed as pairwise p, variant share), "
                         "e.g. Mistral-7B,ChatGPT; 'all' for every stored LLM")
    ap.add_argument("--hanna-aspect", default="coherence", help="HANNA aspect of --hanna-llm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output folder (default experiments/results)")
    ap.add_argument("--smoke", action="store_true", help="tiny run: 12 contexts, 2 subsets, 20 steps, summeval")
    ap.add_argument("--merge", action="store_true",
                    help="keep the stored rows (in --out) of the data sets this run does not compute")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from _common import hanna_llm_judge, load_judge, store_judge
    from jaxrank.data import LLM_JUDGES
    from jaxrank.data import label_matrix, load_dataset
    from jaxrank.simulate import judge_stats

    if args.store and not args.judge:
        raise SystemExit("--store needs --judge")
    names = [x for x in args.data.split(",") if x]
    if args.smoke:
        names, args.subsets, args.steps, args.boot = names[:1], 2, 20, 100
    out = Path(args.out) if args.out else Path(__file__).parent / "results"
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_smoke" if args.smoke else ""
    lines = []
    say = lambda s="": (print(s, flush=True), lines.append(s))
    say("# Learnt experts: fixed PoE-g / PoE-BT vs learnt judge calibration, held-out contexts\n")
    say(f"Held-out Spearman x100 (mean over test contexts of the mean over {args.subsets} random subsets), 95% "
        f"bootstrap interval over test contexts ({args.boot} resamples); for learnt methods, in parentheses, the "
        f"paired difference from the same fixed scorer. {args.steps} adam steps (lr 0.05) per fit.\n")
    rows, t0 = [], time.perf_counter()
    for name in names:
        if name not in ASPECT:
            raise SystemExit(f"--data: {name!r} is not one of {', '.join(ASPECT)}")
        ds = load_dataset(name)
        lm = label_matrix(ds, ASPECT[name])
        cut = slice(0, 12) if args.smoke else slice(None)
        labels, mask = lm.labels[cut], lm.mask[cut]
        j1 = studies.simulated_judge(labels, mask, accuracy=0.686, p_a=0.37, seed=args.seed, name="judge 1")
        j2 = studies.simulated_judge(labels, mask, accuracy=0.65, p_a=0.55, seed=args.seed + 1, name="judge 2")
        j1 = j1._replace(probs=np.where(j1.observed, distort(j1.probs, "saturating"), 0.5).astype(np.float32))
        j2 = j2._replace(probs=np.where(j2.observed, distort(j2.probs, "overconfident"), 0.5).astype(np.float32))
        for j in (j1, j2):
            st = judge_stats(j.probs, labels, mask)
            say(f"- {name} {j.name}: accuracy {st['accuracy']:.3f}, P(A) {st['p_a']:.3f}, mean p {st['mean_p']:.3f}")
        r, learnt = study(name, [j1, j2], labels, mask, args, say)
        rows += r
        plot(rows, learnt, name, out / f"learnt_experts_{name}{suffix}.png", ("saturating",))
    if args.store:
        j = store_judge(args.store, judge=args.judge, data=args.store_data, aspect=args.store_aspect)
        if args.smoke:
            j = j._replace(probs=j.probs[:12], observed=j.observed[:12], labels=j.labels[:12], mask=j.mask[:12])
        name = f"{args.store_data}-{args.store_aspect} {Path(args.judge).name}"
        say(f"- {name}: judgement store {args.store}")
        r, _ = study(name, [j], j.labels, j.mask, args, say)
        rows += r
    llms = [] if not args.hanna_llm else LLM_JUDGES if args.hanna_llm == "all" else args.hanna_llm.split(",")
    for llm in llms:
        if llm not in LLM_JUDGES:
            raise SystemExit(f"--hanna-llm: {llm!r} is not one of {', '.join(LLM_JUDGES)}")
        j = hanna_llm_judge(llm, args.hanna_aspect)
        if args.smoke:
            j = j._replace(probs=j.probs[:12], observed=j.observed[:12], labels=j.labels[:12], mask=j.mask[:12])
        st = judge_stats(j.probs, j.labels, j.mask)
        name = f"hanna-{args.hanna_aspect} {llm}"
        say(f"- {name}: real stored ratings replayed (variant share): accuracy {st['accuracy']:.3f}, "
            f"P(A) {st['p_a']:.3f}, mean p {st['mean_p']:.3f}")
        r, _ = study(name, [j], j.labels, j.mask, args, say)
        rows += r
    total = f"Total time {time.perf_counter() - t0:.1f}s (compilation included)"
    if args.merge:
        lines, rows, kept = merge_stored(out / f"learnt_experts{suffix}", lines, rows)
        total += (f" for {', '.join(dict.fromkeys(r['data'] for r in rows if r['data'] not in kept))}; "
                  f"{', '.join(kept)} as stored (--merge)" if kept else "")
    say(f"\n{total}.")
    for name in dict.fromkeys(r["data"] for r in rows):
        table(rows, name, say)
    findings(rows, say)
    write_results(out / f"learnt_experts{suffix}", lines, rows)
    print(f"wrote {out}/learnt_experts{suffix}.{{md,csv}} and the plots")
    return rows


if __name__ == "__main__":
    main()
