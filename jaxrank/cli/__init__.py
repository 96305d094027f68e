"""The ``jaxrank`` command line: a thin layer over the Python API.

    jaxrank rank [INPUT] [--method M] [--debias D] [--output FILE] [--top K] [column options]
    jaxrank judge  --data summeval --aspect coherence --judge smollm2-135m [--contexts 0:5]
                   [--candidates N] [--budget 48 --selection random] [--store FILE]
    jaxrank assess (the same options) [--methods ...] [--debias ...] [--output DIR]
    jaxrank assess --active [--budget B] [--active-batch K] [--rank-confidence 0.9]
                   [--stop-rule spearman|adjacent] (the other assess options)
    jaxrank zepo   --data summeval --aspect coherence --judge smollm2-135m [--paraphraser M]
                   [--sample-contexts 4 --budget 6] [--epochs 5 --population 5] [--output FILE]
    jaxrank store check PATH     (damaged lines, duplicated keys; exit status 1 if any)
    jaxrank store repair PATH    (move them to PATH.damaged, keeping every valid first record)

``judge`` writes every judgement to a resumable store as it is produced;
``assess`` = judge + aggregate with every scorer + report (Spearman with the
human scores, positional bias P(A), pairwise accuracy, verdict). Without
options, ``assess`` runs the embedded default: all 100 SummEval articles x 16
summaries, relevance, the MiniLM-L6 similarity judge (chosen by measurement).
``assess --active`` asks the judge, per context, only for the most informative
comparisons in batches (:func:`jaxrank.assessment.active_judge_contexts`) until the
budget is spent or the Laplace posterior is confident enough of the ranking,
through the same resumable store, and reports the comparisons used.
``zepo`` searches a fairer instruction without labels (ZEPO) and writes a template file that
``judge``/``assess --template FILE`` read.

Without INPUT, ranks the embedded default: the international football results
of the shared data folder (49k real matches, 337 teams), with the home side in
position A, so that a learnt positional bias is the home advantage.

One module per subcommand (``rank``, ``assess`` for judge and assess, ``zepo``, ``store``); none
imports JAX at module level, so ``jaxrank --help`` and argument errors answer without it.
"""

from __future__ import annotations

import argparse
import os
import sys

from jaxrank.cli import _common as common
from jaxrank.cli import assess, rank, store, zepo
from jaxrank._faults import Fault
from jaxrank.cli._errors import UsageError
from jaxrank._notices import quiet_torch_notice

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxrank`` argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="jaxrank", description="LLM comparative assessment in JAX.")
    sub = ap.add_subparsers(dest="command", required=True)
    rank.add_parser(sub)
    assess.add_parsers(sub)
    zepo.add_parser(sub)
    store.add_parser(sub)
    return ap


def main(argv=None):
    """Run the ``jaxrank`` command; output cut short by its reader (``jaxrank rank | head``) ends it quietly."""
    try:
        _main(argv)
    except UsageError as e:
        e.report()
        raise
    except BrokenPipeError:
        # the reader closed the pipe: stop writing, without a traceback (Python's documented recipe)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1)
    except OSError as e:           # a full disk, a folder that cannot be made: one line, not a traceback
        if e.filename is not None and e.strerror:
            what = f"{e.filename}: {e.strerror}" + (f" (and {e.filename2})" if e.filename2 else "")
        else:
            what = str(e)
        raise SystemExit(f"jaxrank: {what}") from None
    except Fault as e:             # an ordinary fault of the library (a strict judge, a store's conflict)
        raise SystemExit(f"jaxrank: {e}") from None


def _main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "rank":  # its options and file are checked before JAX is imported
        rank.run(args)
        return
    if args.command == "store":
        store.run(args)
        return
    for flag in ("batch_size", "candidates", "budget"):      # judge and assess: before loading a model
        value = getattr(args, flag, None)
        if value is not None and value != "auto" and value < 1:
            raise UsageError(f"jaxrank: --{flag.replace('_', '-')} must be >= 1, got {value}")
    if getattr(args, "candidates", None) == 1:
        raise UsageError("jaxrank: --candidates must be >= 2: a comparison needs two candidates, got 1")
    if getattr(args, "selection", None) and getattr(args, "budget", None) is None and \
            not getattr(args, "active", False):
        raise UsageError(f"jaxrank: --selection {args.selection} applies with --budget only (without one every "
                         "ordered pair is judged)")
    mass = getattr(args, "min_label_mass", None)
    if mass is not None and not 0.0 <= mass <= 1.0:
        raise UsageError(f"jaxrank: --min-label-mass must lie in [0, 1], got {mass:g}")
    common.enable_cache(args)
    with quiet_torch_notice():       # transformers' "PyTorch was not found" says nothing of jaxrank's own models
        if args.command == "judge" and args.diagnose is not None:
            assess.run_diagnose(args)
        elif args.command == "judge":
            assess.run_judge(args)
        elif args.command == "assess":
            assess.run_assess(args)
        elif args.command == "zepo":
            zepo.run(args)

