"""``jaxrank judge`` and ``jaxrank assess``: judge a data set into a resumable store, then score and report.

``assess --active`` asks the judge, per context, only for the most informative comparisons
(:func:`jaxrank.assessment.active_judge_contexts`).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from pathlib import Path

from jaxrank import scorer_table   # JAX-free: the scorer names and debias choices for --help
from jaxrank.cli import _common as common
from jaxrank.cli._common import DEFAULT_ASPECT, DEFAULT_JUDGE
from jaxrank.cli._errors import UsageError


def add_parsers(sub):
    """Add the ``judge`` and ``assess`` subcommands to the subparsers ``sub``."""
    for name, helptext in (("judge", "judge comparisons of a data set with an LLM into a resumable store"),
                           ("assess", "judge + aggregate + report agreement with human scores")):
        j = sub.add_parser(name, help=helptext, description=helptext)
        common.cache_option(j)
        data_option(j)
        j.add_argument("--aspect", default=DEFAULT_ASPECT,
                       help=f"human aspect / prompt attribute (default {DEFAULT_ASPECT})")
        j.add_argument("--judge", default=DEFAULT_JUDGE,
                       help="registry name (minilm-l6 = similarity judge, the default; smollm2-135m and "
                            "qwen2.5-coder-0.5b = LLM judges), a Hugging Face checkpoint directory or a .gguf file, or "
                            "server:MODEL for a model behind an OpenAI-compatible server (with --base-url)")
        j.add_argument("--contexts", default=":", help="contexts by position: START:STOP or i,j,k (default all)")
        j.add_argument("--candidates", type=int, default=None,
                       help="only the first N candidates of each context (default all)")
        j.add_argument("--budget", type=int, default=None, help="comparisons per context (default all N(N-1))")
        j.add_argument("--selection", choices=("random", "no_repeat", "symmetric"), default=None,
                       help="how a --budget subset is drawn (default random)")
        j.add_argument("--seed", type=int, default=0)
        j.add_argument("--template", default=common.DefaultName("poe"),
                       help="prompt: 'poe' (PoE Table 4 style, default), 'zepo' (ZEPO's seed) or a template FILE "
                            "(.json from 'jaxrank zepo', or a text file with {context}, {a} and {b})")
        j.add_argument("--soft-prompt", default=None, metavar="FILE",
                       help="learnt input vectors (safetensors, experiments/soft_prompt.py) for an LLM judge")
        j.add_argument("--weights", choices=("float", "quantised"), default="float",
                       help="an LLM judge's weights: float32 (default, the fastest on a CPU) or kept quantised "
                            "(a GGUF file's blocks, int8 for safetensors), dequantised inside each matrix product: "
                            "a 7B model at 4 bits in about 4 GB")
        common.reading_options(j)
        common.server_options(j)
        j.add_argument("--batch-size", type=common.batch_size_arg, default="auto",
                       help="rows per forward pass, or 'auto' (default): 8 on a CPU; on a GPU or TPU what fits "
                            "the device memory free (an LLM judge; a similarity judge takes 8)")
        j.add_argument("--store", help="judgement store (.jsonl); default results/judgements/DATA-ASPECT-JUDGE.jsonl")
        j.add_argument("--no-progress", action="store_true", help="no progress bar")
        common.process_options(j)
        if name == "judge":
            j.add_argument("--diagnose", type=int, nargs="?", const=8, default=None, metavar="N",
                           help="judge N sampled pairs (default 8) in both orders and print what the model answers "
                                "at the answer position: top tokens, label mass, P(A), order consistency, accuracy "
                                "against the human scores, and a verdict; without and with the answer prefix")
        if name == "assess":
            j.add_argument("--methods", default=",".join(_report_methods()),
                           help="comma-separated scorers (default: all but max_likelihood_ranking)")
            j.add_argument("--debias", choices=("none",) + scorer_table.TRANSFORMS, default="none")
            j.add_argument("--output", "-o", default="results", help="folder for the report and scores")
            j.add_argument("--active", action="store_true",
                           help="active assessment: ask for the most informative comparisons in batches until "
                                "--budget (default N(N-1)) or --rank-confidence is reached")
            j.add_argument("--active-batch", type=int, default=None,
                           help="--active: comparisons asked per round (default 4)")
            j.add_argument("--rank-confidence", type=_confidence, default=None,
                           help="--active: stop a context when the posterior's confidence in its ranking reaches "
                                "this, in (-1, 1) (default 0.9; 'none': run to the budget)")
            j.add_argument("--stop-rule", choices=("spearman", "adjacent"), default=None,
                           help="--active: confidence = expected Spearman under the Laplace posterior (default), "
                                "or mean P(correct order) of adjacent items")
            j.add_argument("--score-prior", type=float, default=None, metavar="LAMBDA",
                           help="--active: a N(0, 1/LAMBDA) prior on the scores of the soft Bradley-Terry fit "
                                "(default 0: none). Set it (e.g. 0.1) for a judge of hard 0/1 answers (one sampled "
                                "answer, a text judge): without it a consistent judge's scores grow without bound "
                                "and the confidence stays near 0")


DATA_HELP = ("a data set name (default summeval), read from the folder $JAXRANK_DATA (default: ../shared/data "
             "beside the jaxrank repository; export JAXRANK_DATA=/path/to/data to point elsewhere), or your own "
             "texts: a .csv, .jsonl, .json or .parquet FILE with the columns context_id, context, candidate_id, "
             "candidate and optional human scores (a column 'score', or one named as --aspect); without human "
             "scores the report ranks the candidates with intervals, without agreement figures")


def data_option(p, default="summeval"):
    """``--data NAME|FILE``: a registered data set or a file of one's own texts (:func:`resolve_data`)."""
    p.add_argument("--data", default=default, metavar="NAME|FILE", help=DATA_HELP)


