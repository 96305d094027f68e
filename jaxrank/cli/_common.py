"""What the subcommands share: the compilation-cache option, the judge, the template, the contexts, the store path.

Nothing here imports JAX at module level: ``jaxrank --help`` and argument errors stay JAX-free.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from jaxrank.cli._errors import UsageError

DEFAULT_JUDGE, DEFAULT_ASPECT = "minilm-l6", "relevance"
"""The embedded default of ``judge``/``assess``, chosen by measurement (docs/getting-started.md, "The main job"): on
SummEval the MiniLM similarity judge agrees with the humans, while no LLM judge that runs here is above
chance on SummEval once it reads the model's answer, nor judges the slice within minutes
(``experiments/results/label_reading.md``)."""

DEFAULT_JUDGE_WHY = ("Judge: the MiniLM similarity judge, the default: read as the model answers, no LLM judge that "
                     "runs here is above chance on SummEval (where the default was chosen), and none judges its "
                     "slice within minutes on 2 cores "
                     "(experiments/results/label_reading.md in the jaxrank repository); --judge smollm2-135m runs "
                     "one.")
"""The line the ``assess`` report gives when it ran the default judge."""


def cache_option(p):
    p.add_argument("--no-compilation-cache", dest="compilation_cache", action="store_false",
                   help="do not keep compiled programs on disk (default: kept in ~/.cache/jaxrank/xla, or "
                        "$JAXRANK_CACHE/xla, so a later run skips XLA compilation; "
                        "JAXRANK_COMPILATION_CACHE=0 also turns it off)")


def enable_cache(args) -> bool:
    """Turn on the persistent compilation cache unless switched off; whether it is on."""
    if args.compilation_cache and os.environ.get("JAXRANK_COMPILATION_CACHE", "1") != "0":
        from jaxrank.compilation import enable_compilation_cache
        try:
            enable_compilation_cache()
        except (OSError, ValueError) as e:   # a cache folder that cannot be made (a file, a URL): run, compiling afresh
            why = f"{e.filename or e}: {e.strerror or 'cannot be used'}" if isinstance(e, OSError) else str(e)
            print(f"note: no compilation cache ({why}); set $JAXRANK_CACHE to a folder you can write to, or pass "
                  "--no-compilation-cache", file=sys.stderr)
            return False
        return True
    return False


_EXIT_FREEZE: list = []


@contextlib.contextmanager
def old_objects_frozen():
    """Run the enclosed block with the objects that exist now (JAX's modules: about a million) out of the garbage
    collector's full passes, and skip the collector's last full pass at interpreter exit.

    Tracing and compiling a program allocates objects fast enough to trigger several full collections, each a
    walk over every object of the imported modules; and at exit Python makes one more full pass before tearing
    the modules down. ``gc.freeze()`` moves the objects that exist into a permanent generation the collector
    does not walk: inside the block (undone after it, ``gc.unfreeze()``), and from an ``atexit`` hook (after
    the command, as the interpreter stops, when nothing is collected any more). Measured on a cold
    ``jaxrank rank`` of 20 rows (issue 33): ~0.2 s of CPU at exit and ~0.1 s while tracing
    (``benchmarks/results/cli_startup.notes.md``). Objects that become garbage are still freed by reference
    counting; only cycles made before the block wait for a collection after it. A process that has frozen objects itself
    is left as it is.
    """
    import atexit
    import gc

    if not _EXIT_FREEZE:
        atexit.register(gc.freeze)     # runs before the interpreter's last full collection
        _EXIT_FREEZE.append(True)
    if gc.get_freeze_count():          # the process froze objects itself (say, before forking): leave it be
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def reading_options(p):
    """``--answer-prefix``, ``--min-label-mass``, ``--strict``: how an LLM judge reads the model's answer."""
    p.add_argument("--answer-prefix", default="auto", metavar="TEXT",
                   help="LLM judges: words placed in the assistant turn before the label (e.g. 'Summary'); "
                        "'auto' (default): the words the model itself writes before the label, found on a few "
                        "pairs of the first context (a template file's own prefix is kept; a server judge keeps the "
                        "template's own prefix, none for the built-in ones: give TEXT); 'none': no prefix")
    p.add_argument("--min-label-mass", type=float, default=0.5, metavar="X",
                   help="LLM judges: warn when the labels hold less than X of the model's answer (default 0.5)")
    p.add_argument("--strict", action="store_true",
                   help="LLM judges: stop instead of warning when the labels hold less than --min-label-mass")


SERVER_DEFAULTS = {"api_key_env": "OPENAI_API_KEY", "max_concurrency": 8, "timeout": 60.0, "max_retries": 5}
"""The defaults of the server options (:func:`server_options`) other than ``--base-url``."""


def server_options(p):
    """``--base-url``, ``--api-key-env``, ``--max-concurrency``: a judge behind an OpenAI-compatible server."""
    p.add_argument("--base-url", default=None, metavar="URL",
                   help="--judge server:MODEL: the OpenAI-compatible API's base URL (vLLM, llama.cpp's server, a "
                        "hosted API), e.g. http://127.0.0.1:8000/v1; p is read from the labels' returned "
                        "log-probabilities (or sampled answers where it gives none); --answer-prefix TEXT sends "
                        "the completions endpoint a raw prompt, else the chat endpoint is used")
    p.add_argument("--api-key-env", default=SERVER_DEFAULTS["api_key_env"], metavar="NAME",
                   help="--judge server:MODEL: the environment variable holding the API key (default "
                        "OPENAI_API_KEY; none sent when unset; never written to a store or report)")
    p.add_argument("--max-concurrency", type=int, default=SERVER_DEFAULTS["max_concurrency"], metavar="N",
                   help="--judge server:MODEL: requests in flight at most (default 8; halved after a timeout)")
    p.add_argument("--timeout", type=float, default=SERVER_DEFAULTS["timeout"], metavar="SECONDS",
                   help="--judge server:MODEL: seconds to wait for one answer, time queued at the server included "
                        "(default 60)")
    p.add_argument("--max-retries", type=int, default=SERVER_DEFAULTS["max_retries"], metavar="N",
                   help="--judge server:MODEL: times a failed request is sent again, with backoff (default 5)")


def server_settings(args) -> dict:
    """The transport keywords of a server judge or paraphraser from ``--api-key-env``, ``--max-concurrency``,
    ``--timeout`` and ``--max-retries``, checked."""
    if args.max_concurrency < 1:
        raise UsageError(f"jaxrank: --max-concurrency must be at least 1 (requests in flight), got {args.max_concurrency}")
    if not args.timeout > 0:
        raise UsageError(f"jaxrank: --timeout must be > 0 seconds, got {args.timeout}")
    if args.max_retries < 0:
        raise UsageError(f"jaxrank: --max-retries must be >= 0, got {args.max_retries}")
    return dict(api_key_env=args.api_key_env, max_concurrency=args.max_concurrency, timeout=args.timeout,
                max_retries=args.max_retries)


def check_run_options(args) -> None:
    """``judge``/``assess``: the options checked before any data or model is read (once per ``args``):
    ``--seed`` in ``[0, 2**32)`` (the PRNG takes 32 bits: a larger seed would plan a smaller one's pairs), and
    the server options' values (:func:`server_settings`) whatever the judge, with a note on stderr when they
    are given with a local judge, which does not use them."""
    if getattr(args, "run_options_checked", False):
        return
    if getattr(args, "seed", None) is not None and not 0 <= args.seed < 2 ** 32:
        raise UsageError(f"jaxrank: --seed must lie in [0, 2**32) (a 32-bit PRNG seed), got {args.seed}")
    if hasattr(args, "max_concurrency"):
        server_settings(args)
        given = [f"--{n.replace('_', '-')}" for n, default in SERVER_DEFAULTS.items() if getattr(args, n) != default]
        if given and not str(args.judge).startswith("server:"):
            print(f"note: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to a judge behind a server "
                  f"(--judge server:MODEL); --judge {args.judge} is a local model and does not use "
                  f"{'it' if len(given) == 1 else 'them'}", file=sys.stderr)
    args.run_options_checked = True


def check_budget_option(args, cs) -> None:
    """``--budget`` (with ``--selection``) against every context's candidates, before any model loads:
    a one-line usage error naming the option when a context's comparisons cannot be planned
    (:func:`jaxrank.assessment.run.check_budget`)."""
    from jaxrank.assessment.run import check_budget

    if args.budget is None:
        return
    selection = args.selection or "random"
    for ctx, cands in zip(cs.ids, cs.candidates):
        why = check_budget(len(cands), args.budget, selection)
        if why:
            why = why.replace(f"budget {args.budget}", f"--budget {args.budget}", 1)
            raise UsageError(f"jaxrank: context {ctx} (--selection {selection}): {why}")


def option_message(error) -> str:
    """An error of :func:`jaxrank.assessment.run.contexts_of` in the words of the command line: its
    ``contexts`` argument is ``--contexts``."""
    text = str(error)
    return "--" + text if text.startswith("contexts ") else text


REPORT_DEFAULTS = {"contexts": ":", "candidates": None, "budget": None, "selection": None, "seed": 0,
                   "template": "poe", "soft_prompt": None, "weights": "float", "answer_prefix": "auto",
                   "min_label_mass": 0.5, "strict": False, "debias": "none", "active_batch": 4,
                   "rank_confidence": 0.9, "stop_rule": "spearman", "score_prior": 0.0}
"""The ``assess`` options that change its report (beyond ``--data``, ``--aspect``, ``--judge`` and
``--active``, which its file name spells out), with their defaults (the ``--active`` ones as filled in)."""


def report_stem(args, methods, default_methods, *, active: bool) -> str:
    """The file name (without suffix) of ``assess``'s report and scores: ``assess-DATA-ASPECT-JUDGE``
    (``-active``), and, where any option that changes the report (:data:`REPORT_DEFAULTS`, ``--methods``)
    differs from its default, a short hash of those options, so two runs that differ in them do not
    overwrite each other's files (the default run keeps the plain name).

    ``JUDGE`` is the last part of a path: a judge that is a file or folder (a checkpoint, a ``.gguf``) puts its
    full resolved path in the hash (``runs/exp1/checkpoint-500`` and ``runs/exp2/checkpoint-500`` are two
    judges), a judge behind a server its ``--base-url``. ``--store`` is not in it: the store keeps a judge's
    judgements under its fingerprint, so the same judge on the same texts gives the same report from any store.
    """
    import hashlib
    import json

    stem = f"assess-{args.data}-{args.aspect}-{Path(str(args.judge)).name}" + ("-active" if active else "")
    chosen = {}
    if Path(str(args.judge)).exists():               # a local checkpoint: two folders of one name are two judges
        chosen["judge_path"] = str(Path(str(args.judge)).resolve())
    if str(args.judge).startswith("server:") and getattr(args, "base_url", None):
        chosen["base_url"] = str(args.base_url)
    for name, default in REPORT_DEFAULTS.items():
        value = getattr(args, name, default)
        if name == "template" and (isinstance(value, DefaultName) or getattr(args, "template_builtin", False)):
            continue                                  # the default prompt (for a data file: its generic seed)
        if value != default and (active or name not in ("active_batch", "rank_confidence", "stop_rule",
                                                        "score_prior")):
            chosen[name] = str(value)
    if tuple(methods) != tuple(default_methods):
        chosen["methods"] = ",".join(methods)
    if not chosen:
        return stem
    return f"{stem}-{hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:8]}"


def server_judge(args, *, answer_prefix=None):
    """The judge of ``--judge server:MODEL`` (:class:`~jaxrank.judges.server.ServerJudge`) with ``--base-url``,
    ``--api-key-env``, ``--max-concurrency``, ``--template``, ``--answer-prefix`` (``auto``: the template's
    own, else none), ``--min-label-mass`` and ``--strict``."""
    from jaxrank.judges.server import ServerJudge   # httpx: only for a server judge

    if not getattr(args, "base_url", None):
        raise UsageError("jaxrank: --judge server:MODEL needs --base-url URL (the OpenAI-compatible API, e.g. "
                         "http://127.0.0.1:8000/v1)")
    if getattr(args, "soft_prompt", None):
        raise UsageError("jaxrank: --soft-prompt reads a local model; not a server judge")
    settings = server_settings(args)
    try:
        template = template_option(args)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: {e}")
    prefix = answer_prefix or getattr(args, "answer_prefix", "none")
    prefix = "" if prefix == "none" else None if prefix == "auto" else prefix
    try:
        return ServerJudge(args.base_url, args.judge.split(":", 1)[1], template, answer_prefix=prefix,
                           **settings,
                           min_label_mass=getattr(args, "min_label_mass", 0.5), strict=getattr(args, "strict", False))
    except ValueError as e:
        raise UsageError(f"jaxrank: --judge {args.judge}: {e}")


def make_judge(args, *, answer_prefix=None):
    """The judge of ``--judge`` (with ``--template`` and, for an LLM judge, ``--soft-prompt``,
    ``--answer-prefix`` (or ``answer_prefix``), ``--min-label-mass`` and ``--strict``)."""
    if not str(args.judge).strip():
        raise UsageError("jaxrank: --judge is empty; give a registered name (minilm-l6, smollm2-135m, ...), a "
                         "checkpoint folder, a .gguf file or server:MODEL")
    if str(args.judge).startswith("server:"):
        return server_judge(args, answer_prefix=answer_prefix)
    if getattr(args, "base_url", None):
        raise UsageError(f"jaxrank: --base-url is for a judge behind a server, but --judge {args.judge} is a local "
                         "model; write --judge server:MODEL (MODEL: the served model's name)")
    from jaxrank.models.loading import load_model
    from jaxrank.judges.pairwise import PromptJudge

    try:
        template = template_option(args)
        soft = None
        if getattr(args, "soft_prompt", None):
            from jaxrank.judges.soft_prompt import SoftPrompt   # optax and safetensors: only when asked for
            soft = SoftPrompt.load(args.soft_prompt)
        lm = load_model(args.judge, weights=getattr(args, "weights", "float"))
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: {e}")
    if lm.architecture == "bert":
        own_file = getattr(args, "data_file", None) is not None and args.template == "zepo"   # set for a file
        ignored = [o for o, on in (("--template", args.template != "poe" and not own_file),
                                    ("--answer-prefix", getattr(args, "answer_prefix", "auto") != "auto"
                                     and not isinstance(args.answer_prefix, DefaultName)),
                                    ("--strict", getattr(args, "strict", False)),
                                    ("--min-label-mass", getattr(args, "min_label_mass", 0.5) != 0.5)) if on]
        if ignored:
            print(f"note: {', '.join(ignored)} appl{'ies' if len(ignored) == 1 else 'y'} to LLM judges; the "
                  f"similarity judge {lm.name} reads no prompt", file=sys.stderr)
        if soft is not None:
            raise UsageError("jaxrank: --soft-prompt needs an LLM judge (a Llama-family model), not an encoder")
        from jaxrank.judges.similarity import SimilarityJudge
        return SimilarityJudge(lm, batch_size=8 if args.batch_size == "auto" else args.batch_size)
    prefix = answer_prefix or getattr(args, "answer_prefix", "none")
    if prefix == "none":
        prefix = ""
    elif prefix == "auto" and template.answer_prefix:
        prefix = None                    # a template file's own prefix is kept
    try:
        return PromptJudge(lm, template, batch_size=args.batch_size, soft_prompt=soft, answer_prefix=prefix,
                           min_label_mass=getattr(args, "min_label_mass", 0.5), strict=getattr(args, "strict", False))
    except ValueError as e:
        raise SystemExit(f"jaxrank: {'--soft-prompt: ' if soft is not None else ''}{e}")


def batch_size_arg(text: str):
    """``--batch-size``: ``auto`` or an integer (its range is checked before a model is loaded)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer, got {text!r}") from None


class DefaultName(str):
    """A built-in template name as an option's default (``default=DefaultName("poe")``): the user did not
    write it, so a file of that name in the current folder does not make it ambiguous."""


def template_option(args):
    """The template of ``--template``: a built-in style, or a file (``jaxrank zepo`` writes one).

    A bare built-in name (``poe``, ``zepo``) written on the command line that is also a file or folder
    in the current folder is ambiguous: a usage error asks for ``./NAME`` (a path with a folder
    separator or a suffix is always a file). An option's default (:class:`DefaultName`) is the built-in.
    """
    from jaxrank.judges.prompts import pairwise_template

    if args.template in ("poe", "zepo") and Path(args.template).exists() and \
            not isinstance(args.template, DefaultName) and not getattr(args, "template_builtin", False):
        raise UsageError(f"jaxrank: --template {args.template} is ambiguous: the built-in {args.template!r} prompt "
                         f"or the file {args.template} in this folder; write --template ./{args.template} for the "
                         f"file (or rename it)")
    if args.template in ("poe", "zepo"):
        return pairwise_template(args.data, args.aspect, style=args.template)
    from jaxrank.assessment.zepo import load_template

    if Path(args.template).is_dir():
        raise ValueError(f"--template {args.template} is a folder; give a template file (.json from jaxrank zepo, "
                         "or a text file with {context}, {a} and {b})")
    if not Path(args.template).is_file():
        raise ValueError(f"--template must be 'poe', 'zepo' or a template file; no file {args.template!r}")
    return load_template(args.template)


def contexts(args):
    from jaxrank.data import load_dataset
    from jaxrank.assessment.run import contexts_of

    if args.data == "summeval" and args.judge == DEFAULT_JUDGE and args.aspect == DEFAULT_ASPECT and \
            args.contexts == ":" and args.candidates is None and args.budget is None:
        print("embedded default: SummEval relevance, all 100 articles x 16 summaries, all 240 ordered comparisons "
              "each, MiniLM-L6 similarity judge (the most informative judge that runs here in minutes; "
              "--judge smollm2-135m for the LLM judge)", file=sys.stderr)
    try:
        ds = load_dataset(args.data)
        cs = contexts_of(ds, aspect=args.aspect, contexts=args.contexts, max_candidates=args.candidates)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"jaxrank: {option_message(e)}")
    if args.budget is not None and args.budget < 1:
        raise UsageError("jaxrank: --budget must be >= 1")
    return cs


def store_path(args, judge):
    return args.store or f"results/judgements/{args.data}-{args.aspect}-{judge.name}.jsonl"


def process_options(p):
    """``--num-processes``, ``--process-id``, ``--coordinator``, ``--join-timeout``, ``--heartbeat-timeout``."""
    p.add_argument("--num-processes", type=int, default=None, metavar="N",
                   help="split the contexts over N processes (hosts), each judging its share into its own store "
                        "shard STORE.process-K-of-N.jsonl (default $JAX_NUM_PROCESSES, else 1)")
    p.add_argument("--process-id", type=int, default=None, metavar="K",
                   help="this process, 0..N-1 (default $JAX_PROCESS_ID, else 0)")
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="join JAX's multi-process runtime at HOST:PORT (process 0's host) so that a process "
                        "that never joins is an error on the others, and wait for every share at the end "
                        "(default $JAX_COORDINATOR_ADDRESS; none: the processes run independently)")
    p.add_argument("--join-timeout", type=int, default=300, metavar="SECONDS",
                   help="with --coordinator: seconds to wait for every process to join (default 300)")
    p.add_argument("--heartbeat-timeout", type=int, default=100, metavar="SECONDS",
                   help="with --coordinator: seconds after which a process that died is an error on the others "
                        "(JAX ends them naming it; default 100)")


_JOINED: list[str] = []
"""The coordinator this process joined (JAX's runtime is joined once per process, before any JAX work)."""


def processes(args, *, join: bool = True):
    """``(num_processes, process_id, coordinator)`` of the options or JAX's environment variables.

    With a coordinator and ``join``, joins JAX's runtime (:func:`jaxrank.distributed.initialize`).
    """
    def env_int(name, option):
        text = os.environ.get(name)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"jaxrank: ${name}={text!r} is not an integer (it stands for {option})") from None

    n = args.num_processes if args.num_processes is not None else env_int("JAX_NUM_PROCESSES", "--num-processes")
    k = args.process_id if args.process_id is not None else env_int("JAX_PROCESS_ID", "--process-id")
    n = 1 if n is None else n
    k = 0 if k is None else k
    coordinator = args.coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if n < 1:
        raise UsageError(f"jaxrank: --num-processes must be >= 1, got {n}")
    if not 0 <= k < n:
        raise UsageError(f"jaxrank: --process-id must lie in 0..{n - 1} (--num-processes {n}), got {k}")
    for option in ("join_timeout", "heartbeat_timeout"):
        if getattr(args, option) < 1:
            raise UsageError(f"jaxrank: --{option.replace('_', '-')} must be >= 1 second, got {getattr(args, option)}")
    if coordinator:
        host, sep, port = str(coordinator).rpartition(":")
        if not sep or not host.strip() or not port.isdigit() or not 0 < int(port) < 65536 or " " in host:
            raise UsageError(f"jaxrank: --coordinator {coordinator!r}: give HOST:PORT (e.g. 10.0.0.1:1234), the "
                             "address of process 0")
        if n == 1 and args.coordinator:
            raise UsageError("jaxrank: --coordinator applies with --num-processes > 1 (it is the address the "
                             "processes join); one process runs alone without it")
    if coordinator and n > 1 and join and not _JOINED:
        from jaxrank.distributed import initialize
        print(f"process {k} of {n}: joining {coordinator} (waiting up to {args.join_timeout} s)", file=sys.stderr,
              flush=True)
        initialize(coordinator, n, k, initialization_timeout=args.join_timeout,
                   heartbeat_timeout_seconds=args.heartbeat_timeout)
        _JOINED.append(coordinator)
    return n, k, coordinator if n > 1 else None
