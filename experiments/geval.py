"""G-Eval on SummEval with a local judge: probability-weighted against plain scores, with and without auto-CoT.

The G-Eval paper's Table 1 protocol (g-eval §2-3) on the real SummEval
annotations, with a registered local LLM as the judge (default
``qwen2.5-0.5b``): for each of the four aspects and each of the first
``--contexts`` articles (16 summaries each), every summary is scored by
:class:`jaxrank.judges.GEvalJudge` twice:

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
geval-summeval-<judge>.jsonl`` as soon as they are made; a rerun skips what is
there (resumable). The summary (``...-<judge>.md`` and ``.csv``): Spearman and
Kendall per article against the human scores, mean over the articles with a
95% percentile bootstrap interval over articles.

    python experiments/geval.py [--judge qwen2.5-0.5b] [--contexts 20] [--summarise-only]
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
PAPER = {  # g-eval Table 1, G-Eval-4 (GPT-4): Spearman rho per aspect
    "coherence": 0.582, "consistency": 0.507, "fluency": 0.455, "relevance": 0.547}


def run(judge_name: str, contexts: int, batch_size: int, path: Path) -> None:
    """Score every (aspect, chain of thought, context) not yet in ``path``, appending as it goes."""
    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges import GEvalJudge
    from jaxrank.judges.prompts import pointwise_template
    from jaxrank.models.loading import load_model

    done = {(r["aspect"], r["cot"], r["context"]) for r in read(path)}
    ds = load_dataset("summeval")
    lm = None
    for aspect in ASPECTS:
        cs = contexts_of(ds, aspect=aspect, contexts=f"0:{contexts}")
        for cot in (True, False):
            todo = [k for k in range(len(cs.ids)) if (aspect, cot, cs.ids[k]) not in done]
            if not todo:
                continue
            lm = lm or load_model(judge_name)
            judge = GEvalJudge(lm, pointwise_template(aspect, chain_of_thought=cot), batch_size=batch_size)
            steps = judge.steps if cot else ""
            for k in todo:
                t0 = time.time()
                res = judge.score(cs.texts[k], cs.candidates[k])
                plain = judge.score_values[np.argmax(res.probs, axis=-1)]
                rec = {"judge": judge_name, "aspect": aspect, "cot": cot, "context": cs.ids[k],
                       "candidates": list(cs.candidate_ids[k]), "human": [float(x) for x in cs.labels[k]],
                       "weighted": res.scores.tolist(), "plain": plain.tolist(), "probs": res.probs.round(6).tolist(),
                       "truncated": bool(res.truncated), "steps": steps}
                with path.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                print(f"{aspect} cot={cot} {cs.ids[k]}: {time.time() - t0:.1f} s", flush=True)


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
    for aspect in ASPECTS:
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
                row = {"aspect": aspect, "cot": cot, "score": kind, "contexts": len(recs), "defined": int(ok.sum()),
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
        return "undefined (constant scores in every article)"
    ci = f" [{r[name + '_lo']:+.3f}, {r[name + '_hi']:+.3f}]" if np.isfinite(r[name + "_lo"]) else ""
    return f"{r[name]:+.3f}{ci}"


def write(rows: list[dict], records: list[dict], judge_name: str, stem: Path) -> str:
    with _with(stem, ".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = [f"# G-Eval on SummEval with {judge_name}: probability-weighted vs plain score, with and without auto-CoT",
             "", "Generated by `experiments/geval.py` from `" + _with(stem, ".jsonl").name + "`. Spearman and "
             "Kendall per article (16 summaries) against the human scores, mean over the articles where both "
             "the scores and the human scores vary, 95% percentile bootstrap interval over those articles. "
             "Plain = the most probable score token; weighted = sum_s P(s) s (g-eval eq. 1). Paper (G-Eval-4, "
             "GPT-4, Table 1, Spearman): " + ", ".join(f"{a} {v:.3f}" for a, v in PAPER.items()) + ".", "",
             "| aspect | auto-CoT | score | Spearman | Kendall | articles (defined / all) | constant scores |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['aspect']} | {'yes' if r['cot'] else 'no'} | {r['score']} | {_cell(r, 'spearman')} | "
                     f"{_cell(r, 'kendall')} | {r['defined']} / {r['contexts']} | {r['constant_scores']} |")
    steps = {r["aspect"]: r["steps"] for r in records if r["cot"]}
    lines += ["", "Evaluation steps the judge wrote (auto-CoT, greedy):", ""]
    for aspect, s in steps.items():
        lines += [f"- **{aspect}**: " + " ".join(s.split())[:600]]
    text = "\n".join(lines) + "\n"
    _with(stem, ".md").write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--judge", default="qwen2.5-0.5b", help="registered local model")
    ap.add_argument("--contexts", type=int, default=20, help="the first K SummEval articles")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--summarise-only", action="store_true", help="only rebuild the tables from the records")
    args = ap.parse_args(argv)
    if args.contexts < 2:
        raise SystemExit("--contexts must be at least 2 (an interval over articles)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"geval-summeval-{args.judge}"
    path = _with(stem, ".jsonl")
    if not args.summarise_only:
        run(args.judge, args.contexts, args.batch_size, path)
    records = read(path)
    if not records:
        raise SystemExit(f"no records in {path}")
    print(write(summarise(records), records, args.judge, stem))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