def _fail(message: str):
    """A bad ``--data FILE`` (unreadable, a missing column, not UTF-8, ...): a usage error, one line on stderr and
    exit status 2 (:class:`jaxrank.cli._errors.UsageError`)."""
    raise UsageError(message)


def resolve_data(args):
    """``--data FILE``: read the file once (:func:`jaxrank.data.read_records`) and name its data set by the
    file's stem and a hash of its bytes (:func:`jaxrank.data.dataset_name`), the name the store path, the
    report and the output files carry; ``--template poe`` (which has prompts for the built-in data sets
    only) becomes ZEPO's generic seed prompt. A registered name is left as it is. Idempotent."""
    if getattr(args, "data_file", None) is not None:
        return
    from jaxrank.data.records import FILE_SUFFIXES   # JAX-free: the names and suffixes only

    spec = str(args.data)
    path = Path(spec)
    if path.suffix.lower() not in FILE_SUFFIXES and os.sep not in spec:
        if path.suffix and path.exists():
            _fail(f"--data {spec}: unknown kind of file {path.suffix}; give a {', '.join(FILE_SUFFIXES)} file")
        return                                          # a data set name: loaded by common.contexts
    from jaxrank.data import DATASETS, dataset_name, read_records

    if path.is_dir():
        _fail(f"--data {spec} is a directory; give a data file ({', '.join(FILE_SUFFIXES)}) or a data set name")
    if path.exists() and not path.is_file():
        _fail(f"--data {spec} is not a regular file (a pipe or device); give a data file")
    if not path.is_file():
        _fail(f"--data {spec}: no such file (and not a data set name: {', '.join(DATASETS)})")
    if path.suffix.lower() not in FILE_SUFFIXES:
        _fail(f"--data {spec}: unknown kind of file {path.suffix or '(no suffix)'}; give a "
              f"{', '.join(FILE_SUFFIXES)} file")
    try:
        ds = read_records(path)
    except (ValueError, OSError) as e:
        _fail(str(e))
    args.data_file, args.data_set, args.data = path, ds, dataset_name(path)
    template = getattr(args, "template", None)
    if template == "poe" and (isinstance(template, common.DefaultName) or not Path("poe").exists()):
        args.template = "zepo"      # (an explicit 'poe' beside a file named poe: template_option calls it ambiguous)
        args.template_builtin = True        # the built-in prompt, never a file named zepo
        if args.judge != DEFAULT_JUDGE:
            print(f"jaxrank: --data {spec}: the 'poe' prompts are written for the built-in data sets; the judge "
                  f"asks ZEPO's generic seed prompt for {args.aspect!r} (--template FILE gives your own: a text "
                  "file with {context}, {a} and {b})", file=sys.stderr)


