"""CPU judging speed of float32 against bfloat16 weights, same judge, same comparisons, same process.

For each model (default the real judges ``qwen2.5-0.5b`` and ``qwen2.5-1.5b``;
``--smoke``: the tiny random test model of ``tests/tiny_lm.py``) the weights
are loaded twice, in float32 and in bfloat16, and a
:class:`~jaxrank.judges.PromptJudge` (PoE coherence prompt, chat template,
the prefix-cached batched path) judges every ordered comparison (both orders)
of the first ``--candidates`` summaries of one SummEval article. After one
warm-up call per dtype (compilation), the two dtypes run interleaved
``--repeats`` times (:func:`_report.interleaved`, so load hits both alike).
Reported per dtype: comparisons/s and tokens/s, median [min, max]; tokens are
those the cached path runs (the prefix once, each position-A part once, each
comparison's B part), and the prompt-equivalent tokens (every full prompt) for
reference; and the float32/bfloat16 time ratio per repeat. Also the largest
``|p_f32 - p_bf16|``. Models that are not installed are skipped.

    python benchmarks/judge_dtype.py [--models qwen2.5-0.5b,qwen2.5-1.5b] [--candidates 6]
                                     [--repeats 3] [--batch-size 8] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # _report.py beside this file
from _report import Report, interleaved, load_line, spread  # noqa: E402


def models_for(name: str):
    """``{dtype name: LoadedModel}`` in float32 and bfloat16, or ``None`` if not installed."""
    import jax.numpy as jnp

    if name == "tiny":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import dataclasses

        from jaxrank.models.llama import LlamaModel
        from tiny_lm import tiny_lm

        lm = tiny_lm(chat=True, hidden=64)
        half = LlamaModel(lm.config, dtype=jnp.bfloat16, params=lm.model.weights())
        return {"float32": lm, "bfloat16": dataclasses.replace(lm, model=half)}
    from jaxrank.models.loading import load_model

    try:
        return {d: load_model(name, dtype=getattr(jnp, d)) for d in ("float32", "bfloat16")}
    except FileNotFoundError:
        return None


def tokens_run(judge, context, cands, i, j) -> tuple[int, int]:
    """``(cached-path tokens, prompt-equivalent tokens)`` of judging pairs ``(i, j)``."""
    pieces = [judge.token_ids(context, cands[a], cands[b]) for a, b in zip(i, j)]
    prefix = len(pieces[0][0])
    a_parts = {a: len(p[1]) for a, p in zip(i.tolist(), pieces)}
    cached = prefix + sum(a_parts.values()) + sum(len(p[2]) for p in pieces)
    full = sum(len(p[0]) + len(p[1]) + len(p[2]) for p in pieces)
    return cached, full


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--candidates", type=int, default=6)
    ap.add_argument("--article", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="the tiny test model, 3 candidates, 3 quick repeats")
    args = ap.parse_args(argv)
    if args.smoke:
        args.models, args.candidates = "tiny", 3

    import jax

    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[args.article],
                     max_candidates=args.candidates)
    context, cands = cs.texts[0], cs.candidates[0]
    i, j = np.nonzero(~np.eye(len(cands), dtype=bool))
    rep = Report("judge_dtype", smoke=args.smoke)
    rep.say(f"# PromptJudge speed, float32 vs bfloat16 weights (CPU, {os.cpu_count()} cores, jax {jax.__version__})")
    rep.say()
    rep.say(f"SummEval article {cs.ids[0]}, {len(cands)} summaries, {len(i)} ordered comparisons (both orders), "
            f"coherence prompt, batch size {args.batch_size}, {args.repeats} interleaved repeats.")
    rep.say()
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        lms = models_for(name)
        if lms is None:
            rep.say(f"{name}: not installed, skipped.")
            continue
        template = pairwise_template("summeval", "coherence")
        judges = {d: PromptJudge(lm, template, batch_size=args.batch_size) for d, lm in lms.items()}
        cached, full = tokens_run(judges["float32"], context, cands, i, j)
        first, p = {}, {}
        for d, jd in judges.items():
            t0 = time.perf_counter()
            p[d] = np.asarray(jd.compare(context, cands, i, j).p)
            first[d] = time.perf_counter() - t0
        times, loads = interleaved({d: (lambda jd=jd: jd.compare(context, cands, i, j)) for d, jd in judges.items()},
                                   args.repeats)
        ratio = np.asarray(times["float32"]) / np.asarray(times["bfloat16"])
        gap = float(np.max(np.abs(p["float32"] - p["bfloat16"])))
        for d in judges:
            t = np.asarray(times[d])
            rows.append((name, d, f"{first[d]:.1f}", spread(len(i) / t, fmt="{:.2f}"),
                         spread(cached / t, fmt="{:.0f}"), spread(full / t, fmt="{:.0f}"),
                         spread(ratio, fmt="{:.2f}") if d == "float32" else "", f"{gap:.3f}",
                         " / ".join(f"{x:.1f}" for x in loads)))
            rep.row(model=name, dtype=d, first_call_s=first[d], comparisons_per_s=float(np.median(len(i) / t)),
                    tokens_per_s=float(np.median(cached / t)), prompt_tokens_per_s=float(np.median(full / t)),
                    f32_over_bf16_time=float(np.median(ratio)), max_abs_p_gap=gap, load=float(np.median(loads)))
        del judges, lms
    rep.table(("model", "weights", "first call s", "comparisons/s", "tokens/s (cached path)",
               "prompt tokens/s", "time f32/bf16", "max abs p gap", "load per repeat"), rows)
    rep.say(f"Load average 1/5/15 at the end: {load_line()}.")
    rep.write()


if __name__ == "__main__":
    main()
