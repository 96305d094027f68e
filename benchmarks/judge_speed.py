"""Pairwise judging speed: jaxrank's PromptJudge vs a plain PyTorch loop, same model, same CPU.

One SummEval article with its candidates (default all 16, so all 240 ordered
comparisons), the SmolLM2-135M-Instruct judge (GGUF), coherence prompt of the
PoE paper (Table 4) in the model's chat template.

(a) jaxrank: ``PromptJudge.compare`` on all comparisons of the context: the
    article's key/value cache is computed once, then once more per candidate in
    position A, and each comparison runs only candidate B and the question,
    batched and padded to length buckets. Timed on a first call (including
    compilation) and a second call (steady state).
(b) baseline: transformers' ``LlamaForCausalLM`` (PyTorch, weights dequantised
    from the same GGUF by transformers' own loader), one forward pass per
    comparison on the full prompt (the same token ids), reading the logits of
    the two label tokens at the last position; ``torch.inference_mode``, all
    CPU threads. Run on ``--baseline-comparisons`` of the comparisons (default
    all) and reported per comparison.

Reports comparisons per second of both, their ratio, and the largest
difference between the two sides' ``p``. Writes ``benchmarks/results/judge_speed.md``.

    python benchmarks/judge_speed.py [--candidates 16] [--article 0] [--batch-size 8]
                                     [--baseline-comparisons N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from pathlib import Path

import numpy as np


def torch_model(path):
    import torch
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = transformers.LlamaConfig(**load_gguf_checkpoint(str(path))["config"])
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover
        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        m = transformers.LlamaForCausalLM(cfg).eval()
    sd = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=m)["tensors"]
    m.load_state_dict(sd, strict=False)
    m.tie_weights()
    return torch, m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="smollm2-135m")
    ap.add_argument("--article", type=int, default=0, help="SummEval article (position)")
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--baseline-comparisons", type=int, default=None,
                    help="comparisons the PyTorch loop runs (default all; it is the slow side)")
    ap.add_argument("--smoke", action="store_true", help="4 candidates, baseline on 4 comparisons")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates = min(args.candidates, 4)
        args.baseline_comparisons = 4 if args.baseline_comparisons is None else args.baseline_comparisons

    from jaxrank.data import load_dataset
    from jaxrank.models.loading import load_model
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.assessment.run import contexts_of
    import jax

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[args.article],
                     max_candidates=args.candidates)
    context, cands = cs.texts[0], cs.candidates[0]
    n = len(cands)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    lm = load_model(args.judge)
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"), batch_size=args.batch_size)

    lines = []
    say = lambda s="": (print(s, flush=True), lines.append(s))
    say(f"# Judge speed: {lm.name}, SummEval article {cs.ids[0]}, {n} candidates, {len(i)} comparisons")
    say()
    say(f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__}.")

    t0 = time.perf_counter()
    first = judge.compare(context, cands, i, j)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = judge.compare(context, cands, i, j)
    t_steady = time.perf_counter() - t0
    assert np.array_equal(first.p, second.p)

    torch, tm = torch_model(lm.path)
    say(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads.")
    say()
    nb = len(i) if args.baseline_comparisons is None else min(args.baseline_comparisons, len(i))
    sel = np.random.default_rng(0).permutation(len(i))[:nb]
    labels = torch.tensor(judge._label_ids.astype(np.int64))
    p_ref = np.zeros(nb)
    lengths = []
    with torch.inference_mode():
        t0 = time.perf_counter()
        for r, k in enumerate(sel):
            pre, a, b = judge.token_ids(context, cands[i[k]], cands[j[k]])
            ids = torch.tensor([pre + a + b])
            lengths.append(ids.shape[1])
            logits = tm(ids).logits[0, -1, labels]
            p_ref[r] = torch.softmax(logits.double(), -1)[0].item()
        t_base = time.perf_counter() - t0
    diff = float(np.max(np.abs(p_ref - first.p[sel])))

    rate_first = len(i) / t_first
    rate_steady = len(i) / t_steady
    rate_base = nb / t_base
    say("| | comparisons | seconds | comparisons / s | ratio vs PyTorch loop |")
    say("|---|---:|---:|---:|---:|")
    say(f"| PyTorch loop (full prompt per comparison) | {nb} | {t_base:.1f} | {rate_base:.3f} | 1 |")
    say(f"| jaxrank, first call (incl. compile) | {len(i)} | {t_first:.1f} | {rate_first:.3f} | "
        f"{rate_first / rate_base:.2f}x |")
    say(f"| jaxrank, steady state | {len(i)} | {t_steady:.1f} | {rate_steady:.3f} | {rate_steady / rate_base:.2f}x |")
    say()
    say(f"Prompt length {int(np.mean(lengths))} tokens on average (max {max(lengths)}); "
        f"max |p_jaxrank - p_torch| = {diff:.2e} over the {nb} comparisons both ran.")
    say(f"Judge: P(A) = {float(np.mean(first.p > 0.5)):.3f}, mean p = {float(np.mean(first.p)):.3f}.")
    if args.smoke:   # 12 comparisons share little of their prompts: the goal is for a whole article (240)
        say(f"Smoke run (4 candidates): {rate_steady / rate_base:.2f}x; the 4x goal is assessed on a full run.")
    else:
        say("Goal: at least 4x: " + ("met" if rate_steady / rate_base >= 4 else "NOT met") + " (steady state).")
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / \
        ("judge_speed_smoke.md" if args.smoke else "judge_speed.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