def data_contexts(args, *, labels: bool = True):
    """The contexts of ``--data`` (:func:`jaxrank.assessment.contexts_of`): a data set name through
    ``common.contexts``; a file's own texts with their human scores (the column named as ``--aspect``,
    else ``score``) or, where the file has none, NaN scores (the report then ranks without agreement)."""
    import dataclasses

    import numpy as np

    resolve_data(args)
    ds = getattr(args, "data_set", None)
    if ds is None:
        return common.contexts(args)
    from jaxrank.assessment.run import contexts_of

    if args.budget is not None and args.budget < 1:
        raise UsageError("jaxrank: --budget must be >= 1")
    text = ("context_id", "context", "candidate_id", "candidate", "reference")
    scores = [c for c in ds.column_names if c not in text]
    column = args.aspect if args.aspect in scores else "score" if "score" in scores else None
    if labels and column is None and scores:
        _fail(f"--data {args.data_file}: no human score column {args.aspect!r} (--aspect); its score columns: "
              f"{', '.join(scores)}: pass --aspect with one of them")
    try:
        cs = contexts_of(ds, aspect=column, contexts=args.contexts, max_candidates=args.candidates)
    except ValueError as e:
        _fail(f"--data {args.data_file}: {common.option_message(e)}")
    if column is None or not any(np.isfinite(x).any() for x in cs.labels):
        cs = dataclasses.replace(cs, labels=[np.full(len(c), np.nan, np.float32) for c in cs.candidates])
        column = None
    args.score_column = column                   # the report's title names the scores it compares with
    if labels:
        print(f"--data {args.data_file}: {len(cs.ids)} context{'s' * (len(cs.ids) != 1)}, "
              f"{sum(map(len, cs.candidates))} candidates, " +
              (f"human scores from column {column!r}" if column else
               "no human scores: the report ranks the candidates with intervals, without agreement figures") +
              f"; data set name {args.data}", file=sys.stderr)
    return cs


def _confidence(text):
    if text.strip().lower() in ("none", "off"):
        return "none"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'none': {text!r}") from None


def _report_methods():
    return tuple(name for name, entry in scorer_table.SCORERS.items() if entry.in_report)


def _active_options(args):
    """Check the --active options before loading data or model; fill in their defaults."""
    given = [f"--{n.replace('_', '-')}" for n in ("active_batch", "rank_confidence", "stop_rule", "score_prior")
             if getattr(args, n) is not None]
    if not args.active:
        if given:
            raise UsageError(f"jaxrank: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to --active only")
        return
    if args.selection is not None:
        raise UsageError(f"jaxrank: --selection {args.selection} cannot be combined with --active, which "
                         "chooses the comparisons itself")
    args.active_batch = 4 if args.active_batch is None else args.active_batch
    if args.active_batch < 1:
        raise UsageError(f"jaxrank: --active-batch must be >= 1, got {args.active_batch}")
    conf = 0.9 if args.rank_confidence is None else args.rank_confidence
    args.rank_confidence = None if conf == "none" else conf
    if args.rank_confidence is not None and not -1 < args.rank_confidence < 1:
        raise UsageError(f"jaxrank: --rank-confidence must lie in (-1, 1) (or be 'none' to run to the budget), "
                         f"got {args.rank_confidence:g}")
    args.stop_rule = args.stop_rule or "spearman"
    args.score_prior = 0.0 if args.score_prior is None else args.score_prior     # active_assess's default
    if not math.isfinite(args.score_prior) or args.score_prior < 0:
        raise UsageError(f"jaxrank: --score-prior must be a finite number >= 0, got {args.score_prior:g}")


