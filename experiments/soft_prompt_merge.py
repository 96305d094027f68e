"""Merge the soft prompt study's runs (seed + soft lr 1e-2, soft lr 2e-3, ZEPO template) into results/merged/,
keeping the contexts every variant has; then: soft_prompt.py --summarise-only --out experiments/results/merged.

Rows are merged only when they were made alike: every row of a merged variant has one key (the settings that
made it: model, judge, template key, answer prefix, soft-prompt settings; ``soft_prompt.row_key``), and every
row the same held-out pairs of the same model. Otherwise the merge stops with an error naming the file and the
fields that differ. Rows from before rows carried their settings are read as the old reading (all the runs
merged here are).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soft_prompt import check_rows  # noqa: E402  (a script beside this one)

R = Path(__file__).resolve().parent / "results"
TAG = "soft_prompt_summeval_coherence_smollm2-135m_judgements.jsonl"
SOURCES = [(R / TAG, {"seed": "seed", "soft": "soft (lr 1e-2)"}),
           (R / "soft_lr2e-3" / TAG, {"soft": "soft (lr 2e-3)"}),
           (R / "zepo_eval" / TAG, {"zepo": "zepo"})]


def merge(sources, out_file: Path):
    """Write the rows of ``sources`` (``(store, {variant: merged name})``) on the contexts every merged variant
    has to ``out_file``; returns ``(variants, contexts, rows)``.

    Raises:
        ValueError: rows of one merged variant made with different settings, or rows of other held-out pairs
            or another model (the message names the file and the fields).
    """
    recs, where = [], []
    for path, names in sources:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    if r["variant"] in names:
                        recs.append(dict(r, variant=names[r["variant"]]))
                        where.append(path)
    if not recs:
        raise ValueError(f"sources: no rows of the named variants in {', '.join(str(p) for p, _ in sources)}")
    check_rows(recs, where)
    variants = list(dict.fromkeys(r["variant"] for r in recs))
    common = set.intersection(*[{r["context"] for r in recs if r["variant"] == v} for v in variants])
    recs = [r for r in recs if r["context"] in common]
    out_file.parent.mkdir(exist_ok=True)
    out_file.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return variants, sorted(common), len(recs)


if __name__ == "__main__":
    try:
        print(*merge(SOURCES, R / "merged" / TAG))
    except ValueError as e:
        sys.exit(str(e))
