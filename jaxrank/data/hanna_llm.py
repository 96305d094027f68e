"""LLM ratings of the HANNA stories, aligned to ``load_dataset("hanna")``.

``hanna/hanna_metric_scores_llm.csv`` (HANNA benchmark release) has one row per story
source (``Model``: Human, BertGeneration, ..., TD-VAE) and, in every other cell, a JSON
list of 96 values in the prompt order of the release (``P0`` .. ``P95`` of
``hanna.jsonl``). ``hanna.jsonl`` ranks the 11 stories of a prompt by their text, so
the generating system of each ``(prompt_id, story_id)`` is recovered here by matching
the six averaged human scores (Relevance ... Complexity) of the row against the 11
systems' values at that prompt (exact to 1e-6). One prompt of the release (P76) has two
systems (GPT, RoBERTa) with identical six averages; such ties are broken by the order of
the CSV's ``Text length`` metric against the stories' word counts (longer story ->
larger ``Text length``; over all uniquely matched stories the two agree with Spearman
0.989, per prompt median 0.991, min 0.909), and the tie-break must itself be unambiguous. Anything else
that does not give a bijection stories <-> systems per prompt raises ``ValueError``.

The LLM columns are ``"<judge> <AS> <v>"`` (judge in :data:`LLM_JUDGES`, aspect code
in :data:`ASPECT_CODES`, prompt variant ``v`` in 1..4); each value is the release's mean
of that LLM's repeated ratings of the story on the 1-5 scale, **with a failed rating
(no parsable answer) coded -1 and averaged in**. So some cells lie below 1, down to -1
(e.g. -0.333 = mean(-1, -1, 1)): of the 25,344 cells per LLM (96 x 11 stories x 6 aspects
x 4 variants), Beluga-13B 173, OrcaPlatypus 203, Mistral-7B 402, Llama-13B 259, ChatGPT 14.
A cell >= 1 may hold a -1 code as well (mean(-1, 5, 5) = 3); the means cannot tell.
:func:`load_llm_ratings` returns the cells as stored (what the experiments' recorded
results were computed from) with :attr:`LLMRatings.valid` marking the cells on the
scale (``>= 1``) and :attr:`LLMRatings.num_below_scale` counting the others, so a
study can report them or leave them out.

The cells are kept in float64, as the CSV holds them: they are thirds, sixths, ... (a few
hundredths), and float32 would move each by up to 2.4e-7. A float mean of such values splits
exact ties (``7/3 + 2/3`` and ``3/2 + 3/2`` differ in the last bits), which moves a Spearman
correlation; :meth:`LLMRatings.mean_rating` averages them exactly instead.
"""

from __future__ import annotations

import csv
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxrank.data.loaders import ASPECTS, data_dir, label_matrix, load_dataset

LLM_JUDGES = ("Beluga-13B", "OrcaPlatypus", "Mistral-7B", "Llama-13B", "ChatGPT")
ASPECT_CODES = {"relevance": "RE", "coherence": "CH", "empathy": "EM", "surprise": "SU",
                "engagement": "EG", "complexity": "CX"}
NUM_VARIANTS = 4
CSV_FILE = "hanna/hanna_metric_scores_llm.csv"
_TOLERANCE = 1e-6
_MAX_DENOMINATOR = 10_000
"""A cell within :data:`_FRACTION_TOLERANCE` (relative) of a fraction with a denominator up to this is that
fraction (:meth:`LLMRatings.mean_rating`); fractions this small lie at least ``1e-8`` apart, so at most one is
that close."""
_FRACTION_TOLERANCE = 1e-12
"""Relative distance of a stored cell from its fraction: a few float64 roundings (the release computed some of
its means in floating point, e.g. ``4.1000000000000005``)."""