def _judge_active(args):
    from jaxrank.assessment.active import active_judge_contexts, check_active
    from jaxrank.assessment.run import prepare_judge

    cs = data_contexts(args)
    settings = dict(budget=args.budget, batch_size=args.active_batch, rank_confidence=args.rank_confidence,
                    stop_rule=args.stop_rule)
    try:
        check_active(cs, **settings)
    except ValueError as e:
        raise SystemExit(f"jaxrank: --active: {e}")
    judge = common.make_judge(args)
    prepare_judge(judge, cs)         # an 'auto' answer prefix: chosen on the data set's first context, as judge does
    store = common.store_path(args, judge)
    t0 = time.perf_counter()
    run = active_judge_contexts(judge, cs, store, seed=args.seed, progress=not args.no_progress,
                                score_prior=args.score_prior, **settings)
    print(f"{int(run.num_comparisons.sum())} comparisons of {len(cs.ids)} context{'s' * (len(cs.ids) != 1)} "
          f"({run.judged} judged now, "
          f"{run.replayed} from the store {store}; {time.perf_counter() - t0:.1f} s)")
    return cs, run.selection, run, judge


def run_diagnose(args):
    """Run ``jaxrank judge --diagnose N``: the judge as it reads the model without an answer prefix, then
    with the prefix it is given (``--answer-prefix``; ``auto``: the one it chooses)."""
    from jaxrank.assessment.diagnose import diagnose_judge

    if args.diagnose < 1:
        raise UsageError(f"jaxrank: --diagnose must be >= 1 pair, got {args.diagnose}")
    common.check_run_options(args)
    cs = data_contexts(args)
    judge = common.make_judge(args)
    if not hasattr(judge, "reading"):
        raise UsageError(f"jaxrank: --diagnose needs an LLM judge; {args.judge} is a similarity judge")
    bare = common.make_judge(args, answer_prefix="none")
    judges = [("without an answer prefix", bare)]
    if str(args.judge).startswith("server:") and judge.template.answer_prefix == bare.template.answer_prefix:
        print(f"(--answer-prefix {args.answer_prefix}: a server judge finds no prefix itself, and this template has "
              "none; give --answer-prefix TEXT, the words the model writes before the label, to compare it)",
              flush=True)
    elif args.answer_prefix != "none":
        judges.append((f"with --answer-prefix {args.answer_prefix}", judge))
    for title, jd in judges:
        try:
            d = diagnose_judge(jd, cs, num_pairs=args.diagnose, seed=args.seed)
        except ValueError as e:
            raise SystemExit(f"jaxrank: --diagnose: {e}")
        print(f"\n# {args.data} {args.aspect}, {title}\n\n{d.markdown()}", flush=True)


