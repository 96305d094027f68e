"""Input checks of the pointwise judges (private).

Used by :mod:`jaxrank.judges.pointwise` and :mod:`jaxrank.judges.prompt_scoring`.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["check_indices", "check_scale", "check_pairs_scale"]


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
