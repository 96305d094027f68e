"""Gradient-tuned soft prompts vs the seed prompt (and a ZEPO template), with and without permutation debiasing.

Issue 12, "beyond the paper": learn ``k`` input vectors for a frozen local judge
(SmolLM2-135M by default) on *unlabelled* pairs of some contexts (the search
contexts) by minimising the differentiable fairness loss of
:func:`jaxrank.judges.soft_prompt.fairness_loss`, then judge the SAME held-out
pairs (both orders) with

* ``seed``  -- the built-in prompt (PoE style),
* ``soft``  -- the seed prompt plus the learnt vectors,
* ``zepo``  -- a template file (``--template FILE``, e.g. written by ``jaxrank zepo``),

each raw and permutation-debiased (``p~ = (p_ij + 1 - p_ji) / 2``; ZEPO Figure 5's
question: are a fairer prompt and debiasing complementary?). Reported per variant:
``P(A)`` (fraction ``p > 1/2``), ZEPO fairness ``-|P(A) - 1/2|``, batch calibration
``|mean(l_A - l_B)|``, and the mean per-context Spearman with the human scores
(average-probability and win-ratio scores) with a 95% bootstrap interval over contexts.

The judge reads its answer after an answer prefix (``--answer-prefix``, default
``auto``: the words the model writes before the label, chosen once on the first
training context with :meth:`~jaxrank.judges.pairwise.PromptJudge.prepare`, before
training, so the vectors learn on the prompts that are judged), and every
judgement row records the labels' share of the model's answer (``label_mass``).

Everything is written as it goes (training log, vectors, judgements: a killed run
resumes without re-judging). Each judgement row carries the settings that made it
(``key``: model fingerprint, judge, template key, answer prefix, held-out plan, and
for the soft prompt its training settings); a run into a folder whose store holds
rows of other settings stops with an error naming the file and the fields that
differ, rather than reuse or mix them. Rows written before rows carried their
settings are read as the old reading (:data:`OLD_READING`: no answer prefix, no
label mass). ``--smoke`` runs a minimal configuration.

Usage::

    python experiments/soft_prompt.py --smoke
    nohup python experiments/soft_prompt.py --steps 24 --eval-contexts 80:86 &
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import jax
import numpy as np

from jaxrank.assessment.run import contexts_of
from jaxrank.comparisons import Comparisons
from jaxrank.data import load_dataset
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template
from jaxrank.judges.soft_prompt import SoftPrompt, train_soft_prompt
from jaxrank.metrics import spearman
from jaxrank.models.loading import load_model
from jaxrank.scoring.counting import average_probability, win_ratio

INIT_TEXT = " Judge the content only; the order of the two summaries does not matter."
OLD_READING = {"reading": "old: rows written before they carried their settings (no answer prefix, no label mass)"}
"""The key of a judgement row without one (the study's first runs)."""
SHARED = ("data", "aspect", "model_fingerprint", "eval_contexts", "candidates", "eval_pairs", "seed")
"""Key fields every row of one store shares (the same held-out pairs of the same model); the rest is the variant's."""


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="summeval")
    ap.add_argument("--aspect", default="coherence")
    ap.add_argument("--model", default="smollm2-135m", help="a registry name or checkpoint (Llama family)")
    ap.add_argument("--train-contexts", default="0:8", help="START:STOP of the contexts the vectors learn on")
    ap.add_argument("--eval-contexts", default="80:86", help="START:STOP of the held-out contexts")
    ap.add_argument("--candidates", type=int, default=None, help="first N candidates per context (default all)")
    ap.add_argument("--eval-pairs", type=int, default=40, help="unordered pairs per held-out context (both orders)")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--pairs-per-step", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--calibration-weight", type=float, default=1.0)
    ap.add_argument("--position", choices=("before_question", "prepend"), default="before_question")
    ap.add_argument("--init-text", default=INIT_TEXT, help="vectors start at the embeddings of its tokens")
    ap.add_argument("--soft-prompt", help="use these vectors (safetensors) instead of training")
    ap.add_argument("--template", help="a ZEPO template: JSON {text, labels?, answer_prefix?, name?} or plain text")
    ap.add_argument("--variants", default="seed,soft,zepo",
                    help="which prompts to judge (zepo only with --template); the summary covers all in the store")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--answer-prefix", default="auto", help="the judge's answer prefix: 'auto' (the words the "
                    "model writes before the label, found once on the first training context), '' for none, or "
                    "the words")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap replicates over contexts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--summarise-only", action="store_true",
                    help="judge nothing: summarise the judgements already in the store (e.g. merged from runs)")
    ap.add_argument("--smoke", action="store_true", help="a minimal run (1 training context, 2 steps, 3 pairs)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.train_contexts, args.eval_contexts, args.candidates = "0:1", "80:82", 4
        args.eval_pairs, args.steps, args.pairs_per_step, args.boot = 3, 2, 1, 50
    return args


def read_template(path: str) -> PairwiseTemplate:
    """A template file: JSON with ``text`` (and optionally ``labels``, ``answer_prefix``, ``name``) or plain text."""
    raw = Path(path).read_text()
    try:
        d = json.loads(raw)
    except json.JSONDecodeError:
        d = {"text": raw.strip()}
    if not isinstance(d, dict) or "text" not in d:
        raise ValueError(f"{path}: a template file is JSON with 'text', or the template text itself")
    return PairwiseTemplate(d["text"], tuple(d.get("labels", ("A", "B"))), d.get("name", Path(path).stem),
                            d.get("answer_prefix", ""))


def row_key(rec: dict) -> dict:
    """The settings a judgement row was made with; :data:`OLD_READING` for a row from before rows carried them."""
    return rec.get("key", OLD_READING)


def key_diff(a: dict, b: dict) -> str:
    """The fields where two row keys differ, ``field: a vs b``."""
    fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
    return "; ".join(f"{f}: {a.get(f, '(absent)')!r} vs {b.get(f, '(absent)')!r}" for f in fields)


def _shared(key: dict) -> dict:
    return dict(key) if "reading" in key else {f: key.get(f) for f in SHARED}


def check_rows(records, sources, want=None, loose=None) -> None:
    """Raise ``ValueError`` unless ``records`` are rows of one run's settings.

    Every row of a variant must have one key (:func:`row_key`), ``want[variant]`` where given (this run's),
    and every row the same :data:`SHARED` fields (``want``'s where given).

    Args:
        records: judgement rows.
        sources: the file each row came from (named in the error), one per row.
        want: ``{variant: key}`` of the rows this run writes, or ``None``.
        loose: ``{variant: fields}`` not compared against ``want`` (not known yet: the soft prompt's
            judge name before it is trained).
    """
    want, loose = want or {}, loose or {}
    first: dict = {}
    shared = (_shared(next(iter(want.values()))), "this run") if want else None
    for r, src in zip(records, sources):
        k, v = row_key(r), r["variant"]
        ref, ref_src = (want[v], "this run's") if v in want else first.setdefault(v, (k, f"{src}'s first"))
        skip = set(loose.get(v, ())) if v in want else set()
        a, b = ({f: x for f, x in d.items() if f not in skip} for d in (ref, k))
        if a != b:
            raise ValueError(f"{src}: its {v!r} rows (context {r['context']}) were made with other settings than "
                             f"{ref_src} ({key_diff(a, b)}); judge into another --out folder rather than mix them")
        if shared is None:
            shared = (_shared(k), f"{src}'s first row")
        elif _shared(k) != shared[0]:
            raise ValueError(f"{src}: its {v!r} rows (context {r['context']}) judged other pairs or another model "
                             f"than {shared[1]} ({key_diff(shared[0], _shared(k))}); judge into another --out "
                             "folder rather than mix them")


def read_store(path: Path) -> list[dict]:
    """The judgement rows of a store (none when it does not exist)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def eval_pairs(n: int, count: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct unordered pairs of ``n`` items (all when fewer), in both orders."""
    allp = np.array([(a, b) for a in range(n) for b in range(a + 1, n)])
    pick = allp[np.sort(rng.choice(len(allp), min(count, len(allp)), replace=False))]
    return np.concatenate([pick[:, 0], pick[:, 1]]), np.concatenate([pick[:, 1], pick[:, 0]])


def summarise(records, labels, boot, seed):
    """Per (variant, debias): P(A), fairness, calibration, Spearman (avg-prob, win ratio) with bootstrap CIs."""
    rng = np.random.default_rng(seed)
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in records):
        recs = [r for r in records if r["variant"] == variant]
        for debias in ("none", "permutation"):
            ps, diffs, rho_ap, rho_wr = [], [], [], []
            for r in recs:
                i, j, p = np.array(r["i"]), np.array(r["j"]), np.array(r["p"], np.float32)
                h = len(p) // 2                       # rows h: are the reverses of rows :h
                if debias == "permutation":
                    fwd = 0.5 * (p[:h] + 1 - p[h:])
                    p = np.concatenate([fwd, 1 - fwd])
                ps.append(p)
                diffs.append(np.log(p) - np.log1p(-p))
                lab = np.asarray(labels[r["context_index"]], np.float32)
                c = Comparisons.from_pairs(i, j, p, num_items=len(lab))
                rho_ap.append(float(spearman(average_probability(c), lab)))
                rho_wr.append(float(spearman(win_ratio(c), lab)))
            p_all = np.concatenate(ps)
            row = {"variant": variant, "debias": debias, "comparisons": int(p_all.size),
                   "P(A)": float(np.mean(p_all > 0.5) + 0.5 * np.mean(p_all == 0.5)),
                   "mean p": float(p_all.mean()), "calibration": float(abs(np.mean(np.concatenate(diffs))))}
            row["fairness"] = -abs(row["P(A)"] - 0.5)
            key = row_key(recs[0])
            if "reading" in key:
                row["reading"] = key["reading"]
            else:
                mass = [m for r in recs for m in (r.get("label_mass") or ())]
                row["answer_prefix"] = key["answer_prefix"]
                row["label mass"] = (float(np.median(mass)), float(np.min(mass))) if mass else None
            for name, rho in (("avg-prob", rho_ap), ("win ratio", rho_wr)):
                rho = np.array(rho)
                row[f"constant {name}"] = int(np.sum(~np.isfinite(rho)))   # contexts with constant scores
                rho = np.nan_to_num(rho)                  # ... count as 0 (no agreement), stated in the report
                means = rho[rng.integers(0, len(rho), (boot, len(rho)))].mean(1)
                row[f"spearman {name}"] = float(rho.mean())
                row[f"ci {name}"] = (float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))
            rows.append(row)
    return rows


