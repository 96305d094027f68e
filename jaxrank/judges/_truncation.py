"""Context truncation shared by the prompt judges (private).

A prompt that does not fit the model window keeps its candidate(s) and
instructions whole and loses tokens from the end of the context only.
"""

from __future__ import annotations

import warnings
from typing import Callable, TypeVar

__all__ = ["fit_context"]

Rows = TypeVar("Rows")


def fit_context(rows: Rows, need: int, *, max_length: int, context_len: Callable[[], int],
                rebuild: Callable[[int], Rows], warn: bool, kept: str, need_note: str = "",
                error_tail: str = "", stacklevel: int = 2) -> tuple[Rows, bool]:
    """Cuts the context from its end so that the longest prompt fits the model window.

    The prompts ``rows`` were built with the whole context and the longest needs
    ``need`` tokens (its own tokens plus whatever the model must still append:
    the scored next token, or the generated answer). When ``need <= max_length``
    nothing changes. Otherwise the context must lose
    ``excess = need - max_length`` tokens, so the prompts are rebuilt with the
    first ``context_len() - excess`` context tokens, after which the longest
    prompt needs exactly ``max_length`` tokens (the context's tokens come
    before the candidates and are shared by every prompt, so one cut fits all).

    Args:
        rows: the prompts built with the whole context (returned as they are
            when they fit).
        need: tokens the longest prompt needs, appended tokens included.
        max_length: the model window.
        context_len: returns the number of context tokens (called only when
            the prompts are too long; ``0`` when the template has no context).
        rebuild: builds the prompts again keeping only the first ``k``
            context tokens.
        warn: whether to warn (``UserWarning``) when the context is cut; the
            caller passes ``not already_warned`` to warn once per judge.
        kept: what stays whole, for the warning
            (``"... (candidates and question kept whole)"``).
        need_note: inserted after ``"a prompt needs N tokens"`` in the error.
        error_tail: appended to the error message.
        stacklevel: the warning's ``stacklevel`` as seen from the caller.

    Returns:
        ``(rows, truncated)``: the prompts that fit and whether the context
        was cut.

    Raises:
        ValueError: the prompts do not fit even with the whole context removed
            (``excess > context_len()``); the message gives the tokens needed
            without the context, ``need - context_len()``.
    """
    if need <= max_length:
        return rows, False
    excess = need - max_length
    ctx_len = context_len()
    if excess > ctx_len:
        raise ValueError(f"a prompt needs {need - ctx_len} tokens{need_note} without the context's share; the "
                         f"model allows {max_length}{error_tail}")
    if warn:
        warnings.warn(f"prompt longer than the model's {max_length} tokens: the context was cut by "
                      f"{excess} tokens ({kept} kept whole)", stacklevel=stacklevel + 1)
    return rebuild(ctx_len - excess), True
