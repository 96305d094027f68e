"""``jaxrank store check|repair PATH``: damaged lines and keys stored twice in a judgement store."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub):
    """Add the ``store`` subcommand to the subparsers ``sub``."""
    st = sub.add_parser("store", help="check, repair or merge judgement stores (.jsonl)",
                        description="check: report damaged lines and keys stored twice, change nothing (exit "
                                    "status 1 if any); repair: move them, with their line numbers, to "
                                    "PATH.damaged, keeping the first record of every key.")
    st.add_argument("action", choices=("check", "repair", "merge"),
                    help="merge: append to PATH every judgement of the SHARDS it lacks (the per-process "
                         "stores of `jaxrank judge --num-processes`); safe to repeat")
    st.add_argument("path", help="the judgement store (.jsonl)")
    st.add_argument("shards", nargs="*", help="merge: the stores to merge into PATH")


def run(args):
    """Run ``jaxrank store``."""
    from jaxrank.assessment.store import check_store, merge_stores, repair_store

    if args.action == "merge":
        try:
            added = merge_stores(args.path, args.shards)
        except (ValueError, OSError, TimeoutError) as e:
            raise SystemExit(f"jaxrank: store merge: {e}")
        print(f"{args.path}: {added} judgement(s) added from {len(args.shards)} shard(s)")
        return
    if args.shards:
        raise SystemExit(f"jaxrank: store {args.action} takes one PATH, not shards")
    if not Path(args.path).is_file():
        raise SystemExit(f"jaxrank: {args.path}: no such file")
    try:
        scan = (check_store if args.action == "check" else repair_store)(args.path)
    except (OSError, TimeoutError) as e:
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