def run_judge(args, judge=None, cs=None):
    """Run ``jaxrank judge``: the whole data set, or this process's share of it into its own store shard.

    With a coordinator, every process (one with an empty share too) ends at a barrier, so on return
    every share is judged. ``judge``: an already built judge (default: from the options); ``cs``: the
    contexts, already read and checked (default: from ``--data``).
    """
    import numpy as np

    from jaxrank.assessment.run import judge_contexts
    from jaxrank.distributed import process_share, shard_store_path

    common.check_run_options(args)
    num_processes, process_id, coordinator = common.processes(args)
    if cs is None:
        cs = data_contexts(args)
        common.check_budget_option(args, cs)
    judge = common.make_judge(args) if judge is None else judge
    store = main = common.store_path(args, judge)
    positions = None
    if num_processes > 1:       # into its own shard; what the main store holds already is copied, not judged
        positions = process_share(cs.ids, process_id, num_processes)
        store = shard_store_path(store, process_id, num_processes)
        if not positions:
            print(f"process {process_id} of {num_processes}: no contexts in its share ({len(cs.ids)} contexts)")
            if coordinator:
                from jaxrank.distributed import barrier
                barrier("jaxrank judge: every share judged")
            return cs, None, judge
    t0 = time.perf_counter()
    sel = judge_contexts(judge, cs, store, budget=args.budget, selection=args.selection or "random",
                         seed=args.seed, progress=not args.no_progress, positions=positions,
                         reuse=None if positions is None else main)
    n = int(np.sum(np.asarray(sel.comparisons.weight) > 0))
    share = "" if positions is None else f" (process {process_id} of {num_processes}: {len(positions)} of them)"
    print(f"{n} judgements of {len(sel.contexts)} context{'s' * (len(sel.contexts) != 1)}{share} in {store} "
          f"({time.perf_counter() - t0:.1f} s)")
    if num_processes > 1:
        if coordinator:
            from jaxrank.distributed import barrier
            barrier("jaxrank judge: every share judged")
            print(f"all {num_processes} shares judged", flush=True)
        shards = " ".join(shard_store_path(common.store_path(args, judge), k, num_processes)
                          for k in range(num_processes))
        print(f"merge the shards into one store: jaxrank store merge {common.store_path(args, judge)} {shards}")
    return cs, sel, judge


def _judge_shares_then_merge(args, num_processes, process_id):
    """Judge this process's share (:func:`run_judge`, joined through the coordinator, a barrier at the end);
    process 0 then merges every shard into the store and returns ``(contexts, selection)`` of the whole data
    set, read from it; the others ``(contexts, None)``.
    """
    from jaxrank.assessment.run import judge_contexts
    from jaxrank.assessment.store import merge_stores
    from jaxrank.distributed import shard_store_path

    common.check_run_options(args)
    common.processes(args)                  # join JAX's runtime before any JAX work: the model loads after
    cs = data_contexts(args)
    common.check_budget_option(args, cs)    # before the model loads
    judge = common.make_judge(args)
    cs, _, _ = run_judge(args, judge, cs)      # ends at a barrier: every share is judged when it returns
    if process_id != 0:
        print(f"process {process_id} of {num_processes}: share judged; process 0 merges the shards and reports")
        return cs, None, judge
    store = common.store_path(args, judge)
    shards = [shard_store_path(store, k, num_processes) for k in range(num_processes)]
    shards = [s for s in shards if Path(s).is_file()]     # a process whose share was empty wrote none
    added = merge_stores(store, shards) if shards else 0
    print(f"merged {len(shards)} shard(s) into {store} ({added} judgements added)")
    sel = judge_contexts(judge, cs, store, budget=args.budget, selection=args.selection or "random",
                         seed=args.seed, progress=False)    # every comparison is in the store: nothing judged
    return cs, sel, judge


def _short(x) -> str:
    """A float32 value as the shortest decimal that reads back to it (``1.6666666`` not ``1.6666666269302368``)."""
    import numpy as np

    return np.format_float_positional(np.float32(x), unique=True, trim="-")


