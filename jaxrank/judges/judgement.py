"""What a judge returns: :class:`Judgement` (``p`` with the labels' scores, mass and top tokens), the
answer prefix a prompt judge chose (:class:`AnswerPrefixChoice`), and the pair checks every judge shares.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from jaxrank.judges.reading import TOP_K

__all__ = ["Judgement", "AnswerPrefixChoice", "check_pairs"]


def check_pairs(candidates: Sequence[str], i, j) -> tuple[np.ndarray, np.ndarray]:
    """``(i, j)`` as int arrays after checking them against ``candidates`` (shared by every judge).

    Raises:
        ValueError: ``i`` and ``j`` of different lengths, not integers (``0.9`` would be read as ``0``;
            booleans too), an index out of range, or an empty candidate text among those compared.
    """
    for name, idx in (("i", i), ("j", j)):
        a = np.asarray(idx)
        if a.size and (a.dtype == bool or not np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"{name} must hold integer candidate indices, got dtype {a.dtype}")
    i = np.asarray(i, np.int64).reshape(-1)
    j = np.asarray(j, np.int64).reshape(-1)
    if i.shape != j.shape:
        raise ValueError(f"i and j must have the same length, got {i.shape} and {j.shape}")
    n = len(candidates)
    for name, idx in (("i", i), ("j", j)):
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{name} has indices outside [0, {n})")
    empty = sorted(k for k in set(i.tolist()) | set(j.tolist()) if not str(candidates[k]).strip())
    if empty:
        raise ValueError(f"candidates {empty} are empty; an empty text cannot be judged")
    return i, j


@dataclasses.dataclass(frozen=True)
class Judgement:
    """Probabilities for a list of comparisons of one context.

    Attributes:
        p: ``[R]`` ``P(A better)`` per comparison.
        truncated: whether the context had to be shortened to fit the model.
        logits: ``[R, 2]`` the two labels' scores, ``p = softmax(logits)[:, 0]``
            (a prompt judge: the labels' log-probabilities ``log P(L_A), log P(L_B)``).
        label_mass: ``[R]`` the labels' share of the model's answer,
            ``P(L_A) + P(L_B)`` over the whole vocabulary (a sampling judge: the
            share of its answers that name a label); ``None`` when the judge
            cannot tell (a similarity or callable judge).
        top_ids: ``[R, k]`` the model's top next tokens at the answer position
            (``None`` where not read).
        top_probs: ``[R, k]`` their probabilities.
    """

    p: np.ndarray
    truncated: bool
    logits: np.ndarray
    label_mass: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_probs: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class AnswerPrefixChoice:
    """What :meth:`PromptJudge.prepare` chose as the answer prefix, and from what.

    Attributes:
        prefix: the answer prefix now in the judge's template ("" when the
            model answers with the label at once, or when neither its answers
            nor the prompt give one).
        answers: the model's greedy answers it was chosen from.
        found: whether any answer named a label.
        from_prompt: no answer named a label, so the prefix is the word the
            prompt names the candidates with (:func:`~jaxrank.judges.reading.naming_word`:
            "Summary" for "Summary A ... Summary B"), so that the answer can begin
            as the prompt's own words do.
    """

    prefix: str
    answers: tuple[str, ...]
    found: bool
    from_prompt: bool = False


def _empty(k: int = TOP_K) -> Judgement:
    return Judgement(np.zeros(0, np.float32), False, np.zeros((0, 2), np.float32), np.zeros(0, np.float32),
                     np.zeros((0, k), np.int32), np.zeros((0, k), np.float32))
