"""The real LLM judges measured again with the judge reading the model's answer (label mass, answer prefix).

For each judge and data set, all ordered pairs of a slice of contexts are judged (both orders), into new
stores under ``--out/stores/`` (the template key carries the reading, so nothing judged the old way is
reused), in two readings:

* ``no prefix``: the labels read right after the assistant header (the old reading, now with whole-text
  tokens and the label mass recorded);
* ``auto prefix``: the answer prefix the model itself writes before the label
  (``PromptJudge(answer_prefix="auto")``), the labels read after it.

Where an old store of the same judge exists (``--old DIR``: the first-differing-token reading of piecewise
tokens, before the fix), its judgements of the same pairs are summarised beside them. Per row: the label
mass (median, min), P(A), order consistency, pairwise accuracy with its bootstrap interval over contexts,
and the Spearman of the average probability (both orders) with its interval; whether the judge is above
chance (accuracy interval above 0.5). Writes ``label_reading.{md,csv}`` to ``--out``.

    python experiments/label_reading.py --judges smollm2-135m,qwen2.5-coder-0.5b [--contexts 0:10] [--candidates 4]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETS = {"summeval": "coherence", "topicalchat": "coherence"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judges", default="smollm2-135m,qwen2.5-coder-0.5b", help="comma-separated registry names or paths")
    ap.add_argument("--data", default="summeval,topicalchat", help="comma-separated data sets (coherence)")
    ap.add_argument("--contexts", default="0:10", help="slice of contexts (default 0:10)")
    ap.add_argument("--candidates", type=int, default=4, help="first N candidates of each context (default 4)")
    ap.add_argument("--readings", default="none,auto", help="comma-separated: none (no prefix), auto")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", default=str(HERE / "results"), help="output folder (default experiments/results)")
    ap.add_argument("--old", default=str(HERE / "results" / "stores"), help="folder of the old stores")
    ap.add_argument("--no-judging", action="store_true",
                    help="judge nothing: summarise the stores that hold every planned comparison, skip the others")
    ap.add_argument("--smoke", action="store_true", help="SummEval, 1 context x 3 candidates, SmolLM2, files *_smoke")
    return ap.parse_args(argv)


def both_orders_accuracy(records, cs, *, draws: int = 2000, seed: int = 0):
    """Pairwise accuracy with both orders averaged, ``p = (p_ab + 1 - p_ba) / 2`` (human ties left out), and
    its 95% percentile bootstrap interval over contexts."""
    p = {(r["context"], r["a"], r["b"]): float(r["p"]) for r in records}
    per_ctx = []
    for k, ctx in enumerate(cs.ids):
        ids, lab = cs.candidate_ids[k], np.asarray(cs.labels[k], np.float64)
        hits = []
        for x in range(len(ids)):
            for y in range(x + 1, len(ids)):
                ab, ba = p.get((ctx, ids[x], ids[y])), p.get((ctx, ids[y], ids[x]))
                if ab is None or ba is None or lab[x] == lab[y]:
                    continue
                hits.append(((ab + 1 - ba) / 2 > 0.5) == (lab[x] > lab[y]))
        if hits:
            per_ctx.append((sum(hits), len(hits)))
    if not per_ctx:
        return float("nan"), float("nan"), float("nan")
    k, n = np.array(per_ctx, np.float64).T
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(k), (draws, len(k)))
    boot = k[idx].sum(1) / n[idx].sum(1)
    return float(k.sum() / n.sum()), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def summarise(records, cs, judge_name, reading, data, aspect, elapsed=None):
    """One row of the table from the records of one judge and reading on the contexts of ``cs``."""
    from jaxrank.assessment.report import assess_comparisons
    from jaxrank.assessment.run import stored_labels
    from jaxrank.assessment.store import JudgementStore

    import tempfile
    with tempfile.TemporaryDirectory() as tmp:            # the records as a store: its padded Comparisons
        st = JudgementStore(Path(tmp) / "s.jsonl")
        st.append([{k: v for k, v in r.items()} for r in records])
        cand = {cs.ids[k]: cs.candidate_ids[k] for k in range(len(cs.ids))}
        sel = st.comparisons(candidates=cand)
    labels = stored_labels(cs, sel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = assess_comparisons(sel.comparisons, labels, contexts=sel.contexts,
                                 methods=("average_probability", "win_ratio"), debias="permutation")
    mass = np.array([r["label_mass"] for r in records if r.get("label_mass") is not None])
    acc2, lo2, hi2 = both_orders_accuracy(records, cs)
    lo, hi = rep.accuracy_interval
    m, (slo, shi) = rep.mean["average_probability"], rep.interval["average_probability"]
    return {"data": f"{data} {aspect}", "judge": judge_name, "reading": reading, "comparisons": len(records),
            "contexts": len(sel.contexts),
            "label_mass_median": float(np.median(mass)) if mass.size else float("nan"),
            "label_mass_min": float(mass.min()) if mass.size else float("nan"),
            "p_a": rep.overall_positional_bias, "order_consistency": rep.overall_consistency,
            "accuracy": rep.overall_accuracy, "accuracy_low": lo, "accuracy_high": hi,
            "accuracy_both_orders": acc2, "accuracy_both_orders_low": lo2, "accuracy_both_orders_high": hi2,
            "spearman": m, "spearman_low": slo, "spearman_high": shi,
            "above_chance": bool(np.isfinite(lo2) and lo2 > 0.5),
            "seconds": float("nan") if elapsed is None else elapsed}


def main(argv=None):
    args = parse_args(argv)
    from jaxrank.assessment.run import contexts_of, judge_contexts, prepare_judge, template_key
    from jaxrank.assessment.store import JudgementStore
    from jaxrank.data import load_dataset
    from jaxrank.judges import PromptJudge, pairwise_template
    from jaxrank.models import load_model
    from jaxrank.models.registry import ALIASES

    if args.smoke:
        args.judges, args.contexts, args.candidates, args.data = "smollm2-135m", "0:1", 3, "summeval"
    out = Path(args.out)
    (out / "stores").mkdir(parents=True, exist_ok=True)
    suffix = "_smoke" if args.smoke else ""
    rows = []
    for data in [d.strip() for d in args.data.split(",") if d.strip()]:
        aspect = SETS.get(data, "coherence")
        cs = contexts_of(load_dataset(data), aspect=aspect, contexts=args.contexts, max_candidates=args.candidates)
        for name in [j.strip() for j in args.judges.split(",") if j.strip()]:
            lm = load_model(name)
            former = {v: k for k, v in ALIASES.items() if k.count("-") == 1 and k.startswith("qwen")}
            old = Path(args.old) / f"{data}-{aspect}-{former.get(lm.name, lm.name)}.jsonl"  # stores of the old names
            if old.is_file():
                keep = {(cs.ids[k], a, b) for k in range(len(cs.ids)) for a in cs.candidate_ids[k]
                        for b in cs.candidate_ids[k] if a != b}
                recs = [{**r, "judge": lm.name} for r in JudgementStore(old).records()
                        if (r["context"], r["a"], r["b"]) in keep]
                if recs:
                    rows.append(summarise(recs, cs, lm.name, "old (first token, piecewise)", data, aspect))
                    print(rows[-1], flush=True)
            for reading in [r.strip() for r in args.readings.split(",") if r.strip()]:
                judge = PromptJudge(lm, pairwise_template(data, aspect), batch_size=args.batch_size,
                                    answer_prefix="auto" if reading == "auto" else "")
                store = out / "stores" / f"{data}-{aspect}-{lm.name}-{reading}{suffix}.jsonl"
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if args.no_judging:
                        if not store.is_file():
                            continue
                        prepare_judge(judge, cs)
                    else:
                        judge_contexts(judge, cs, store, progress=True)
                elapsed = time.perf_counter() - t0
                recs = JudgementStore(store).records(judge=judge.name, template=template_key(judge))
                planned = sum(len(c) * (len(c) - 1) for c in cs.candidates)
                if args.no_judging and len({(r["context"], r["a"], r["b"]) for r in recs}) < planned:
                    print(f"skipped {store.name}: {len(recs)} of {planned} comparisons judged", flush=True)
                    continue
                elapsed = None if args.no_judging else elapsed
                label = "auto prefix " + repr(judge.template.answer_prefix) if reading == "auto" else "no prefix"
                rows.append(summarise(recs, cs, lm.name, label, data, aspect, elapsed))
                print(rows[-1], flush=True)
    write(rows, out / f"label_reading{suffix}", args)


def write(rows, stem: Path, args):
    cols = list(rows[0])
    with open(f"{stem}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, cols)
        w.writeheader()
        w.writerows(rows)
    lines = ["# Real judges, read as the model answers", "",
             f"Generated by `experiments/label_reading.py` (contexts {args.contexts}, first {args.candidates} "
             "candidates, all ordered pairs). Label mass: the labels' share of the model's answer at the answer "
             "position. Accuracy: pairwise, against the human scores, per comparison (each order alone) and with "
             "both orders averaged (p = (p_ab + 1 - p_ba) / 2), 95% bootstrap intervals over contexts. "
             "Spearman: average probability after permutation debiasing (both orders), mean over contexts [95% "
             "interval]. Above chance: the both-orders accuracy interval (p_ab and p_ba averaged) lies above 0.5.", "",
             "| data | judge | reading | comparisons | label mass median (min) | P(A) | order consistency | "
             "accuracy, per comparison | accuracy, both orders | Spearman | above chance |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['data']} | {r['judge']} | {r['reading']} | {r['comparisons']} | "
                     f"{r['label_mass_median']:.3f} ({r['label_mass_min']:.3f}) | {r['p_a']:.2f} | "
                     f"{r['order_consistency']:.2f} | {r['accuracy']:.3f} [{r['accuracy_low']:.3f}, "
                     f"{r['accuracy_high']:.3f}] | {r['accuracy_both_orders']:.3f} "
                     f"[{r['accuracy_both_orders_low']:.3f}, {r['accuracy_both_orders_high']:.3f}] | {r['spearman']:+.3f} [{r['spearman_low']:+.3f}, "
                     f"{r['spearman_high']:+.3f}] | {'yes' if r['above_chance'] else 'no'} |")
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.md and {stem}.csv")


if __name__ == "__main__":
    sys.exit(main())
