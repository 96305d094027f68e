"""``jaxrank store check|repair PATH``: damaged lines and keys stored twice in a judgement store."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub):
    """Add the ``store`` subcommand to the subparsers ``sub``."""
    st = sub.add_parser("store", help="check or repair a judgement store (.jsonl)",
                        description="check: report damaged lines and keys stored twice, change nothing (exit "
                                    "status 1 if any); repair: move them, with their line numbers, to "
                                    "PATH.damaged, keeping the first record of every key.")
    st.add_argument("action", choices=("check", "repair"))
    st.add_argument("path", help="the judgement store (.jsonl)")


def run(args):
    """Run ``jaxrank store``."""
    from jaxrank.assessment.store import check_store, repair_store

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