def _run_records(args, judge, cs, sel) -> list[dict]:
    """The store's records of this run's judgements: this judge (name, template key, fingerprint), these
    texts (their hashes: a context id judged before with another text is not this run's) and the pairs of
    the selection ``sel`` (a store may hold other pairs of these texts, from another budget)."""
    import numpy as np

    from jaxrank.assessment.run import judge_fingerprint, template_key, text_hashes
    from jaxrank.assessment.store import JudgementStore

    pos = {c: k for k, c in enumerate(cs.ids)}
    hashes = {c: text_hashes(cs.texts[pos[c]], cs.candidates[pos[c]], cs.candidate_ids[pos[c]])
              for c in sel.contexts}
    c = sel.comparisons
    i, j, w = (np.asarray(x) for x in (c.i, c.j, c.weight))
    pairs = {(ctx, sel.candidates[r][a], sel.candidates[r][b])
             for r, ctx in enumerate(sel.contexts) for a, b, x in zip(i[r], j[r], w[r]) if x > 0}
    recs = JudgementStore(common.store_path(args, judge)).records(
        judge=judge.name, template=template_key(judge), fingerprint=judge_fingerprint(judge), hashes=hashes)
    return [r for r in recs if (r["context"], r["a"], r["b"]) in pairs]


def _reading_lines(args, judge, cs, sel) -> list[str]:
    """The report's lines on how the judge read the model: its answer prefix and the label mass of this
    run's judgements (:func:`_run_records`)."""
    from jaxrank.assessment.report import label_mass_lines
    from jaxrank.assessment.run import template_key

    if not hasattr(judge, "reading"):
        return [common.DEFAULT_JUDGE_WHY, ""] if args.judge == DEFAULT_JUDGE else []
    recs = _run_records(args, judge, cs, sel)
    choice = getattr(judge, "answer_prefix_choice", None)
    source = ("given" if choice is None else
              "the word the prompt names the candidates with: no greedy answer of the model named a label"
              if getattr(choice, "from_prompt", False) else "chosen from the model's own answers")
    how = (f"answer prefix {judge.template.answer_prefix!r} ({source})" if judge.template.answer_prefix
           else "no answer prefix")
    note = getattr(judge.reading, "note", None)          # a server judge: log-probabilities or sampled answers
    return [f"**Reading.** Template {template_key(judge)}, {how}; labels read as "
            f"{judge.reading.texts[0]!r} / {judge.reading.texts[1]!r}." + (f" {note}" if note else ""), "",
            *label_mass_lines(recs, threshold=judge.min_label_mass)]


def _truncation_lines(args, judge, cs, sel) -> list[str]:
    """The report's line on texts cut to fit the judge's window (from the ``truncated`` flags of this run's
    judgements, :func:`_run_records`), if any."""
    keep = set(sel.contexts)
    cut = {r["context"] for r in _run_records(args, judge, cs, sel) if r.get("truncated")}
    if not cut:
        return []
    limit = getattr(judge, "max_length", None)
    window = f" ({limit} tokens)" if limit else ""
    return [f"**Truncation.** In {len(cut)} of {len(keep)} contexts a text was longer than the judge's "
            f"window{window} and was cut: the judge read only its beginning.", ""]


