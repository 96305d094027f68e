"""Checks of public options where they enter: a ``ValueError`` naming the argument, never a silent result.

Every public function of the package checks its options with these before any
JAX work (issue 14): the type (a number, not a string or a bool), NaN and
infinity, the sign and the range. A traced value (inside a caller's
``jax.jit``) cannot be inspected and passes unchecked, as for
:class:`~jaxrank.Comparisons` (validate before jitting).
"""

from __future__ import annotations

import numbers

import jax
import numpy as np

from jaxrank.comparisons import Comparisons

__all__ = ["number", "integer", "comparisons"]


def _interval(low, high, low_open, high_open) -> str:
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    return f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"


def number(name: str, value, *, low=None, high=None, low_open: bool = False, high_open: bool = False,
           array: bool = False, batch_shape: tuple | None = None):
    """Check a real option: a finite number (or, with ``array``, an array of them) in the interval.

    Args:
        name: the argument's name, for the message.
        value: the option.
        low, high: bounds (``None``: unbounded).
        low_open, high_open: exclude the bound itself.
        array: accept an array (every entry checked) as well as a scalar.
        batch_shape: with ``array``, the array must broadcast to this shape (one value per context).

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: naming ``name``: not a number, a bool, NaN or infinite, or out of range.
    """
    if isinstance(value, jax.core.Tracer):
        return value
    where = _interval(low, high, low_open, high_open)
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)) or value is None:
        raise ValueError(f"{name} must be a number in {where}, got {value!r}")
    if isinstance(value, numbers.Real):
        arr = np.asarray(float(value))
    else:
        try:
            arr = np.asarray(value)
        except Exception:                                   # noqa: BLE001 - any object that is no array
            raise ValueError(f"{name} must be a number in {where}, got {value!r}") from None
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{name} must be a number in {where}, got {value!r}")
        if arr.ndim and not array:
            raise ValueError(f"{name} must be a scalar number in {where}, got an array of shape {arr.shape}")
        if arr.ndim and batch_shape is not None:
            try:
                ok = np.broadcast_shapes(arr.shape, tuple(batch_shape)) == tuple(batch_shape)
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"{name} must be a scalar or one value per context, shape {tuple(batch_shape)}; "
                                 f"got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if low is not None:
        bad |= (arr <= low) if low_open else (arr < low)
    if high is not None:
        bad |= (arr >= high) if high_open else (arr > high)
    if np.any(bad):
        k = tuple(int(x) for x in np.argwhere(bad)[0]) if arr.ndim else ()
        at = f" at index {k}" if arr.ndim else ""
        raise ValueError(f"{name} must be a finite number in {where}, got {arr[k]!r}{at}")
    return value


def integer(name: str, value, *, low: int | None = None, none: bool = False):
    """Check an integer option (``int`` or NumPy integer, not ``bool``) ``>= low``; ``None`` if ``none``.

    Returns:
        ``value`` as an ``int`` (or ``None``).

    Raises:
        ValueError: naming ``name``.
    """
    if value is None and none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int{'' if low is None else f' >= {low}'}"
                         f"{' or None' if none else ''}, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def comparisons(name: str, c) -> Comparisons:
    """Check that ``c`` is a :class:`~jaxrank.Comparisons` (not an array, a dict, ``None``)."""
    if not isinstance(c, Comparisons):
        raise ValueError(f"{name} must be a jaxrank.Comparisons (e.g. Comparisons.from_pairs), "
                         f"got {type(c).__name__}")
    return c
