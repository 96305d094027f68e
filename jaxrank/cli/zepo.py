"""``jaxrank zepo``: search a fairer judge instruction without labels (ZEPO, Algorithm 1)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jaxrank.cli import _common as common
from jaxrank.cli.assess import data_contexts, data_option, resolve_data
from jaxrank.cli._errors import UsageError


def add_parser(sub):
    """Add the ``zepo`` subcommand to the subparsers ``sub``."""
    z = sub.add_parser("zepo", help="search a fairer judge instruction without labels (ZEPO)",
                       description="ZEPO (zepo-fairer-preferences Algorithm 1): an LLM paraphraser proposes "
                                   "instructions, each judged on a fixed sample of unlabelled pairs (both orders); "
                                   "the fairest survives. Resumable (judgement store + search log). Writes the "
                                   "optimised template for 'jaxrank judge/assess --template FILE'.")
    common.cache_option(z)
    data_option(z)
    z.add_argument("--aspect", default="coherence", help="the aspect keyword (default coherence)")
    z.add_argument("--judge", default="smollm2-135m", help="the LLM judge (registry name, checkpoint or .gguf)")
    z.add_argument("--paraphraser", default=None,
                   help="the LLM optimiser (default: the judge's model); server:MODEL for a model behind an "
                        "OpenAI-compatible server (with --base-url)")
    common.server_options(z)
    common.reading_options(z)
    z.add_argument("--contexts", default=":", help="contexts the sample is drawn from: START:STOP or i,j,k")
    z.add_argument("--candidates", type=int, default=None, help="only the first N candidates of each context")
    z.add_argument("--sample-contexts", type=int, default=4, help="contexts in the fixed sample (default 4)")
    z.add_argument("--budget", type=int, default=6,
                   help="unordered pairs per sampled context, judged in both orders (default 6)")
    z.add_argument("--epochs", type=int, default=5, help="epochs (default 5, as the paper)")
    z.add_argument("--population", type=int, default=5, help="candidates per epoch (default 5, as the paper)")
    z.add_argument("--objective", default="fairness",
                   choices=("fairness", "confidence", "calibration", "context_free"))
    z.add_argument("--temperature", type=float, default=0.9, help="paraphraser temperature (default 0.9)")
    z.add_argument("--seed", type=int, default=0, help="seed of the sample and the paraphraser")
    z.add_argument("--template", default=common.DefaultName("zepo"),
                   help="seed template: 'zepo' (default), 'poe' or a FILE")
    z.add_argument("--batch-size", type=int, default=8)
    z.add_argument("--store", help="judgement store (default results/zepo/DATA-ASPECT-JUDGE.jsonl)")
    z.add_argument("--log", help="search log (default results/zepo/DATA-ASPECT-JUDGE-log.jsonl)")
    z.add_argument("--output", "-o", help="optimised template file (default results/zepo/DATA-ASPECT-JUDGE.json)")
    z.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args):
    """Run ``jaxrank zepo``."""
    from jaxrank.assessment import zepo
    from jaxrank.assessment.progress import progress_bar

    for name in ("sample_contexts", "budget", "population", "batch_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"jaxrank: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("epochs", "temperature"):
        if not 0 <= getattr(args, name) < float("inf"):
            raise UsageError(f"jaxrank: --{name} must be a finite number >= 0, got {getattr(args, name)}")
    for name in ("output", "log", "store"):
        value = getattr(args, name)
        if value and Path(value).is_dir():
            raise UsageError(f"jaxrank: --{name} {value} is a folder; give a file name")
    resolve_data(args)                          # --data FILE: its name, and 'poe' becomes the generic seed
    try:                                        # the seed must be searchable: checked before any model loads
        seed_template = common.template_option(args)
    except ValueError as e:
        raise UsageError(f"jaxrank: {e}") from None
    seed_instruction = zepo.instruction_of(seed_template)
    why = zepo.check_candidate(seed_instruction, args.aspect, labels=seed_template.labels)
    if why:
        raise UsageError(f"jaxrank: --template {args.template}: the seed instruction cannot be searched: {why}")
    keyword = zepo.aspect_keyword(seed_instruction, args.aspect)   # the word the paraphrases keep ('coherent')
    cs = data_contexts(args, labels=False)      # a file of one's own texts needs no human scores here
    served = str(args.paraphraser or "").startswith("server:")
    if served and not args.base_url:
        raise UsageError("jaxrank: --paraphraser server:MODEL needs --base-url URL (the OpenAI-compatible API)")
    local = served and not str(args.judge).startswith("server:")     # then --base-url is the paraphraser's
    judge = common.make_judge(argparse.Namespace(**{**vars(args), "base_url": None}) if local else args)
    if not hasattr(judge, "compare_templates"):
        raise UsageError(f"jaxrank: --judge {args.judge} is not a prompt judge; ZEPO needs an LLM judge")
    try:
        if served:
            from jaxrank.judges.server import ServerParaphraser     # httpx: only for a server
            para = ServerParaphraser(args.base_url, args.paraphraser.split(":", 1)[1], keyword,
                                     request=zepo.PARAPHRASE_INSTRUCTION, temperature=args.temperature,
                                     seed=args.seed, **common.server_settings(args))
        else:
            para = zepo.Paraphraser(args.paraphraser or judge.lm, keyword, temperature=args.temperature,
                                    seed=args.seed)
        sample = zepo.sample_pairs(cs, num_contexts=args.sample_contexts, pairs_per_context=args.budget,
                                   seed=args.seed)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: {e}")
    stem = Path("results/zepo") / f"{args.data}-{args.aspect}-{judge.name}"
    bar = None if args.no_progress else progress_bar((1 + args.epochs * args.population) * sample.size,
                                                     "judging candidates")
    rows = []

    def show(ep):
        rows.append(ep)
        text = f"epoch {ep['epoch']}: fairness {ep['fairness']:+.3f}, P(A) {ep['decision_rate']:.2f}, " \
               f"{ep['accepted']} scored, {ep['rejected']} rejected"
        (bar.write if bar is not None else print)(text)

    t0 = time.perf_counter()
    try:
        res = zepo.zepo_search(judge, para, judge.template, sample, args.aspect,
                               store=args.store or f"{stem}.jsonl", log=args.log or f"{stem}-log.jsonl",
                               epochs=args.epochs, population=args.population, objective=args.objective,
                               on_epoch=show, progress=None if bar is None else bar.update)
    except ValueError as e:
        raise SystemExit(f"jaxrank: {e}")
    finally:
        if bar is not None:
            bar.close()
    print("\n| epoch | best prompt | fairness | P(A) | scored | rejected |\n|---|---|---|---|---|---|")
    for ep in rows:
        short = ep["best"].replace("\n", " ")
        short = short if len(short) <= 70 else short[:67] + "..."
        print(f"| {ep['epoch']} | {short} | {ep['fairness']:+.3f} | {ep['decision_rate']:.2f} | "
              f"{ep['accepted']} | {ep['rejected']} |")
    out = zepo.save_template(res.best, args.output or f"{stem}.json")
    print(f"\n{res.judged} comparisons judged now ({sample.size} per candidate), {len(res.rejected)} candidates "
          f"rejected, {time.perf_counter() - t0:.1f} s; optimised template: {out}\n"
          f"use it with: jaxrank assess --judge {args.judge} --aspect {args.aspect} --template {_as_path(out)}")


def _as_path(path) -> str:
    """``path`` as ``--template`` reads it as a file: a bare name gets ``./`` (a bare ``zepo`` is the built-in style)."""
    text = str(path)
    return text if ("/" in text or "\\" in text or Path(text).suffix) else f"./{text}"

