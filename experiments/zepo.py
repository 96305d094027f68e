"""ZEPO study: do fairer instructions agree better with humans, and does the searched prompt help?

zepo-fairer-preferences Figures 2/3 and Table 1, on our data and local judges:

1. a ZEPO search (:func:`jaxrank.assessment.zepo.zepo_search`) from the paper's seed instruction,
   with an LLM paraphraser, on a fixed sample of unlabelled pairs (both orders);
2. Figure 2/3 question: over every candidate prompt the search scored, each zero-shot objective
   (fairness, confidence, calibration, context-free) against the Spearman of the judge's scores
   with the human scores on the same sample contexts; the correlation across prompts with a
   bootstrap 95% interval (prompts resampled);
3. seed vs ZEPO-optimised prompt on held-out contexts (never seen by the search): mean Spearman
   per context with a bootstrap 95% interval (contexts resampled, paired for the difference),
   raw and permutation-debiased (both orders averaged).

Judgements go through a resumable store and the search log in ``--out``, so a killed run
resumes where it stopped. Writes ``zepo[_smoke]-*.{md,csv,png}`` and the optimised template
``zepo-DATA-ASPECT-JUDGE.json`` (for ``jaxrank assess --template FILE``).

    python experiments/zepo.py --smoke                      # ~2 min
    python experiments/zepo.py                              # SmolLM2-135M, SummEval coherence, ~25 min (resumes)
"""

from __future__ import annotations

import argparse
import dataclasses
import csv
import sys
import time
from pathlib import Path

import jax
import numpy as np
from scipy import stats

from jaxrank import metrics, scorer_table
from jaxrank.assessment import zepo
from jaxrank.assessment.run import contexts_of
from jaxrank.assessment.store import JudgementStore
from jaxrank.data import load_dataset
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from jaxrank.models.loading import load_model

OUT = Path(__file__).resolve().parent / "results"
OBJECTIVES = ("fairness", "confidence", "calibration", "context_free")


def _mean_defined(rho):
    """Mean Spearman over the contexts where it is defined; NaN (no warning) where no context has one
    (the prompt made the judge give constant scores everywhere, e.g. the same position every time)."""
    rho = np.asarray(rho, float)
    return float(rho[np.isfinite(rho)].mean()) if np.isfinite(rho).any() else float("nan")


def spearman_per_context(store, judge_name, template_key, sample, labels, *, debias="none", method="average_probability"):
    """``[C]`` Spearman of the judge's scores with the human scores, per sample context."""
    cand = {c: ids for c, ids in zip(sample.ids, sample.candidate_ids)}
    sel = store.comparisons(judge=judge_name, template=template_key, candidates=cand)
    rows = [sel.contexts.index(c) for c in sample.ids]
    comps = jax.tree.map(lambda x: x[np.array(rows)], sel.comparisons)
    scores = np.asarray(scorer_table.score(method, comps, debias))
    n = max(len(x) for x in labels)
    gold = np.full((len(labels), n), np.nan, np.float32)
    for k, x in enumerate(labels):
        gold[k, :len(x)] = x
    where = ~np.isnan(gold) & np.asarray(comps.item_mask)
    return np.asarray(metrics.spearman(scores, np.nan_to_num(gold), where=where))


DIALOGUE_DATA = ("topicalchat", "personachat")


def zepo_seed(data, aspect):
    """ZEPO's seed instruction (zepo Fig. 1); for dialogue data its summary wording names dialogue responses.

    The paper's seed speaks of a "source text" and "summary candidates"; for TopicalChat-like data the
    same instruction is kept with "Dialogue" / "response" in their place (the labels A/B and the aspect
    keyword the paraphrases must keep are unchanged).
    """
    t = pairwise_template(data, aspect, style="zepo")
    if data not in DIALOGUE_DATA:
        return t
    text = (t.text.replace("Source text:", "Dialogue:").replace("Summary candidate", "Response")
            .replace("summary candidate", "response").replace("the candidate", "the response"))
    return dataclasses.replace(t, text=text)


def boot_mean(x, rng, reps):
    """Mean of ``x`` (NaN dropped) and its percentile bootstrap 95% interval."""
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return np.nan, np.nan, np.nan
    m = rng.choice(x, (reps, len(x))).mean(1)
    return x.mean(), *np.percentile(m, [2.5, 97.5])


