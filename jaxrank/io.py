"""Reading comparison files (CSV or JSON Lines) into :class:`jaxrank.Comparisons`.

A file has one comparison per row, with columns for the item in position A,
the item in position B, and either a probability ``P(A better)`` or a hard
outcome (``win``/``loss``/``tie``, or 1/0/0.5, or two score columns such as
goals, compared), plus optional context and weight columns. Items are names
(any string); they are numbered per context in order of first appearance.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxrank.comparisons import Comparisons, stack_contexts

__all__ = ["ComparisonTable", "read_comparisons"]

_DEFAULTS = {
    "item_a": ("item_a", "a", "model_a", "i", "candidate_a"),
    "item_b": ("item_b", "b", "model_b", "j", "candidate_b"),
    "p": ("p", "prob", "probability", "p_a"),
    "outcome": ("outcome", "winner", "result", "decision"),
    "context": ("context", "context_id"),
    "weight": ("weight", "w"),
}
_OUTCOMES = {"win": 1.0, "a": 1.0, "model_a": 1.0, "1": 1.0, "1.0": 1.0,
             "loss": 0.0, "b": 0.0, "model_b": 0.0, "0": 0.0, "0.0": 0.0,
             "tie": 0.5, "draw": 0.5, "0.5": 0.5}


@dataclass
class ComparisonTable:
    """Comparisons read from a file: one padded batch plus the names behind the indices.

    Attributes:
        comparisons: batch ``[num_contexts, R]`` over ``[num_contexts, N]`` items.
        contexts: context names, in order of first appearance.
        items: per context, the item names; index ``n`` is item ``n``.
    """

    comparisons: Comparisons
    contexts: list[str]
    items: list[list[str]]


def _rows(path: Path):
    """Yield ``(line_number, dict)`` for a CSV or JSON Lines file."""
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        with path.open(encoding="utf-8") as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}, line {ln}: not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}, line {ln}: expected a JSON object per line")
                yield ln, row
    else:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames:
                raise ValueError(f"{path}: empty file (no header row)")
            for row in reader:
                if None in row:
                    raise ValueError(f"{path}, line {reader.line_num}: more fields than the header has")
                yield reader.line_num, row


def _pick(columns, given, role, required):
    if given is not None:
        if given not in columns:
            raise ValueError(f"column {given!r} (for {role}) is not in the file; columns: {sorted(columns)}")
        return given
    for name in _DEFAULTS[role]:
        if name in columns:
            return name
    if required:
        raise ValueError(f"no column for {role}: pass it explicitly (tried {_DEFAULTS[role]}); "
                         f"columns: {sorted(columns)}")
    return None


def _number(path, ln, field, value):
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{path}, line {ln}: field {field!r} = {value!r} is not a number") from None
    if not np.isfinite(x):
        raise ValueError(f"{path}, line {ln}: field {field!r} = {value!r} is not finite")
    return x


def read_comparisons(path, *, item_a=None, item_b=None, p=None, outcome=None, score_a=None,
                     score_b=None, context=None, weight=None) -> ComparisonTable:
    """Read a CSV/JSONL file of comparisons.

    Args:
        path: the file (``.csv``, or ``.jsonl``/``.json``/``.ndjson`` for JSON Lines).
        item_a, item_b: columns naming the items in positions A and B
            (default: the first of ``item_a, a, model_a, i`` that exists, likewise for B).
        p: probability column (default ``p``/``prob``/``probability``).
        outcome: hard-outcome column (``win``/``loss``/``tie``, ``a``/``b``, or 1/0/0.5).
        score_a, score_b: two numeric columns compared to give the outcome
            (e.g. goals: higher wins, equal is a tie).
        context: optional context column (one ranking per context).
        weight: optional non-negative weight column.

    Raises:
        ValueError: naming the file, line and field of the first malformed value.
        FileNotFoundError: if ``path`` does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"comparison file not found: {path}")
    rows = iter(_rows(path))
    try:
        ln0, first = next(rows)
    except StopIteration:
        raise ValueError(f"{path}: no comparisons in file") from None
    cols = set(first)
    ca = _pick(cols, item_a, "item_a", True)
    cb = _pick(cols, item_b, "item_b", True)
    if (score_a is None) != (score_b is None):
        raise ValueError("score_a and score_b go together")
    if score_a is not None:
        for s in (score_a, score_b):
            if s not in cols:
                raise ValueError(f"column {s!r} is not in the file; columns: {sorted(cols)}")
        cp = co = None
    else:
        cp = _pick(cols, p, "p", False) if outcome is None else None
        co = _pick(cols, outcome, "outcome", False) if cp is None else None
        if cp is None and co is None:
            raise ValueError(f"{path}: no probability or outcome column; pass p=, outcome= or score_a=/score_b=")
    cc = _pick(cols, context, "context", False)
    cw = _pick(cols, weight, "weight", False)

    per_ctx: dict[str, dict] = {}
    import itertools
    for ln, row in itertools.chain([(ln0, first)], rows):
        name_a, name_b = row.get(ca), row.get(cb)
        for field, v in ((ca, name_a), (cb, name_b)):
            if v is None or str(v).strip() == "":
                raise ValueError(f"{path}, line {ln}: field {field!r} is empty")
        name_a, name_b = str(name_a), str(name_b)
        if name_a == name_b:
            raise ValueError(f"{path}, line {ln}: item {name_a!r} is compared with itself")
        if score_a is not None:
            xa, xb = _number(path, ln, score_a, row.get(score_a)), _number(path, ln, score_b, row.get(score_b))
            prob = 1.0 if xa > xb else (0.0 if xa < xb else 0.5)
        elif cp is not None:
            prob = _number(path, ln, cp, row.get(cp))
            if not 0.0 <= prob <= 1.0:
                raise ValueError(f"{path}, line {ln}: field {cp!r} = {row.get(cp)!r} is outside [0, 1]")
        else:
            key = str(row.get(co)).strip().lower()
            if key not in _OUTCOMES:
                raise ValueError(f"{path}, line {ln}: field {co!r} = {row.get(co)!r}; expected win/loss/tie, a/b or 1/0/0.5")
            prob = _OUTCOMES[key]
        w = 1.0
        if cw is not None:
            w = _number(path, ln, cw, row.get(cw))
            if w < 0:
                raise ValueError(f"{path}, line {ln}: field {cw!r} = {row.get(cw)!r} is negative")
        ctx = str(row.get(cc)) if cc is not None else ""
        d = per_ctx.setdefault(ctx, {"items": {}, "i": [], "j": [], "p": [], "w": []})
        idx = d["items"]
        d["i"].append(idx.setdefault(name_a, len(idx)))
        d["j"].append(idx.setdefault(name_b, len(idx)))
        d["p"].append(prob)
        d["w"].append(w)

    sets = [Comparisons.from_pairs(np.array(d["i"]), np.array(d["j"]), np.array(d["p"], np.float32),
                                   num_items=len(d["items"]), weight=np.array(d["w"], np.float32))
            for d in per_ctx.values()]
    return ComparisonTable(stack_contexts(sets), list(per_ctx), [list(d["items"]) for d in per_ctx.values()])
