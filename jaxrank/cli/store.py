"""``jaxrank store check|repair|merge|adopt PATH``: damaged lines and keys stored twice in a judgement store,
merging per-process shards, and stamping judgements written before fingerprints."""

from __future__ import annotations

import sys
from pathlib import Path

from jaxrank.cli._common import DefaultName
from jaxrank.cli._errors import UsageError


def add_parser(sub):
    """Add the ``store`` subcommand to the subparsers ``sub``."""
    st = sub.add_parser("store", help="check, repair or merge judgement stores (.jsonl)",
                        description="check: report damaged lines and keys stored twice, change nothing (exit "
                                    "status 1 if any); repair: move them, with their line numbers, to "
                                    "PATH.damaged, keeping the first record of every key.")
    st.add_argument("action", choices=("check", "repair", "merge", "adopt"),
                    help="merge: append to PATH every judgement of the SHARDS it lacks (the per-process "
                         "stores of `jaxrank judge --num-processes`); safe to repeat. adopt: stamp the "
                         "judgements of --judge written before fingerprints (older jaxrank) with that judge's "
                         "fingerprint and the hashes of --data's texts, so runs reuse them; only when you know "
                         "they were made by this checkpoint from these texts")
    st.add_argument("path", help="the judgement store (.jsonl)")
    st.add_argument("shards", nargs="*", help="merge: the stores to merge into PATH")
    st.add_argument("--judge", help="adopt: the judge that made the old judgements (registered name or path)")
    st.add_argument("--data", metavar="NAME|FILE",
                    help="adopt: the data set whose texts they judged: a data set name or a file of your own texts "
                         "(.csv, .jsonl, ... as for jaxrank judge --data)")
    st.add_argument("--template-key", dest="template_key", default=None,
                    help="adopt: only the judgements of this stored template key (default: all of the judge's)")
    # what make_judge reads, as defaults adopt has no option for: DefaultName marks them unwritten, so a file
    # named poe in this folder is no ambiguous --template and no note calls them given to a similarity judge
    st.set_defaults(template=DefaultName("poe"), aspect=None, batch_size=8, soft_prompt=None,
                    answer_prefix=DefaultName("none"), min_label_mass=0.5, strict=False)


def run(args):
    """Run ``jaxrank store``."""
    from jaxrank.assessment.store import check_store, merge_stores, repair_store

    if args.action == "merge":
        given = [f"--{o.replace('_', '-')}" for o in ("judge", "data", "template_key") if getattr(args, o)]
        if given:
            raise UsageError(f"jaxrank: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to store adopt "
                             "only")
        if not args.shards:
            raise UsageError(f"jaxrank: store merge {args.path} needs the shards to merge: jaxrank store merge PATH "
                             "SHARD [SHARD ...]")
        try:
            added = merge_stores(args.path, args.shards)
        except (ValueError, OSError, TimeoutError) as e:
            raise SystemExit(f"jaxrank: store merge: {e}")
        print(f"{args.path}: {added} judgement(s) added from {len(args.shards)} shard(s)")
        return
    if args.shards:
        raise UsageError(f"jaxrank: store {args.action} takes one PATH, not shards")
    given = [f"--{o.replace('_', '-')}" for o in ("judge", "data", "template_key") if getattr(args, o)]
    if given and args.action != "adopt":
        raise UsageError(f"jaxrank: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to store adopt only")
    if Path(args.path).exists() and not Path(args.path).is_file():
        kind = "a folder" if Path(args.path).is_dir() else "not a regular file (a pipe or device)"
        raise UsageError(f"jaxrank: {args.path} is {kind}; a judgement store is a .jsonl file")
    if args.action == "adopt":
        return _adopt(args)
    if not Path(args.path).is_file():
        raise SystemExit(f"jaxrank: {args.path}: no such file")
    try:
        scan = (check_store if args.action == "check" else repair_store)(args.path)
    except (ValueError, OSError, TimeoutError) as e:        # NotAStoreError: a CSV given as the store
        raise SystemExit(f"jaxrank: {e}")
    same = [c for c in scan.conflicts if c.same]
    print(f"{args.path}: {len(scan.records)} valid records, {len(scan.damaged)} damaged line(s), "
          f"{len(scan.different)} key(s) stored again with a different record, {len(same)} identical repeat(s)")
    for d in scan.damaged:
        print(f"  line {d.line}: damaged: {d.reason}")
    for c in scan.conflicts:
        print(f"  line {c.line}: key {tuple(c.key)} already on line {c.first_line} "
              f"({'identical' if c.same else 'different record'})")
    if args.action == "repair":
        moved = len(scan.damaged) + len(scan.conflicts)
        print(f"moved {moved} line(s) to {args.path}.damaged" if moved else "nothing to repair")
    elif scan.damaged or scan.different:
        print(f"run `jaxrank store repair {args.path}` to move them aside (a run opening the store moves "
              f"damaged lines itself, but refuses a key stored with different records)")
        raise SystemExit(1)



def _adopt(args):
    """``jaxrank store adopt PATH --judge J --data D``."""
    if not args.judge or not args.data:
        raise UsageError("jaxrank: store adopt needs --judge (the judge that made the judgements) and --data "
                         "(the data set whose texts they judged)")
    if not Path(args.path).is_file():
        raise SystemExit(f"jaxrank: {args.path}: no such file")
    from jaxrank.assessment.run import contexts_of, judge_fingerprint, text_hashes
    from jaxrank.assessment.store import adopt_store
    from jaxrank.cli._common import make_judge
    from jaxrank.cli.assess import resolve_data
    from jaxrank.data import load_dataset

    # --data NAME or FILE, read as `jaxrank judge` / `assess` read it (a file of one's own texts included);
    # the template is none of adopt's business (the judge's name and fingerprint do not depend on it)
    template, args.template = args.template, None
    resolve_data(args)
    args.template = template
    own = getattr(args, "data_file", None)
    try:
        ds = args.data_set if own is not None else load_dataset(args.data)
        cs = contexts_of(ds)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: --data {own or args.data}: {e}")
    texts = ("context_id", "context", "candidate_id", "candidate", "reference")
    args.aspect = next((c for c in ds.column_names if c not in texts), None)   # any: only the model matters
    if own is not None:                        # the 'poe' prompts are the built-in data sets' only
        args.template, args.aspect = DefaultName("zepo"), args.aspect or "quality"
    judge = make_judge(args)
    hashes = {c: text_hashes(t, cands, ids) for c, t, cands, ids in zip(cs.ids, cs.texts, cs.candidates,
                                                                          cs.candidate_ids)}
    try:
        done = adopt_store(args.path, judge=judge.name, fingerprint=judge_fingerprint(judge), hashes=hashes,
                           template=args.template_key)
    except (ValueError, OSError, TimeoutError) as e:
        raise SystemExit(f"jaxrank: store adopt: {e}")
    if args.template_key is not None and not done.stamped + done.unknown_ids + done.already:
        print(f"{args.path}: no judgement of {judge.name} from before fingerprints has template key "
              f"{args.template_key!r}; nothing stamped", file=sys.stderr)
    print(f"{args.path}: {done.stamped} judgement(s) of {judge.name} stamped with its fingerprint "
          f"{judge_fingerprint(judge)} and the texts of {own or args.data}; {done.unknown_ids} left as they were "
          f"(a context or candidate id not in {own or args.data}); {done.already} already stored stamped")