def _constant_note(row, name):
    k = row.get(f"constant {name}", 0)
    return f" ({k} constant, as 0)" if k else ""


def reading_text(row: dict) -> str:
    """How a summary row's judgements were read: the answer prefix and label mass (median, min), or the old reading."""
    if "answer_prefix" not in row:
        return "old reading (answer prefix and label mass not recorded)"
    m = row.get("label mass")
    return (f"answer prefix {row['answer_prefix']!r}, label mass "
            + ("not recorded" if m is None else f"{m[0]:.3f} (min {m[1]:.3f})"))


def write_report(rows, history, path_md, meta):
    lines = [f"# Soft prompt study: {meta['data']} {meta['aspect']}, {meta['model']}", "",
             f"{meta['note']}", "",
             "| prompt | reading | debias | comparisons | P(A) | fairness | calib. |mean(lA-lB)| "
             "| Spearman avg-prob [95% CI] | Spearman win ratio [95% CI] |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["ci avg-prob"]
        lo2, hi2 = r["ci win ratio"]
        lines.append(f"| {r['variant']} | {reading_text(r)} | {r['debias']} | {r['comparisons']} | {r['P(A)']:.3f} "
                     f"| {r['fairness']:.3f} "
                     f"| {r['calibration']:.3f} | {r['spearman avg-prob']:.3f} [{lo:.3f}, {hi:.3f}]"
                     f"{_constant_note(r, 'avg-prob')} | {r['spearman win ratio']:.3f} [{lo2:.3f}, {hi2:.3f}]"
                     f"{_constant_note(r, 'win ratio')} |")
    lines += ["", "A context where a scorer's scores are constant (the judge chose one position for every "
              "comparison there) or whose human scores are all equal has no Spearman; it counts as 0 (no "
              "agreement), and the cell says in how many. reading: the answer prefix the judge read its answer "
              "after and the labels' share of the model's answer (median, min over the variant's judgements); "
              "'old reading': rows from before they recorded them (read at the answer position, unchecked)."]
    if history:
        lines += ["", "Training (loss eq. SP-1 on each step's batch, before its update): "
                  + ", ".join(f"{h['loss']:.3f}" for h in history)]
    path_md.write_text("\n".join(lines) + "\n")


def plot(rows, history, path_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = [f"{r['variant']}\n{'perm' if r['debias'] == 'permutation' else 'raw'}" for r in rows]
    y = [r["spearman avg-prob"] for r in rows]
    err = np.array([[r["spearman avg-prob"] - r["ci avg-prob"][0], r["ci avg-prob"][1] - r["spearman avg-prob"]]
                    for r in rows]).T
    ax[0].bar(range(len(rows)), y, yerr=err, capsize=3, color=["C0" if r["debias"] == "none" else "C1" for r in rows])
    ax[0].set_xticks(range(len(rows)), labels, fontsize=8)
    ax[0].set_ylabel("mean Spearman (avg-prob), 95% CI")
    ax[0].axhline(0, color="k", lw=0.5)
    if history:
        ax[1].plot([h["loss"] for h in history], label="loss (SP-1)")
        ax[1].plot([h["mean_p"] for h in history], label="mean p on the batch")
        ax[1].set_xlabel("step")
        ax[1].legend()
    fig.tight_layout()
    fig.savefig(path_png, dpi=120)


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{args.data}_{args.aspect}_{Path(args.model).stem}" + ("_smoke" if args.smoke else "")
    ds = load_dataset(args.data)
    train = contexts_of(ds, aspect=args.aspect, contexts=args.train_contexts, max_candidates=args.candidates)
    held = contexts_of(ds, aspect=args.aspect, contexts=args.eval_contexts, max_candidates=args.candidates)
    if args.summarise_only:
        store = out / f"soft_prompt_{tag}_judgements.jsonl"
        if not store.is_file():
            raise SystemExit(f"--summarise-only: no store {store}")
        records = read_store(store)
        try:
            check_rows(records, [store] * len(records))
        except ValueError as e:
            raise SystemExit(str(e)) from None
        rows = summarise(records, held.labels, args.boot, args.seed)
        before = out / f"soft_prompt_{tag}.json"       # keep the training history and note of the run, if any
        kept = json.loads(before.read_text()) if before.is_file() else {}
        history, note = kept.get("history", []), kept.get("note", f"Summary of {store}.")
        write_report(rows, history, out / f"soft_prompt_{tag}.md", dict(data=args.data, aspect=args.aspect,
                                                                       model=args.model, note=note))
        before.write_text(json.dumps({"rows": rows, "history": history, "note": note}, indent=1))
        plot(rows, history, out / f"soft_prompt_{tag}.png")
        print((out / f"soft_prompt_{tag}.md").read_text())
        return 0
    lm = load_model(args.model)
    if set(train.ids) & set(held.ids):
        raise SystemExit("--train-contexts and --eval-contexts overlap")
    seed_t = pairwise_template(args.data, args.aspect)
    judge = PromptJudge(lm, seed_t, batch_size=args.batch_size, answer_prefix=args.answer_prefix or None)
    judge.prepare(train.texts[0], train.candidates[0])      # "auto": chosen once, before training (as it trains)
    choice = judge.answer_prefix_choice
    prefix_note = (f"answer prefix {judge.template.answer_prefix!r} ("
                   + ("given" if choice is None else "chosen from the model's greedy answers, e.g. "
                      f"{choice.answers[0][:40]!r}" if choice.answers else "chosen: none found") + ")")
    print(prefix_note, flush=True)
    zepo_judge = judge.with_template(read_template(args.template)) if args.template else None
    shared = {"data": args.data, "aspect": args.aspect, "model_fingerprint": judge.fingerprint,
              "eval_contexts": args.eval_contexts, "candidates": args.candidates, "eval_pairs": args.eval_pairs,
              "seed": args.seed}
    soft_settings = ({"vectors": str(args.soft_prompt)} if args.soft_prompt else
                     {"train_contexts": args.train_contexts, "steps": args.steps, "pairs_per_step": args.pairs_per_step,
                      "lr": args.lr, "calibration_weight": args.calibration_weight, "position": args.position,
                      "init_text": args.init_text})

    def key_of(jd, soft=None):
        return dict(shared, judge=jd.name, template_key=jd.template_key, answer_prefix=jd.template.answer_prefix,
                    **({"soft": soft} if soft else {}))
    variants = args.variants.split(",")
    want = {"seed": key_of(judge), "soft": key_of(judge, soft_settings)}
    if zepo_judge is not None:
        want["zepo"] = key_of(zepo_judge)
    want = {k: v for k, v in want.items() if k in variants}
    store = out / f"soft_prompt_{tag}_judgements.jsonl"
    records = read_store(store)
    try:       # before training: everything but the vectors' hash, known once they are trained
        check_rows(records, [store] * len(records), want, loose={"soft": ("judge",)})
    except ValueError as e:
        raise SystemExit(str(e)) from None
    t0 = time.time()

    # ---- the soft prompt: load, or train on unlabelled pairs of the training contexts
    history = []
    vec_path = out / f"soft_prompt_{tag}.safetensors"
    if args.soft_prompt:
        soft = SoftPrompt.load(args.soft_prompt)
    else:
        log = (out / f"soft_prompt_{tag}_train.jsonl").open("w")

        def on_step(rec):
            rec = dict(rec, seconds=round(time.time() - t0, 1))
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        init = SoftPrompt.from_text(lm, args.init_text, args.position)
        res = train_soft_prompt(judge, list(zip(train.texts, train.candidates)), init, steps=args.steps,
                                pairs_per_step=args.pairs_per_step, learning_rate=args.lr,
                                calibration_weight=args.calibration_weight, seed=args.seed, callback=on_step)
        soft, history = res.soft_prompt, res.history
        soft.save(vec_path, judge, init_text=args.init_text, model=lm.name, data=args.data, aspect=args.aspect,
                  train_contexts=args.train_contexts, steps=str(args.steps), compilations=str(res.compilations))
        print(f"trained k={soft.length} vectors in {time.time() - t0:.0f}s ({res.compilations} compilation(s)) "
              f"-> {vec_path}", flush=True)
    t_train = time.time() - t0

    # ---- judge the same held-out pairs with every variant (resumable)
    judges = {"seed": judge, "soft": PromptJudge(lm, seed_t, batch_size=args.batch_size, soft_prompt=soft,
                                                 answer_prefix=judge.template.answer_prefix)}
    if zepo_judge is not None:
        judges["zepo"] = zepo_judge
    judges = {k: v for k, v in judges.items() if k in variants}
    if "soft" in want:
        want["soft"] = key_of(judges["soft"], soft_settings)
    try:
        check_rows(records, [store] * len(records), want)
    except ValueError as e:
        raise SystemExit(f"{e} (the judge's name carries the hash of the soft prompt's vectors: these vectors "
                         "are not the ones the stored rows were judged with)"
                         if re.search(r"(\(|; )judge: ", str(e)) else str(e)) from None
    done = {(r["variant"], r["context"]) for r in records}
    rng = np.random.default_rng(args.seed)
    plan = [eval_pairs(len(c), args.eval_pairs, rng) for c in held.candidates]
    with store.open("a") as f:
        for variant, jd in judges.items():
            for k, (cid, text, cands) in enumerate(zip(held.ids, held.texts, held.candidates)):
                if (variant, cid) in done:
                    continue
                i, j = plan[k]
                t1 = time.time()
                res = jd.compare(text, cands, i, j)
                p = res.p
                rec = {"variant": variant, "context": cid, "context_index": k, "i": i.tolist(), "j": j.tolist(),
                       "p": [float(x) for x in p], "seconds": round(time.time() - t1, 2), "key": want[variant],
                       "label_mass": None if res.label_mass is None else [float(x) for x in res.label_mass]}
                f.write(json.dumps(rec) + "\n")
                f.flush()
                records.append(rec)
                print(f"{variant} {cid}: {len(p)} comparisons in {rec['seconds']}s, P(A)={np.mean(p > 0.5):.2f}",
                      flush=True)
    rows = summarise(records, held.labels, args.boot, args.seed)
    t_all = time.time() - t0
    trained = (f"loaded from {args.soft_prompt}" if args.soft_prompt else
               f"trained on contexts {args.train_contexts} ({args.steps} steps x {2 * args.pairs_per_step} rows, "
               f"lr {args.lr}, lambda {args.calibration_weight})")
    note = (f"Vectors: k={soft.length}, position {soft.position}, {trained}; {prefix_note}; "
            f"held-out contexts {args.eval_contexts}, {args.eval_pairs} pairs each in both orders. "
            f"Training {t_train:.0f}s, whole run {t_all:.0f}s on {jax.devices()[0].platform}.")
    write_report(rows, history, out / f"soft_prompt_{tag}.md", dict(data=args.data, aspect=args.aspect,
                                                                     model=lm.name, note=note))
    (out / f"soft_prompt_{tag}.json").write_text(json.dumps({"rows": rows, "history": history, "note": note}, indent=1))
    plot(rows, history, out / f"soft_prompt_{tag}.png")
    print((out / f"soft_prompt_{tag}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