def run_assess(args):
    """Run ``jaxrank assess``: the report and scores go to ``--output`` under the name
    :func:`jaxrank.cli._common.report_stem` gives (another name for other options that change the report)."""
    from jaxrank.assessment.report import assess_comparisons
    from jaxrank.assessment.run import stored_labels

    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    methods = tuple(dict.fromkeys(names))                                  # before any judging
    if not methods:
        raise UsageError(f"jaxrank: --methods {args.methods!r} names no scorer; give one or more of "
                         f"{', '.join(scorer_table.SCORERS)}, separated by commas")
    unknown = [m for m in methods if m not in scorer_table.SCORERS]
    if unknown:
        raise UsageError(f"jaxrank: --methods: unknown scorer(s) {', '.join(unknown)}; known: "
                         f"{', '.join(scorer_table.SCORERS)}")
    if len(names) != len(methods):
        raise UsageError(f"jaxrank: --methods names {', '.join(m for m in methods if names.count(m) > 1)} more "
                         "than once")
    _active_options(args)
    common.check_run_options(args)
    resolve_data(args)
    if not str(args.output).strip():
        raise UsageError("jaxrank: --output is empty; give the folder for the report and scores")
    if Path(args.output).exists() and not Path(args.output).is_dir():     # before any judging
        raise UsageError(f"jaxrank: --output {args.output} is a file; assess writes its report and scores into a "
                         "folder: give a folder name")
    num_processes, process_id, coordinator = common.processes(args, join=False)
    if process_id == 0:                                   # the process that reports: before any judging, too
        try:
            Path(args.output).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SystemExit(f"jaxrank: --output {args.output}: cannot create this folder ({e.strerror}); give a "
                             "folder you can write to") from None
    if num_processes > 1 and (args.active or not coordinator):
        raise UsageError("jaxrank: assess with several processes needs --coordinator (each process judges its "
                         "share, then process 0 merges the shards and reports)" +
                         (" and no --active (the active loop chooses comparisons from all contexts at once)"
                          if args.active else "") +
                         "; otherwise run `jaxrank judge --num-processes N --process-id K` on each, "
                         "`jaxrank store merge`, then `jaxrank assess --store MERGED` (it judges nothing stored)")
    run = None
    if args.active:
        cs, sel, run, judge = _judge_active(args)
    elif num_processes > 1:
        cs, sel, judge = _judge_shares_then_merge(args, num_processes, process_id)
        if sel is None:
            return
    else:
        cs, sel, judge = run_judge(args)
    labels = stored_labels(cs, sel)
    pos = {c: k for k, c in enumerate(cs.ids)}
    texts = []                       # copies of one summary get one score (tied, not ordered by float noise)
    for ctx, ids in zip(sel.contexts, sel.candidates):
        text_of = dict(zip(cs.candidate_ids[pos[ctx]], cs.candidates[pos[ctx]]))
        texts.append([text_of.get(cid) for cid in ids])
    try:
        rep = assess_comparisons(sel.comparisons, labels, contexts=sel.contexts, methods=methods,
                                 debias=args.debias, candidates=sel.candidates, dataset=args.data,
                                 aspect=args.aspect, texts=texts)
    except ValueError as e:
        raise SystemExit(f"jaxrank: {e}")
    extra = {}
    if run:
        extra = {"used / all": [f"{run.num_comparisons[r]} / {run.full[r]}" for r in range(len(rep.contexts))],
                 "stopped": [str(run.stopped[r]) for r in range(len(rep.contexts))],
                 "confidence": [f"{run.confidence[r]:.3f}" for r in range(len(rep.contexts))]}
    data = f"{args.data_file.name} ({args.data})" if getattr(args, "data_file", None) else args.data
    scores = getattr(args, "score_column", None) or args.aspect      # a file's human scores: the column read
    title = f"{data} {scores}: judge {args.judge}, {len(sel.contexts)} context{'s' * (len(sel.contexts) != 1)}"
    text = rep.markdown(title, preamble=([run.summary(), ""] if run else []) + _reading_lines(args, judge, cs, sel)
                        + _truncation_lines(args, judge, cs, sel), extra=extra)
    print("\n" + text)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    stem = common.report_stem(args, methods, _report_methods(), active=bool(run))
    (out / f"{stem}.md").write_text(text + "\n")
    with (out / f"{stem}-scores.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["context", "candidate", "human"] + list(methods) +
                   (["comparisons", "stopped", "confidence"] if run else []))
        for r, ctx in enumerate(sel.contexts):
            act = [int(run.num_comparisons[r]), run.stopped[r], float(run.confidence[r])] if run else []
            for n, cid in enumerate(sel.candidates[r]):
                w.writerow([ctx, cid, _short(labels[r, n]) if labels[r, n] == labels[r, n] else ""] + [_short(rep.scores[m][r, n]) for m in methods] + act)
    print(f"\nwrote {out / (stem + '.md')} and {out / (stem + '-scores.csv')}")

