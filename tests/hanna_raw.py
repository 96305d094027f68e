"""The HANNA release files read with ``csv`` and ``json`` only: an independent reading for the tests."""

import csv
import json
from pathlib import Path


def read_hanna_raw(folder: Path):
    """``(rows, stories)``: the LLM-score CSV by ``Model`` (cells as text) and ``hanna.jsonl`` rows by prompt."""
    csv.field_size_limit(1 << 30)
    with open(folder / "hanna" / "hanna_metric_scores_llm.csv", newline="", encoding="utf-8") as f:
        rows = {r["Model"]: r for r in csv.DictReader(f)}
    stories = {}
    with open(folder / "hanna" / "hanna.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            stories.setdefault(rec["prompt_id"], []).append(rec)
    return rows, stories
