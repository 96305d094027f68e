"""Input checks of the pointwise judges (private).

Used by :mod:`jaxrank.judges.pointwise` and :mod:`jaxrank.judges.prompt_scoring`.
"""

from __future__ import annotations

import numbers

import numpy as np

from jaxrank.judges.prompts import PointwiseTemplate

__all__ = ["fixed", "check_prompt_text", "check_texts", "check_template", "check_scores", "check_indices",
           "check_scale", "check_pairs_scale", "check_steps"]


def fixed(name: str, doc: str) -> property:
    """A read-only attribute ``name`` (stored as ``_name``) set once when the judge is built.

    Settings that shape the prompt or the scores are fixed: assigning one would
    change :attr:`template_key` but not the prompt already built, so scores made
    one way would be stored under the key of the other. Assigning raises
    ``AttributeError`` telling to build a new judge.
    """
    attr = "_" + name

    def get(self):
        return getattr(self, attr)

    def refuse(self, value):
        raise AttributeError(f"{type(self).__name__}.{name} is fixed when the judge is built (it shapes the "
                             f"prompt or the scores, and the store key template_key); build a new judge with "
                             f"{name}=...")

    return property(get, refuse, doc=doc)


def check_prompt_text(text, name: str) -> None:
    """A prompt with ``{candidate}`` (once or more) and at most one ``{context}``, before the first candidate.

    Raises:
        ValueError: naming ``name`` (``"template.text"``, ``"text"``).
    """
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a string, got {type(text).__name__}")
    if "{candidate}" not in text:
        raise ValueError(f"{name} must contain {{candidate}}: {text!r}")
    n = text.count("{context}")
    if n > 1:
        raise ValueError(f"{name} must contain {{context}} at most once (it is cached once per context), "
                         f"got {n} times")
    if n and text.index("{context}") > text.index("{candidate}"):
        raise ValueError(f"{name} must put {{context}} before {{candidate}} (the context is the prompt's shared "
                         f"prefix)")


def check_texts(context, candidates, name: str = "candidates") -> None:
    """``context`` a string and ``candidates`` a sequence (not a string) of strings.

    Raises:
        ValueError: naming ``context`` or ``name`` (and the index of a bad candidate).
    """
    if not isinstance(context, str):
        raise ValueError(f"context must be a string, got {type(context).__name__}")
    if isinstance(candidates, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of strings, got a {type(candidates).__name__} "
                         "(one candidate: pass [text])")
    for k, c in enumerate(candidates):
        if not isinstance(c, str):
            raise ValueError(f"{name}[{k}] must be a string, got {type(c).__name__}")


def check_template(template):
    """``template`` if it is a usable :class:`~jaxrank.judges.prompts.PointwiseTemplate` (G-Eval).

    Raises:
        ValueError: not a ``PointwiseTemplate``, or a bad ``template.text`` (:func:`check_prompt_text`) or
            ``template.scores`` (:func:`check_scores`).
    """
    if not isinstance(template, PointwiseTemplate):
        raise ValueError(f"template must be a PointwiseTemplate (pointwise_template(aspect)), "
                         f"got {type(template).__name__}")
    check_prompt_text(template.text, "template.text")
    check_scores(template.scores)
    return template


def check_scores(scores) -> None:
    """A G-Eval score scale: at least one score, each a finite real number.

    Raises:
        ValueError: naming ``template.scores``.
    """
    if not isinstance(scores, (tuple, list)) or len(scores) == 0:
        raise ValueError(f"template.scores must hold at least one score, got {scores!r}")
    bad = [s for s in scores if isinstance(s, bool) or not isinstance(s, numbers.Real) or not np.isfinite(s)]
    if bad:
        raise ValueError(f"template.scores must be finite numbers, got {bad[0]!r} in {scores!r}")


def check_indices(x, name: str) -> np.ndarray:
    """``x`` as a flat int64 array, refusing non-integer values (a float index is not truncated).

    Raises:
        ValueError: naming ``name``.
    """
    a = np.asarray(x)
    if a.size and (a.dtype == bool or a.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be integer indices, got dtype {a.dtype}")
    return a.astype(np.int64).reshape(-1)


def check_scale(scale, name: str = "scale") -> float:
    """A finite ``scale > 0`` (an infinite one makes tied scores ``inf * 0 = nan``).

    Raises:
        ValueError: naming ``name``.
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (0 < scale < np.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {scale!r}")
    return float(scale)


def check_pairs_scale(n: int, i, j, scale) -> tuple[np.ndarray, np.ndarray, float]:
    """``(i, j, scale)`` of :func:`~jaxrank.judges.pointwise_comparisons` over ``n`` scores, checked.

    Raises:
        ValueError: ``i`` or ``j`` not integers (:func:`check_indices`), of different lengths or outside
            ``[0, n)``, or a ``scale`` that is not a finite number > 0.
    """
    i, j = check_indices(i, "i"), check_indices(j, "j")
    if i.shape != j.shape:
        raise ValueError(f"i and j must have the same length, got {i.shape} and {j.shape}")
    scale = check_scale(scale)
    if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n):
        raise ValueError(f"indices outside [0, {n})")
    return i, j, scale


def check_steps(steps, max_step_tokens=1, *, optional: bool = True) -> None:
    """G-Eval's ``steps`` (a string, or ``None`` where ``optional``) and ``max_step_tokens`` (an integer >= 1).

    Raises:
        ValueError: naming the argument.
    """
    if isinstance(max_step_tokens, bool) or not isinstance(max_step_tokens, (int, np.integer)) \
            or max_step_tokens < 1:
        raise ValueError(f"max_step_tokens must be an integer >= 1, got {max_step_tokens!r}")
    if not isinstance(steps, str) and not (optional and steps is None):
        raise ValueError(f"steps must be a string, got {type(steps).__name__}")
