"""An append-only, crash-safe store of judgements (one JSON object per line).

Every judgement is written as soon as it exists, keyed by
``(judge, template, context, a, b)`` (``a``/``b``: the candidate ids in
positions A and B, so the two orders are two keys). A run that is killed loses
at most the line being written: on opening, a torn last line (no newline, or
not valid JSON) is cut off, and a resumed run asks only for the keys that are
missing. Lines are flushed and ``fsync``-ed per batch.

    >>> store = JudgementStore("runs/summeval-coherence.jsonl")
    >>> todo = [k for k in keys if k not in store]
    >>> store.append([...records...])
    >>> table = store.comparisons(judge="smollm2-135m")

One writer per file at a time (a second process appending concurrently could
interleave lines; that is not supported).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from jaxrank.comparisons import Comparisons, stack_contexts

__all__ = ["JudgementStore", "Key", "StoredComparisons"]

_FIELDS = ("judge", "template", "context", "a", "b")


class Key(NamedTuple):
    """The identity of one judgement."""

    judge: str
    template: str
    context: str
    a: str
    b: str


class StoredComparisons(NamedTuple):
    """What :meth:`JudgementStore.comparisons` returns.

    Attributes:
        comparisons: a padded :class:`~jaxrank.Comparisons` batch ``[C, R]``.
        contexts: context id of each row.
        candidates: per row, the candidate id of each item index.
    """

    comparisons: object
    contexts: list[str]
    candidates: list[list[str]]


class JudgementStore:
    """Append-only JSONL store of judgements; see the module docstring.

    Args:
        path: the ``.jsonl`` file (created with its folder if absent).

    Raises:
        ValueError: a line other than a torn last line is not a valid record
            (names the file and line).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[Key, dict] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        complete = lines[:-1]            # the last element is b"" when the file ends with "\n"
        torn = lines[-1]
        good_end = len(data) - len(torn)
        for n, raw in enumerate(complete, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                key = Key(*(str(rec[f]) for f in _FIELDS))
                p = float(rec["p"])
            except (ValueError, KeyError, TypeError) as e:
                if n == len(complete) and not torn:
                    # A crash can leave the last line incomplete even with its newline
                    # missing; treat an unparsable final line as torn as well.
                    good_end -= len(raw) + 1
                    break
                raise ValueError(f"{self.path}, line {n}: not a judgement record ({e})") from e
            if not math.isfinite(p) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{self.path}, line {n}: field p={p!r} must be a probability in [0, 1]")
            self._records[key] = rec
        if good_end < len(data):
            with open(self.path, "r+b") as f:      # cut the torn tail so appends start clean
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key) -> bool:
        return Key(*key) in self._records

    def get(self, key) -> dict | None:
        """The record stored under ``key``, or ``None``."""
        return self._records.get(Key(*key))

    def missing(self, keys: Iterable) -> list[Key]:
        """The keys of ``keys`` not yet in the store, in order."""
        return [Key(*k) for k in keys if Key(*k) not in self._records]

    def append(self, records: Sequence[Mapping]) -> None:
        """Write records (each with the key fields and ``p``) and make them durable.

        Records whose key is already stored are skipped.
        """
        lines = []
        for rec in records:
            key = Key(*(str(rec[f]) for f in _FIELDS))
            p = float(rec["p"])
            if not math.isfinite(p) or not 0.0 <= p <= 1.0:
                raise ValueError(f"record {dict(rec)!r}: p must be a probability in [0, 1]")
            if key in self._records:
                continue
            clean = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in rec.items()}
            self._records[key] = clean
            lines.append(json.dumps(clean, ensure_ascii=False) + "\n")
        if not lines:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())

    def records(self, *, judge: str | None = None, template: str | None = None) -> list[dict]:
        """Stored records, optionally only those of one judge and/or template."""
        return [r for k, r in self._records.items()
                if (judge is None or k.judge == judge) and (template is None or k.template == template)]

    def comparisons(self, *, judge: str | None = None, template: str | None = None,
                    candidates: Mapping[str, Sequence[str]] | None = None) -> StoredComparisons:
        """The stored judgements as a padded :class:`~jaxrank.Comparisons` batch, one row per context.

        Args:
            judge, template: select one judge / template (required when the
                store holds several: mixing them in one set is refused).
            candidates: per context id, the candidate ids in item order (e.g. all
                candidates of the data set, so items never judged are kept); by
                default the candidates that appear, in order of first appearance.

        Raises:
            ValueError: no matching records, or several judges/templates mixed.
        """
        recs = self.records(judge=judge, template=template)
        if not recs:
            raise ValueError(f"{self.path}: no judgements for judge={judge!r}, template={template!r}")
        for field, chosen in (("judge", judge), ("template", template)):
            seen = {r[field] for r in recs}
            if chosen is None and len(seen) > 1:
                raise ValueError(f"{self.path} holds several {field}s ({', '.join(sorted(seen))}); choose one "
                                 f"with {field}=")
        by_ctx: dict[str, list[dict]] = {}
        for r in recs:
            by_ctx.setdefault(str(r["context"]), []).append(r)
        ctxs, cands, sets = [], [], []
        for ctx, rs in by_ctx.items():
            if candidates is not None and ctx in candidates:
                ids = [str(x) for x in candidates[ctx]]
            else:
                ids = list(dict.fromkeys(x for r in rs for x in (str(r["a"]), str(r["b"]))))
            index = {c: n for n, c in enumerate(ids)}
            unknown = {x for r in rs for x in (str(r["a"]), str(r["b"]))} - set(index)
            if unknown:
                raise ValueError(f"context {ctx}: candidates {sorted(unknown)} are not in the given candidate list")
            i = np.array([index[str(r["a"])] for r in rs], np.int32)
            j = np.array([index[str(r["b"])] for r in rs], np.int32)
            p = np.array([float(r["p"]) for r in rs], np.float32)
            ctxs.append(ctx)
            cands.append(ids)
            sets.append(Comparisons.from_pairs(i, j, p, num_items=len(ids)))
        return StoredComparisons(stack_contexts(sets), ctxs, cands)
