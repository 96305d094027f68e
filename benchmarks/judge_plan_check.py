"""Batch plan against full batches for the LLM judge's B stage, side by side with PyTorch (issue 33).

The same ``PromptJudge`` (SmolLM2-135M, SummEval article 0, coherence template, batch size 8) with
``batch_cost=0`` (the CPU default: :func:`~jaxrank.judges.pairwise.plan_batches` cuts each A's rows where
they pad least, many small calls) and with a large ``batch_cost`` (few full batches), and PyTorch with the
KV cache (``judge_peers.TorchJudge.cached``, 1 thread), run interleaved in one process; the B stage's
calls, padded tokens and seconds from ``judge_speed.TimedModel``. Prints only (the figures and their loads
are kept by hand in ``benchmarks/results/judge_speed.notes.md``).

    python benchmarks/judge_plan_check.py [--candidates 8] [--costs 0,1000] [--repeats 2] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--costs", default="0,1000", help="batch_cost values, comma-separated")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="3 candidates, one repeat")
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.repeats = 3, 1
    costs = [int(x) for x in args.costs.split(",")]

    from judge_peers import TorchJudge
    from judge_speed import TimedModel
    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.models.loading import load_model

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[0], max_candidates=args.candidates)
    context, cands = cs.texts[0], cs.candidates[0]
    i, j = np.nonzero(~np.eye(len(cands), dtype=bool))
    lm = load_model("smollm2-135m")
    tpl = pairwise_template("summeval", "coherence")
    timed = {c: TimedModel(lm.model) for c in costs}
    judges = {c: PromptJudge(dataclasses.replace(lm, model=timed[c]), tpl, batch_size=8, batch_cost=c) for c in costs}
    ref = None
    for c in costs:                                   # first calls: compilation, p agreement
        p = judges[c].compare(context, cands, i, j).p
        ref = p if ref is None else ref
        print(f"batch_cost {c}: max |p - p(batch_cost {costs[0]})| = {float(np.abs(p - ref).max()):.1e}")
        timed[c].__init__(lm.model)                   # count steady calls only
    reading = judges[costs[0]].reading
    tj = TorchJudge(lm.path, np.array([reading.ids[0][0], reading.ids[1][0]], np.int32), batch_size=8)
    tj.set_threads(1)
    rates = {c: [] for c in costs} | {"torch": []}
    for _ in range(args.repeats):
        print("load", os.getloadavg(), flush=True)
        for c in costs:
            t0 = time.perf_counter()
            judges[c].compare(context, cands, i, j)
            rates[c].append(len(i) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        pt = tj.cached(judges[costs[0]], context, cands, i, j)
        rates["torch"].append(len(i) / (time.perf_counter() - t0))
    print("load at the end", os.getloadavg(), f"PyTorch max |p - jaxrank p| = {float(np.abs(pt - ref).max()):.1e}")
    b, n = "B batches", args.repeats
    for c in costs:
        t = timed[c]
        print(f"batch_cost {c}: B calls {t.calls[b] // n}, real {t.real[b] // n}, padded {t.padded[b] // n} "
              f"({t.padded[b] / t.real[b] - 1:.0%} extra), B seconds {t.seconds[b] / n:.1f}; "
              f"{np.median(rates[c]):.3f}/s [{min(rates[c]):.3f}-{max(rates[c]):.3f}], ratio to PyTorch per repeat "
              + ", ".join(f"{a / q:.2f}" for a, q in zip(rates[c], rates["torch"])))
    print(f"PyTorch KV cache: {np.median(rates['torch']):.3f}/s [{min(rates['torch']):.3f}-{max(rates['torch']):.3f}]")


if __name__ == "__main__":
    main()