class LLMRatings(NamedTuple):
    """One LLM's ratings of one aspect, laid out like :func:`jaxrank.data.label_matrix`.

    Attributes:
        ratings: ``float64 [96, 11, 4]``, the rating of each story under prompt variants 1..4 (the CSV's
            values; module docstring).
        mask: ``bool [96, 11]``, True for real stories (all True for HANNA).
        human: ``float32 [96, 11]``, the averaged human scores of the aspect.
        systems: per prompt, the system that wrote each story (``Model`` of the CSV).
        context_ids: the prompt ids ``P0`` .. ``P95``.
        judge: the LLM's name; aspect: the aspect.
        valid: ``bool [96, 11, 4]``, True where ``ratings`` is on the 1-5 scale (``>= 1``) at a
            real story; False where the stored mean is below 1, i.e. averages in the release's
            -1 "no rating" code (module docstring).
    """

    ratings: np.ndarray
    mask: np.ndarray
    human: np.ndarray
    systems: list[list[str]]
    context_ids: list[str]
    judge: str
    aspect: str
    valid: np.ndarray

    @property
    def num_below_scale(self) -> int:
        """Cells (story x variant) of real stories whose stored mean is below 1 (``~valid``)."""
        return int((self.mask[..., None] & ~self.valid).sum())

    def mean_rating(self, *, valid_only: bool = False) -> np.ndarray:
        """The mean of each story's variants, computed exactly, so that equal means tie.

        Each cell is read as the fraction it stands for: the fraction with a denominator up to 10,000
        within ``1e-12`` (relative) of it (there is at most one), or, where there is none, its float
        value exactly. The fractions are summed exactly, divided once and rounded to float64 once; so
        two stories whose cells have the same exact mean get the same float (a float mean of
        the cells can differ in the last bits), and a rank correlation keeps them tied.

        Args:
            valid_only: average only the cells on the 1-5 scale (:attr:`valid`), leaving out the
                cells that average in the release's -1 "no rating" code.

        Returns:
            ``float64 [96, 11]``: the mean rating of each story; 0 at padding (``~mask``) and, with
            ``valid_only``, NaN at a story with no valid cell (no mean to take; leave it out with
            ``valid.any(-1)``).
        """
        ratings = np.asarray(self.ratings, np.float64)
        mask = np.asarray(self.mask, bool)
        keep = np.asarray(self.valid, bool) if valid_only else np.broadcast_to(mask[..., None], ratings.shape)
        values, inverse = np.unique(ratings, return_inverse=True)
        exact = [_fraction(float(v)) for v in values]
        cells = inverse.reshape(ratings.shape)
        out = np.zeros(mask.shape, np.float64)
        for idx in zip(*np.nonzero(mask)):
            on = cells[idx][keep[idx]]
            out[idx] = float(sum((exact[c] for c in on), Fraction(0)) / len(on)) if len(on) else np.nan
        return out


def _fraction(x: float) -> Fraction:
    """The fraction a stored cell stands for (:meth:`LLMRatings.mean_rating`)."""
    f = Fraction(x).limit_denominator(_MAX_DENOMINATOR)
    return f if abs(float(f) - x) <= _FRACTION_TOLERANCE * max(1.0, abs(x)) else Fraction(x)


