"""Two loaded models judged on the same SummEval comparisons (for the tests of weights kept quantised)."""

import json
import os
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("JAXRANK_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def judge_both(q, f, n: int, article_words: int, summary_words: int | None = None):
    """``PromptJudge`` results of models ``q`` and ``f`` on ``n`` summaries of SummEval article A1 (its first
    ``article_words`` words; each summary's first ``summary_words``), every pair of ``(0, 1), (1, 0)`` for two
    summaries, ``(0, 1), (2, 0), (1, 2)`` for three; a fixed text when the data is absent. Returns
    ``(result_q, result_f, max |p_q - p_f|)``."""
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template

    path = DATA / "summeval" / "summeval.jsonl"
    rows = [r for r in map(json.loads, open(path)) if r["article_id"] == "A1"][:n] if path.is_file() else []
    cut = (lambda t, k: t if k is None else " ".join(t.split()[:k]))
    if rows:
        ctx, cands = cut(rows[0]["article"], article_words), [cut(r["summary"], summary_words) for r in rows]
    else:
        ctx, cands = "A short article about the weather.", ["It rained.", "Sunny skies all week.", "Snow."][:n]
    i, j = ([0, 1], [1, 0]) if n == 2 else ([0, 2, 1], [1, 0, 2])
    res = [PromptJudge(lm, pairwise_template("summeval", "coherence"), min_label_mass=0.0).compare(ctx, cands, i, j)
           for lm in (q, f)]
    return res[0], res[1], float(np.abs(np.asarray(res[0].p) - np.asarray(res[1].p)).max())
