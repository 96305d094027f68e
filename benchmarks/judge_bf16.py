"""CPU judging speed in float32 and bfloat16: jaxrank's PromptJudge against PyTorch with a KV cache, both dtypes.

SmolLM2-135M-Instruct (GGUF, dequantised), SummEval article 0, the first ``--candidates`` summaries, every
ordered comparison, coherence prompt. Sides, interleaved ``--repeats`` times in one process after one warm-up
call each (compilation): jaxrank with float32 weights, with bfloat16 weights (float32 cache), with bfloat16
weights and a bfloat16 cache; PyTorch transformers with the article's KV cache (``judge_peers.TorchJudge``,
batched like jaxrank) in float32 and in bfloat16 (``model.to(torch.bfloat16)``), each at the thread count
(1 or all cores) that was faster on one batch. Reported: comparisons/s median [min, max], the ratio of each
jaxrank row to the faster PyTorch row of the same weight dtype per repeat, and the largest ``|p - p_float32|``
against jaxrank's float32 ``p``.

    python benchmarks/judge_bf16.py [--candidates 6] [--repeats 3] [--answer-prefix auto]
                                    [--out benchmarks/results/judge_bf16.md]

The judges read the labels after the answer prefix the float32 model writes (``auto``), so ``p`` is a
judge's that answers (the labels' share of the answer is printed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).parent))
from judge_peers import TorchJudge  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--answer-prefix", default="auto",
                    help="'auto' (found from the float32 model's answers, the default), or the words ('' for none)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="3 candidates, one repeat")
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.repeats = 3, 1
    import jax
    import jax.numpy as jnp
    import torch

    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.models.loading import load_model

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[0], max_candidates=args.candidates)
    context, cands = cs.texts[0], cs.candidates[0]
    n = len(cands)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    template = pairwise_template("summeval", "coherence")
    lm32, lm16 = load_model("smollm2-135m"), load_model("smollm2-135m", dtype=jnp.bfloat16)
    judge32 = PromptJudge(lm32, template, batch_size=8, answer_prefix=args.answer_prefix)
    with warnings.catch_warnings():                   # the choice is reported in the table's header
        warnings.simplefilter("ignore", UserWarning)
        judge32.prepare(context, cands)                 # "auto": the words the model writes before the label
    prefix = judge32.template.answer_prefix          # every side reads the same prompt
    judges = {"jaxrank, float32 weights": (judge32, "float32"),
              "jaxrank, bfloat16 weights": (PromptJudge(lm16, template, batch_size=8, answer_prefix=prefix),
                                            "bfloat16"),
              "jaxrank, bfloat16 weights and cache": (PromptJudge(lm16, template, batch_size=8, answer_prefix=prefix,
                                                                  cache_dtype=jnp.bfloat16), "bfloat16")}
    ref = judges["jaxrank, float32 weights"][0]
    labels = np.array([ref.reading.ids[0][0], ref.reading.ids[1][0]], np.int32)
    peers = {}
    for dt in ("float32", "bfloat16"):
        tj = TorchJudge(lm32.path, labels, batch_size=8)
        if dt == "bfloat16":
            tj.model.to(torch.bfloat16)
            tj.head = tj.head.to(torch.bfloat16)
        few = np.flatnonzero(i == i[0])[:8]
        best = {}
        for threads in sorted({1, os.cpu_count() or 1}):
            tj.set_threads(threads)
            tj.cached(ref, context, cands, i[few], j[few])          # warm-up
            t0 = time.perf_counter()
            tj.cached(ref, context, cands, i[few], j[few])
            best[threads] = time.perf_counter() - t0
        tj.set_threads(min(best, key=best.get))
        peers[f"PyTorch, KV cache, {dt} weights ({tj.threads} thread(s))"] = (tj, dt)
    mass = {}

    def judged(jd, k):
        out = jd.compare(context, cands, i, j)
        mass[k] = np.asarray(out.label_mass)
        return np.asarray(out.p)

    sides = {k: (lambda jd=jd, k=k: judged(jd, k), dt) for k, (jd, dt) in judges.items()}
    sides.update({k: (lambda tj=tj: np.asarray(tj.cached(ref, context, cands, i, j)), dt)
                  for k, (tj, dt) in peers.items()})
    p, first = {}, {}
    for k, (f, _) in sides.items():
        t0 = time.perf_counter()
        p[k] = f()
        first[k] = time.perf_counter() - t0
    rates = {k: [] for k in sides}
    loads = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for k, (f, _) in sides.items():
            t0 = time.perf_counter()
            f()
            rates[k].append(len(i) / (time.perf_counter() - t0))
    loads.append(os.getloadavg()[0])
    p32 = p["jaxrank, float32 weights"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    lines = [f"# Judge speed in float32 and bfloat16: smollm2-135m, SummEval article {cs.ids[0]}, {n} candidates, "
             f"{len(i)} comparisons", "",
             "Command: `python benchmarks/judge_bf16.py " + " ".join(sys.argv[1:] if argv is None else argv) + "`"
             + f" at commit {commit}", "",
             f"Machine: 2 CPU cores (shared), jax {jax.__version__}, PyTorch {torch.__version__}; batch size 8; "
             f"{args.repeats} interleaved repeat(s) after one warm-up call per side; load (1 min) before each "
             f"repeat and at the end: {', '.join(f'{x:.2f}' for x in loads)}.", "",
             f"Answer prefix {prefix!r} (--answer-prefix {args.answer_prefix!r}), labels read as "
             f"{ref.reading.texts!r}; the labels hold {np.median(mass['jaxrank, float32 weights']):.1%} of the "
             "float32 model's answer (median over the comparisons).", "",
             "| side | comparisons / s, median [min, max] | jaxrank / faster PyTorch of the same weight dtype, "
             "per repeat: median [min, max] | max abs p difference vs jaxrank float32 | first call (s) |",
             "|---|---:|---:|---:|---:|"]
    for k, (_, dt) in sides.items():
        r = np.asarray(rates[k])
        if k.startswith("jaxrank"):
            same = [np.asarray(rates[q]) for q, (_, d) in peers.items() if d == dt]
            ratio = r / np.max(np.stack(same), axis=0)
            rr = f"{np.median(ratio):.2f} [{ratio.min():.2f}, {ratio.max():.2f}]x"
        else:
            rr = ""
        lines.append(f"| {k} | {np.median(r):.3f} [{r.min():.3f}, {r.max():.3f}] | {rr} | "
                     f"{np.abs(p[k] - p32).max():.1e} | {first[k]:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