def _read_release(file: Path) -> list[dict[str, str]]:
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found; set JAXRANK_DATA to the folder holding hanna/")
    csv.field_size_limit(1 << 30)
    with open(file, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _column(rows: list[dict[str, str]], name: str, file: Path) -> np.ndarray:
    """``[systems, prompts]`` values of one CSV column."""
    out = []
    for line, row in enumerate(rows, start=2):
        if name not in row:
            raise ValueError(f"{file}: no column {name!r}")
        try:
            values = json.loads(row[name])
        except json.JSONDecodeError as e:
            raise ValueError(f"{file}: line {line}: column {name!r} is not a JSON list ({e})") from e
        if not isinstance(values, list) or (out and len(values) != len(out[0])):
            raise ValueError(f"{file}: line {line}: column {name!r} must be a list of one value per prompt")
        out.append(values)
    return np.asarray(out, np.float64)


def match_systems(path: str | os.PathLike | None = None) -> list[list[str]]:
    """The system that wrote each story of ``load_dataset("hanna")``, per prompt.

    Args:
        path: data folder (default :func:`jaxrank.data.data_dir`).

    Returns:
        ``systems[k][c]``: the ``Model`` of the CSV for candidate ``c`` of prompt ``k``,
        in the row order of :func:`jaxrank.data.label_matrix`.

    Raises:
        ValueError: a story matches no system, or the match per prompt is not a bijection
            even after the ``Text length`` tie-break.
    """
    folder = Path(path) if path is not None else data_dir()
    file = folder / CSV_FILE
    rows = _read_release(file)
    names = [row["Model"] for row in rows]
    human = np.stack([_column(rows, a.capitalize(), file) for a in ASPECTS["hanna"]], -1)  # [S, P, 6]
    length = _column(rows, next(c for c in rows[0] if c.startswith("Text length")), file)  # [S, P]
    ds = load_dataset("hanna", path=folder)
    mats = [label_matrix(ds, a) for a in ASPECTS["hanna"]]
    stories = ds.select_columns(["context_id", "candidate"]).to_dict()
    words: dict[str, list[int]] = {}
    for cid, text in zip(stories["context_id"], stories["candidate"]):
        words.setdefault(cid, []).append(len(text.split()))
    if human.shape[1] != len(mats[0].context_ids):
        raise ValueError(f"{file}: {human.shape[1]} prompts in the CSV, {len(mats[0].context_ids)} in hanna.jsonl")
    systems = []
    for k, cid in enumerate(mats[0].context_ids):
        n = int(mats[0].mask[k].sum())
        scores = np.stack([m.labels[k, :n] for m in mats], -1).astype(np.float64)     # [n, 6]
        # float32 labels: compare at float32 precision
        hit = np.all(np.abs(scores[:, None, :] - human[None, :, k, :].astype(np.float32)) < _TOLERANCE * 10, -1)
        chosen = [-1] * n
        for c in range(n):
            cands = np.flatnonzero(hit[c])
            if cands.size == 0:
                raise ValueError(f"{file}: prompt {cid} story {mats[0].candidate_ids[k][c]}: "
                                 "its human scores match no system of the CSV")
            if cands.size == 1:
                chosen[c] = int(cands[0])
        for c in range(n):                           # ties: order by Text length vs word count
            if chosen[c] >= 0:
                continue
            group = tuple(np.flatnonzero(hit[c]))
            tied = [d for d in range(n) if tuple(np.flatnonzero(hit[d])) == group]
            if len(tied) != len(group):
                raise ValueError(f"{file}: prompt {cid}: {len(tied)} stories tie with systems "
                                 f"{[names[s] for s in group]}; cannot match")
            w = [words[cid][d] for d in tied]
            t = [length[s, k] for s in group]
            if len(set(w)) != len(w) or len(set(t)) != len(t):
                raise ValueError(f"{file}: prompt {cid}: tied systems {[names[s] for s in group]} "
                                 "cannot be told apart by text length")
            for d, s in zip(sorted(tied, key=lambda d: words[cid][d]), sorted(group, key=lambda s: length[s, k])):
                chosen[d] = int(s)
        if sorted(chosen) != sorted(set(chosen)) or len(chosen) != len(rows):
            raise ValueError(f"{file}: prompt {cid}: stories -> systems is not a bijection "
                             f"({[names[s] for s in chosen]})")
        systems.append([names[s] for s in chosen])
    return systems


def load_llm_ratings(judge: str, aspect: str, *, path: str | os.PathLike | None = None,
                     systems: list[list[str]] | None = None) -> LLMRatings:
    """One LLM's 4 ratings (prompt variants 1..4) of every HANNA story for one aspect.

    Args:
        judge: one of :data:`LLM_JUDGES`.
        aspect: one of ``ASPECTS["hanna"]``.
        path: data folder (default :func:`jaxrank.data.data_dir`, i.e. ``$JAXRANK_DATA``).
        systems: a precomputed :func:`match_systems` result (saves re-matching).

    Returns:
        :class:`LLMRatings` aligned with ``label_matrix(load_dataset("hanna"), aspect)``:
        ``ratings[k, c, v]`` is the CSV cell ``"<judge> <AS> <v+1>"`` of the row
        ``systems[k][c]`` at list position ``k``, as stored (cells below 1, which average in
        the release's -1 "no rating" code, are kept; ``valid`` marks them and
        ``num_below_scale`` counts them).

    Raises:
        ValueError: unknown ``judge`` or ``aspect``; malformed CSV; failed system match.
    """
    if judge not in LLM_JUDGES:
        raise ValueError(f"unknown judge {judge!r}; known: {', '.join(LLM_JUDGES)}")
    if aspect not in ASPECT_CODES:
        raise ValueError(f"unknown aspect {aspect!r}; known: {', '.join(ASPECT_CODES)}")
    folder = Path(path) if path is not None else data_dir()
    file = folder / CSV_FILE
    rows = _read_release(file)
    index = {row["Model"]: s for s, row in enumerate(rows)}
    systems = match_systems(folder) if systems is None else systems
    cols = np.stack([_column(rows, f"{judge} {ASPECT_CODES[aspect]} {v}", file)
                     for v in range(1, NUM_VARIANTS + 1)], -1)                    # [S, P, 4]
    lm = label_matrix(load_dataset("hanna", path=folder), aspect)
    ratings = np.zeros(lm.labels.shape + (NUM_VARIANTS,), np.float64)    # the CSV's values (module doc)
    for k, names in enumerate(systems):
        ratings[k, : len(names)] = cols[[index[n] for n in names], k]
    if not np.all(np.isfinite(ratings)):
        raise ValueError(f"{file}: non-finite {judge} {aspect} ratings")
    valid = np.asarray(lm.mask, bool)[..., None] & (ratings >= 1)
    return LLMRatings(ratings, lm.mask, lm.labels, systems, lm.context_ids, judge, aspect, valid)
