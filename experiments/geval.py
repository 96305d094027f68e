"""G-Eval with a local judge: probability-weighted against plain scores, with and without auto-CoT.

The G-Eval paper's Table 1 protocol (g-eval §2-3) on real human annotations
(SummEval, or TopicalChat with ``--data topicalchat``), with a registered
local LLM as the judge: for each aspect and each context of ``--contexts``
(a slice, e.g. ``0:10``; the first ``--candidates`` candidates of each), every
candidate is scored by :class:`jaxrank.judges.GEvalJudge` twice:

* **with auto chain-of-thought**: evaluation steps written once per aspect by
  the model itself (greedy) and pasted into every prompt (the steps are kept
  in the records);
* **without** (``pointwise_template(..., chain_of_thought=False)``): no steps.

From one forward pass per summary come both scores of the paper's ablation:
the **probability-weighted** score ``sum_s P(s) s`` (g-eval eq. 1) and the
**plain** score (the most probable score token, what a greedy decoder would
write). The plain score ties often; a context where a score is constant has
no Spearman and is counted and named as such, never averaged as NaN.

Every context's scores are appended to ``experiments/results/geval/
geval-<data>-<judge>.jsonl`` as soon as they are made, with the judge's
fingerprint, the reading (``READING``: the tokenizer's ids of each whole
prompt) and the score tokens' mass; a rerun skips what is there with the same
reading and fingerprint (resumable); records of an older reading are kept and
never mixed in. The summary (``...-<judge>.md`` and ``.csv``): Spearman and
Kendall per context against the human scores, mean over the contexts with a
95% percentile bootstrap interval over contexts.

    python experiments/geval.py --judge qwen2.5-coder-1.5b --data topicalchat --aspects coherence \
        --contexts 0:10 --candidates 4
    python experiments/geval.py --judge qwen2.5-0.5b --summarise-only      # an older run's tables
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxrank.metrics import kendall_tau, spearman  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "geval"
ASPECTS = ("coherence", "consistency", "fluency", "relevance")
READING = "whole-text"
"""How the prompts were tokenised: each whole prompt by the tokenizer (records without it: pieces apart, old)."""
DIALOGUE_CRITERIA = {
    # Our wording, after g-eval's TopicalChat prompts (a response judged against the dialogue history).
    "coherence": "Coherence (1-5) - whether the response is a coherent, logical continuation of the dialogue "
                 "history: it follows from what was said and makes sense as the next turn.",
    "naturalness": "Naturalness (1-5) - whether the response is what a person would naturally say next.",
    "engagingness": "Engagingness (1-5) - whether the response is interesting and makes one want to reply.",
    "groundedness": "Groundedness (1-5) - whether the response uses the given fact correctly.",
}
PAPER = {  # g-eval Table 1, G-Eval-4 (GPT-4): Spearman rho per aspect
    "coherence": 0.582, "consistency": 0.507, "fluency": 0.455, "relevance": 0.547}


def run(judge_name: str, data: str, aspects, contexts: str, candidates: int | None, batch_size: int,
        path: Path) -> None:
    """Score every (aspect, chain of thought, context) not yet in ``path``, appending as it goes."""
    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges import GEvalJudge
    from jaxrank.judges.prompts import pointwise_template
    from jaxrank.models.loading import load_model

    ds = load_dataset(data)
    lm = load_model(judge_name)
    fingerprint = lm.fingerprint
    done = {(r["aspect"], r["cot"], r["context"]) for r in read(path)
            if r.get("reading") == READING and r.get("fingerprint") == fingerprint}
    kind = "summary" if data == "summeval" else "response"
    for aspect in aspects:
        cs = contexts_of(ds, aspect=aspect, contexts=contexts, max_candidates=candidates)
        criteria = DIALOGUE_CRITERIA.get(aspect) if kind == "response" else None
        for cot in (True, False):
            todo = [k for k in range(len(cs.ids)) if (aspect, cot, cs.ids[k]) not in done]
            if not todo:
                continue
            judge = GEvalJudge(lm, pointwise_template(aspect, criteria=criteria, kind=kind, chain_of_thought=cot),
                               batch_size=batch_size, min_label_mass=0.0)
            steps = judge.steps if cot else ""
            for k in todo:
                t0 = time.time()
                res = judge.score(cs.texts[k], cs.candidates[k])
                plain = judge.score_values[np.argmax(res.probs, axis=-1)]
                rec = {"judge": judge_name, "fingerprint": fingerprint, "reading": READING, "data": data,
                       "aspect": aspect, "cot": cot, "context": cs.ids[k],
                       "candidates": list(cs.candidate_ids[k]), "human": [float(x) for x in cs.labels[k]],
                       "weighted": res.scores.tolist(), "plain": plain.tolist(), "probs": res.probs.round(6).tolist(),
                       "label_mass": np.asarray(res.label_mass, np.float64).round(6).tolist(),
                       "top_tokens": [lm.tokenizer.decode([int(t)]) for t in np.asarray(res.top_ids)[:, 0]],
                       "truncated": bool(res.truncated), "steps": steps}
                with path.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                print(f"{aspect} cot={cot} {cs.ids[k]}: {time.time() - t0:.1f} s, score-token mass "
                      f"{np.min(res.label_mass):.3f}-{np.max(res.label_mass):.3f}", flush=True)


def current(records: list[dict]) -> tuple[list[dict], str]:
    """The records of the newest reading (``READING``) if there are any, else the old ones; and which."""
    new = [r for r in records if r.get("reading") == READING]
    return (new, READING) if new else (records, "old")


def read(path: Path) -> list[dict]:
    """The stored records (a torn last line, from a killed run, is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def bootstrap_ci(values: np.ndarray, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean over articles (needs 2 or more)."""
    if len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (draws, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarise(records: list[dict]) -> list[dict]:
    """One row per (aspect, chain of thought, score kind): correlations per article, mean, interval."""
    rows = []
    aspects = list(dict.fromkeys(r["aspect"] for r in records))
    for aspect in aspects:
        for cot in (True, False):
            recs = [r for r in records if r["aspect"] == aspect and r["cot"] == cot]
            if not recs:
                continue
            human = np.asarray([r["human"] for r in recs], np.float32)
            for kind in ("weighted", "plain"):
                pred = np.asarray([r[kind] for r in recs], np.float32)
                constant = np.ptp(pred, axis=1) == 0
                constant_h = np.ptp(human, axis=1) == 0
                rho = np.asarray(spearman(pred, human), np.float64)
                tau = np.asarray(kendall_tau(pred, human), np.float64)
                ok = ~(constant | constant_h)
                mass = np.concatenate([r.get("label_mass", [np.nan]) for r in recs]).astype(np.float64)
                row = {"aspect": aspect, "cot": cot, "score": kind, "contexts": len(recs), "defined": int(ok.sum()),
                       "reading": recs[0].get("reading", "old"),
                       "mass_median": float(np.median(mass)), "mass_min": float(np.min(mass)),
                       "constant_scores": int((constant & ~constant_h).sum()), "constant_humans": int(constant_h.sum())}
                for name, v in (("spearman", rho[ok]), ("kendall", tau[ok])):
                    lo, hi = bootstrap_ci(v)
                    row.update({name: float(v.mean()) if len(v) else float("nan"), f"{name}_lo": lo, f"{name}_hi": hi})
                rows.append(row)
    return rows


def _with(stem: Path, suffix: str) -> Path:
    """``stem`` + ``suffix`` (not ``with_suffix``: a judge name such as ``qwen2.5-0.5b`` holds dots)."""
    return stem.parent / (stem.name + suffix)


def _cell(r, name):
    if not r["defined"]:
        return "undefined (constant scores in every context)"
    ci = f" [{r[name + '_lo']:+.3f}, {r[name + '_hi']:+.3f}]" if np.isfinite(r[name + "_lo"]) else ""
    return f"{r[name]:+.3f}{ci}"


def write(rows: list[dict], records: list[dict], judge_name: str, data: str, stem: Path) -> str:
    with _with(stem, ".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    unit = "article" if data == "summeval" else "dialogue"
    sizes = sorted({len(r["human"]) for r in records})
    reading = rows[0]["reading"]
    lines = [f"# G-Eval on {data} with {judge_name}: probability-weighted vs plain score, with and without auto-CoT",
             "", "Generated by `experiments/geval.py` from `" + _with(stem, ".jsonl").name + "`. Spearman and "
             f"Kendall per {unit} ({'/'.join(map(str, sizes))} candidates) against the human scores, mean over the "
             f"{unit}s where both the scores and the human scores vary, 95% percentile bootstrap interval over "
             f"those {unit}s. Plain = the most probable score token; weighted = sum_s P(s) s (g-eval eq. 1). "
             "Score-token mass: the score tokens' share of the model's next token (full vocabulary). "
             + ("Reading: the tokenizer's ids of each whole prompt. " if reading == READING else
                "**Old reading**: prompts tokenised in pieces, before the judges were checked; not a result. ")
             + ("Paper (G-Eval-4, GPT-4, Table 1, Spearman): " + ", ".join(f"{a} {v:.3f}" for a, v in PAPER.items())
                + "." if data == "summeval" else ""), "",
             f"| aspect | auto-CoT | score | Spearman | Kendall | {unit}s (defined / all) | constant scores | "
             "score-token mass median (min) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        mass = (f"{r['mass_median']:.3f} ({r['mass_min']:.3f})" if np.isfinite(r["mass_median"]) else "-")
        lines.append(f"| {r['aspect']} | {'yes' if r['cot'] else 'no'} | {r['score']} | {_cell(r, 'spearman')} | "
                     f"{_cell(r, 'kendall')} | {r['defined']} / {r['contexts']} | {r['constant_scores']} | {mass} |")
    steps = {r["aspect"]: r["steps"] for r in records if r["cot"]}
    lines += ["", "Evaluation steps the judge wrote (auto-CoT, greedy):", ""]
    for aspect, s in steps.items():
        lines += [f"- **{aspect}**: " + " ".join(s.split())[:600]]
    text = "\n".join(lines) + "\n"
    _with(stem, ".md").write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--judge", default="qwen2.5-coder-1.5b", help="registered local model")
    ap.add_argument("--data", default="summeval", choices=("summeval", "topicalchat"))
    ap.add_argument("--aspects", default=None, help="comma-separated (default: SummEval's four; TopicalChat "
                    "coherence)")
    ap.add_argument("--contexts", default="0:20", help="a slice of contexts (or K: the first K)")
    ap.add_argument("--candidates", type=int, default=None, help="the first N candidates of each context")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--summarise-only", action="store_true", help="only rebuild the tables from the records")
    args = ap.parse_args(argv)
    contexts = f"0:{args.contexts}" if args.contexts.isdigit() else args.contexts
    aspects = (args.aspects.split(",") if args.aspects else
               list(ASPECTS) if args.data == "summeval" else ["coherence"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"geval-{args.data}-{args.judge}"
    path = _with(stem, ".jsonl")
    if not args.summarise_only:
        run(args.judge, args.data, aspects, contexts, args.candidates, args.batch_size, path)
    records, _ = current(read(path))
    if not records:
        raise SystemExit(f"no records in {path}")
    print(write(summarise(records), records, args.judge, args.data, stem))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
