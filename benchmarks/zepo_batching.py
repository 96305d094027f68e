"""ZEPO's judging cost: one epoch's candidate prompts as one prefix-shared job vs one job per prompt.

A ZEPO search (zepo-fairer-preferences Algorithm 1) judges every candidate
instruction of an epoch on the same pairs. The instruction comes after the two
candidates (ZEPO's seed layout), so every candidate prompt shares the text up to
candidate A (chat header, article) and up to candidate B. Compared, on one
SummEval article and all its ordered pairs:

(a) batched: ``PromptJudge.compare_templates(K templates, ...)``: the article's
    key/value cache once, candidate A once per A, the ``K x R`` remaining parts
    (candidate B + instruction) in batches together;
(b) separate (the strongest use of the baseline, the same cached and bucketed
    judge): ``judge.with_template(t).compare(...)`` for each of the ``K``
    templates, each paying the article and candidate A again.

Both are compiled first (one untimed call each); then they run interleaved,
``--repeats`` times; reported are median and range of the comparisons per
second, the ratio per repeat, the largest difference of ``p`` between the two
(they must agree), and the load. ``--smoke``: a random 2-layer model with
SmolLM2's tokenizer, few candidates (seconds). Writes
``benchmarks/results/zepo_batching[_smoke].{md,csv}``.

    python benchmarks/zepo_batching.py [--templates 6] [--candidates 5] [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from flax import nnx

from _report import Report, interleaved, load_line, machine, spread
from jaxrank.assessment.run import contexts_of
from jaxrank.assessment.zepo import with_instruction
from jaxrank.data import load_dataset
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from jaxrank.models.llama import LlamaModel
from jaxrank.models.loading import load_model

INSTRUCTIONS = [
    "Which summary candidate shows better coherence? Answer 'A' or 'B' only.",
    "Judge the coherence of both summaries and return A if the first is better, B otherwise.",
    "Decide which candidate has the better coherence. Reply with the letter A or B.",
    "Compare how well each summary holds together (coherence). Output A or B, nothing else.",
    "Select the summary with greater coherence: A for candidate A, B for candidate B. Display your selection.",
    "Which of the two summaries is more coherent overall? Return only A or B.",
    "Assess coherence; choose A or B.",
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--templates", type=int, default=6, help="candidate prompts of one epoch (K)")
    ap.add_argument("--candidates", type=int, default=5, help="summaries of the article (all ordered pairs)")
    ap.add_argument("--article", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.templates, args.candidates, args.repeats = 3, 3, 2
    if not 1 <= args.templates <= len(INSTRUCTIONS) + 1:
        raise SystemExit(f"--templates must lie in [1, {len(INSTRUCTIONS) + 1}]")
    rep = Report("zepo_batching", smoke=args.smoke)
    lm = load_model("smollm2-135m")
    if args.smoke:     # SmolLM2's tokenizer and chat template on a random 2-layer model: seconds, same shapes logic
        cfg = dataclasses.replace(lm.config, num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16)
        lm = dataclasses.replace(lm, model=LlamaModel(cfg, rngs=nnx.Rngs(0)), config=cfg, name="smollm2-tiny")
    seed = pairwise_template("summeval", "coherence", style="zepo")
    temps = [seed] + [with_instruction(seed, s) for s in INSTRUCTIONS[:args.templates - 1]]
    cs = contexts_of(load_dataset("summeval"), contexts=str(args.article), max_candidates=args.candidates)
    ctx, cands = cs.texts[0], cs.candidates[0]
    n = len(cands)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    judge = PromptJudge(lm, seed, batch_size=args.batch_size)
    singles = [judge.with_template(t) for t in temps]

    def batched():
        return [r.p for r in judge.compare_templates(temps, ctx, cands, i, j)]

    def separate():
        return [s.compare(ctx, cands, i, j).p for s in singles]

    diff = max(float(np.abs(a - b).max()) for a, b in zip(batched(), separate()))   # also compiles both
    times, loads = interleaved({"batched": batched, "separate": separate}, args.repeats)
    total = len(temps) * len(i)
    rate = {k: total / np.array(v) for k, v in times.items()}
    ratio = np.array(times["separate"]) / np.array(times["batched"])
    prefix = len(judge.token_ids(ctx, cands[0], cands[1])[0])
    rep.say(f"# ZEPO candidate prompts: one prefix-shared job vs one job per prompt ({lm.name})\n")
    rep.say(f"{machine()}\n")
    rep.say(f"SummEval article {args.article} ({prefix} prefix tokens), {n} summaries, all {len(i)} ordered pairs, "
            f"K = {len(temps)} candidate prompts = {total} comparisons per call; batch size {args.batch_size}; "
            f"{args.repeats} interleaved repeats after one compiling call each.\n")
    rep.table(["way", "comparisons / s, median [min, max]", "seconds per epoch's prompts"],
              [[k, spread(rate[k], fmt="{:.2f}"), spread(times[k], fmt="{:.2f}")] for k in times])
    rep.say(f"Ratio separate / batched time: {spread(ratio, fmt='{:.2f}')}x (per repeat). "
            f"Largest |p batched - p separate|: {diff:.2e}. Load per repeat: "
            f"{', '.join(f'{x:.1f}' for x in loads)} (1/5/15 min now: {load_line()}).\n")
    for r in range(args.repeats):
        rep.row(repeat=r, templates=len(temps), comparisons=total, batched_s=times["batched"][r],
                separate_s=times["separate"][r], ratio=float(ratio[r]), load=loads[r], max_abs_diff=diff)
    rep.write()


if __name__ == "__main__":
    main()