def boot_corr(x, y, rng, reps):
    """Spearman correlation of ``x`` and ``y`` (pairs resampled) with a bootstrap 95% interval, and its p-value."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan, np.nan, np.nan, np.nan
    r, pval = stats.spearmanr(x, y)
    bs = []
    for _ in range(reps):
        k = rng.integers(0, len(x), len(x))
        if np.ptp(x[k]) > 0 and np.ptp(y[k]) > 0:
            bs.append(stats.spearmanr(x[k], y[k])[0])
    lo, hi = np.percentile(bs, [2.5, 97.5]) if bs else (np.nan, np.nan)
    return r, lo, hi, pval


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="summeval")
    ap.add_argument("--aspect", default="coherence")
    ap.add_argument("--judge", default="smollm2-135m")
    ap.add_argument("--paraphraser", default=None, help="default: the judge's model")
    ap.add_argument("--candidates", type=int, default=5, help="candidates per context (first N)")
    ap.add_argument("--search-contexts", default="0:50", help="pool the search sample is drawn from")
    ap.add_argument("--sample-contexts", type=int, default=4)
    ap.add_argument("--budget", type=int, default=None, help="unordered pairs per sample context (default all)")
    ap.add_argument("--eval-contexts", default="50:58", help="held-out contexts for seed vs ZEPO")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--answer-prefix", default="auto", help="the judge's answer prefix: 'auto' (the words the "
                    "model writes before the label, found once from the seed), '' for none, or the words")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (about two minutes)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.sample_contexts, args.budget = 3, 1, None
        args.epochs, args.population, args.eval_contexts, args.bootstrap = 1, 3, "50:52", 200
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "zepo" + ("_smoke" if args.smoke else "") + f"-{args.data}-{args.aspect}-{args.judge}"
    t0 = time.perf_counter()
    say_lines = []

    def say(s=""):
        print(s, flush=True)
        say_lines.append(s)

    ds = load_dataset(args.data)
    search_cs = contexts_of(ds, aspect=args.aspect, contexts=args.search_contexts, max_candidates=args.candidates)
    eval_cs = contexts_of(ds, aspect=args.aspect, contexts=args.eval_contexts, max_candidates=args.candidates)
    overlap = set(search_cs.ids) & set(eval_cs.ids)
    if overlap:
        raise SystemExit(f"--eval-contexts overlap the search pool ({len(overlap)} contexts)")
    lm = load_model(args.judge)
    seed_t = zepo_seed(args.data, args.aspect)
    judge = PromptJudge(lm, seed_t, batch_size=args.batch_size, answer_prefix=args.answer_prefix or None)
    para = zepo.Paraphraser(args.paraphraser or lm, args.aspect, temperature=args.temperature, seed=args.seed)
    sample = zepo.sample_pairs(search_cs, num_contexts=args.sample_contexts, pairs_per_context=args.budget,
                               seed=args.seed)
    store = JudgementStore(out / f"{tag}-store.jsonl")
    say(f"# ZEPO study: {args.data} {args.aspect}, judge {judge.name}, paraphraser {para.name}")
    say(f"\nsearch: {len(sample.ids)} contexts x {args.candidates} candidates, {sample.size} comparisons per "
        f"prompt (both orders); {args.epochs} epochs x population {args.population}, temperature "
        f"{args.temperature}, seed {args.seed}; held-out contexts {args.eval_contexts}")
    res = zepo.zepo_search(judge, para, seed_t, sample, args.aspect, store=store, log=out / f"{tag}-log.jsonl",
                           epochs=args.epochs, population=args.population,
                           on_epoch=lambda e: print(f"  epoch {e['epoch']}: fairness {e['fairness']:+.3f} "
                                                    f"P(A) {e['decision_rate']:.2f} scored {e['accepted']} "
                                                    f"rejected {e['rejected']} ({time.perf_counter() - t0:.0f} s)",
                                                    flush=True))
    t_search = time.perf_counter() - t0
    choice = judge.answer_prefix_choice
    if choice is not None:
        how = ("from the model's greedy answers" if choice.found else
               "the prompt's naming word (no greedy answer named a label)" if choice.from_prompt else "none found")
        say(f"answer prefix: {choice.prefix!r} ({how}; e.g. {choice.answers[0][:60]!r})")
    else:
        say(f"answer prefix: {judge.template.answer_prefix!r} (given)")
    tfile = zepo.save_template(res.best, out / f"{tag}.json")
    rng = np.random.default_rng(args.seed)

    say("\n## Search\n\n| epoch | best instruction | fairness | P(A) | scored | rejected |\n|---|---|---|---|---|---|")
    for e in res.epochs:
        say(f"| {e['epoch']} | {e['best'].replace(chr(10), ' ')[:90]} | {e['fairness']:+.3f} | "
            f"{e['decision_rate']:.2f} | {e['accepted']} | {e['rejected']} |")
    reasons = {}
    for r in res.rejected:
        reasons[r["reason"].split(":")[0]] = reasons.get(r["reason"].split(":")[0], 0) + 1
    say(f"\nrejected candidates: {len(res.rejected)} ({', '.join(f'{k}: {v}' for k, v in reasons.items()) or 'none'})")

    # ---- Figure 2/3: objectives vs human agreement over the candidate prompts (sample contexts)
    s_labels = [search_cs.labels[search_cs.ids.index(c)] for c in sample.ids]
    prompts = {c["template_key"]: c for c in res.candidates}
    rows = []
    for key, c in prompts.items():
        rho = spearman_per_context(store, judge.name, key, sample, s_labels)
        rho_w = spearman_per_context(store, judge.name, key, sample, s_labels, method="win_ratio")
        rho_wp = spearman_per_context(store, judge.name, key, sample, s_labels, method="win_ratio",
                                      debias="permutation")
        rows.append({**{k: c[k] for k in ("epoch", "template_key", "decision_rate", *OBJECTIVES)},
                     "spearman": _mean_defined(rho), "spearman_win_ratio": _mean_defined(rho_w),
                     "spearman_win_ratio_permutation": _mean_defined(rho_wp), "instruction": c["instruction"]})
    with open(out / f"{tag}-prompts.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    say(f"\n## Zero-shot objectives vs Spearman over {len(rows)} candidate prompts (search sample contexts)\n")
    say("| objective | Spearman corr. with human agreement | 95% CI (bootstrap over prompts) | p |\n|---|---|---|---|")
    for o in OBJECTIVES:
        xs, ys = np.array([x[o] for x in rows]), np.array([x["spearman"] for x in rows])
        ok = np.isfinite(xs) & np.isfinite(ys)
        if ok.sum() < 3 or np.ptp(xs[ok]) == 0 or np.ptp(ys[ok]) == 0:
            why = ("fewer than 3 prompts with a defined value" if ok.sum() < 3 else
                   f"every prompt has the same {o} ({xs[ok][0]:+.3f})" if np.ptp(xs[ok]) == 0 else
                   "every prompt has the same Spearman")
            say(f"| {o} | undefined: {why} | | |")
            continue
        r, lo, hi, pv = boot_corr(xs[ok], ys[ok], rng, args.bootstrap)
        say(f"| {o} | {r:+.2f} | [{lo:+.2f}, {hi:+.2f}] | {pv:.2g} |")

    # ---- seed vs ZEPO on held-out contexts
    eval_sample = zepo.sample_pairs(eval_cs, num_contexts=len(eval_cs.ids), pairs_per_context=None, seed=args.seed)
    t1 = time.perf_counter()
    ev = zepo.score_templates(judge, [seed_t, res.best] if res.best.key != seed_t.key else [seed_t],
                              eval_sample, store)
    t_eval = time.perf_counter() - t1
    e_labels = [eval_cs.labels[eval_cs.ids.index(c)] for c in eval_sample.ids]
    say(f"\n## Seed vs ZEPO prompt on {len(eval_sample.ids)} held-out contexts ({eval_sample.size} comparisons "
        f"per prompt)\n")
    say("Spearman per context with the human scores, mean and bootstrap 95% interval over contexts. "
        "average_probability reads soft p and, with both orders judged, already averages the two orders "
        "(so permutation debiasing leaves it unchanged); win_ratio reads hard decisions, where the "
        "positional bias bites.\n")
    say("| prompt | scorer | debias | fairness | P(A) | Spearman | 95% CI | contexts with a defined Spearman |\n"
        "|---|---|---|---|---|---|---|---|")
    per = {}
    variants = (("average_probability", "none"), ("win_ratio", "none"), ("win_ratio", "permutation"))
    for k, (label, t) in enumerate((("seed", seed_t), ("ZEPO", res.best))):
        kk = min(k, len(ev["fairness"]) - 1)
        for method, debias in variants:
            rho = spearman_per_context(store, judge.name, zepo.stored_key(judge, t), eval_sample, e_labels,
                                       debias=debias, method=method)
            per[(label, method, debias)] = rho
            m, lo, hi = boot_mean(rho, rng, args.bootstrap)
            say(f"| {label} | {method} | {debias} | {ev['fairness'][kk]:+.3f} | {ev['decision_rate'][kk]:.2f} | "
                f"{m:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {int(np.sum(~np.isnan(rho)))} / {len(rho)} |")
    say()
    for method, debias in variants:
        d = per[("ZEPO", method, debias)] - per[("seed", method, debias)]
        m, lo, hi = boot_mean(d, rng, args.bootstrap)
        say(f"- ZEPO - seed ({method}, {debias}): {m:+.3f} [{lo:+.3f}, {hi:+.3f}] (paired over the "
            f"{int(np.sum(~np.isnan(d)))} contexts where both are defined)")
    say(f"\noptimised template: {tfile.name}\n\n{res.best.text}")
    say(f"\ntime: search {t_search:.0f} s ({res.judged} comparisons judged this run), held-out judging "
        f"{t_eval:.0f} s, total {time.perf_counter() - t0:.0f} s; load {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")
    (out / f"{tag}.md").write_text("\n".join(say_lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), sharey=True)
    for ax, o in zip(axes, OBJECTIVES):
        ax.scatter([x[o] for x in rows], [x["spearman"] for x in rows], c=[x["epoch"] for x in rows], cmap="viridis")
        r = boot_corr([x[o] for x in rows], [x["spearman"] for x in rows], rng, 0)[0]
        ax.set_xlabel(f"{o} (higher = fairer)")
        ax.set_title(f"Spearman across prompts {r:+.2f}")
    axes[0].set_ylabel("Spearman with humans")
    fig.suptitle(f"{args.data} {args.aspect}, {judge.name}: zero-shot objectives vs human agreement per prompt")
    fig.tight_layout()
    fig.savefig(out / f"{tag}.png", dpi=110)
    print(f"wrote {out / tag}.md/.png, -prompts.csv, .json", file=sys.stderr)


if __name__ == "__main__":
    main()
