"""Contexts of a data set with their candidates, as the judges need them (:class:`ContextSet`, :func:`contexts_of`)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

__all__ = ["ContextSet", "contexts_of"]


@dataclasses.dataclass(frozen=True)
class ContextSet:
    """Contexts with their candidates (and optional human scores), as the judges need them.

    Attributes:
        ids: context ids.
        texts: context texts.
        candidate_ids: per context, candidate ids.
        candidates: per context, candidate texts.
        labels: per context, ``[N]`` human scores of one aspect (or ``None``).
        prefix_sample: ``(context text, candidate texts)`` of the data set's first context (position 0 of
            the whole data set, all its candidates), whatever contexts were selected: where a judge with
            ``answer_prefix="auto"`` chooses its prefix (:func:`prepare_judge`), so every ``--contexts``
            slice and every process of a run gets the same template key. ``None`` (a set built by hand):
            the first context of ``ids``.
    """

    ids: list[str]
    texts: list[str]
    candidate_ids: list[list[str]]
    candidates: list[list[str]]
    labels: list[np.ndarray] | None = None
    prefix_sample: tuple[str, list[str]] | None = None


def _parse_positions(spec: str | slice | Sequence[int] | None, n: int) -> list[int]:
    if spec is None:
        return list(range(n))
    if isinstance(spec, slice):
        return list(range(n))[spec]
    if isinstance(spec, str):
        try:
            if ":" in spec:
                parts = [int(x) if x.strip() else None for x in spec.split(":")]
                if len(parts) > 3:
                    raise ValueError
                out = list(range(n))[slice(*parts)]
            else:
                out = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"contexts {spec!r}: use START:STOP[:STEP] or i,j,k (context positions, "
                             f"0..{n - 1})") from None
        if not out:
            raise ValueError(f"contexts {spec!r} selects none of the {n} contexts (positions 0..{n - 1})")
    else:
        out = [int(x) for x in spec]
    _refuse_repeats("contexts", spec, out)
    return out


def _refuse_repeats(name: str, spec, positions: Sequence[int]) -> None:
    """A context selected twice would be judged and scored as two contexts: refuse it, naming ``name``."""
    twice = sorted({k for k in positions if positions.count(k) > 1})
    if twice:
        shown = spec if isinstance(spec, str) else list(positions)
        raise ValueError(f"{name} {shown!r} selects context position(s) {twice} more than once; give each "
                         "context once")


def contexts_of(ds, *, aspect: str | None = None, contexts=None, max_candidates: int | None = None) -> ContextSet:
    """Group a loaded data set (:func:`jaxrank.data.load_dataset`) by context.

    Args:
        ds: a ``datasets.Dataset`` in jaxrank's schema.
        aspect: a human-score column to carry along (``labels``).
        contexts: which contexts, by position: ``"0:5"``, ``"0,3,7"``, a slice or indices.
        max_candidates: keep only the first ``max_candidates`` candidates of each context (an int >= 2:
            a comparison needs two); ``None``: all.

    Raises:
        ValueError: an unknown aspect, a selection outside the data set, or ``max_candidates`` not an
            int >= 2.
    """
    if max_candidates is not None and (isinstance(max_candidates, (bool, np.bool_))
                                       or not isinstance(max_candidates, (int, np.integer)) or max_candidates < 2):
        raise ValueError(f"max_candidates must be an int >= 2 (a comparison needs two candidates) or None (all), "
                         f"got {max_candidates!r}")
    text_columns = ("context_id", "context", "candidate_id", "candidate", "reference")
    scores = [c for c in ds.column_names if c not in text_columns]
    if aspect is not None and aspect not in scores:
        what = "a text column, not a human score" if aspect in ds.column_names else "unknown"
        raise ValueError(f"aspect {aspect!r} is {what}; the human scores are: {', '.join(scores) or 'none'}")
    cols = {k: ds[k] for k in ("context_id", "context", "candidate_id", "candidate")}
    lab = ds[aspect] if aspect else None
    order: dict[str, int] = {}
    groups: list[list[int]] = []
    for r, cid in enumerate(cols["context_id"]):
        if cid not in order:
            order[cid] = len(groups)
            groups.append([])
        groups[order[cid]].append(r)
    pick = _parse_positions(contexts, len(groups))
    bad = [k for k in pick if not 0 <= k < len(groups)]
    if bad:
        raise ValueError(f"contexts {bad} outside [0, {len(groups)})")
    ids, texts, cids, cands, labels = [], [], [], [], []
    for k in pick:
        rows = groups[k] if max_candidates is None else groups[k][:int(max_candidates)]
        ids.append(str(cols["context_id"][rows[0]]))
        texts.append(cols["context"][rows[0]] or "")
        cids.append([str(cols["candidate_id"][r]) for r in rows])
        cands.append([cols["candidate"][r] for r in rows])
        if lab is not None:
            labels.append(np.array([np.nan if lab[r] is None else lab[r] for r in rows], np.float32))
    sample = None
    if groups:        # the data set's first context, all its candidates: the same for every selection
        sample = (cols["context"][groups[0][0]] or "", [cols["candidate"][r] for r in groups[0]])
    return ContextSet(ids, texts, cids, cands, labels if lab is not None else None, sample)
