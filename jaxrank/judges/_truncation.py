"""Context truncation shared by the prompt judges (private).

A prompt that does not fit the model window keeps its candidate(s) and
instructions whole and loses tokens from the end of the context only:
:func:`fit_context` cuts every prompt of a call alike (so the longest fits),
:func:`fit_each` cuts each prompt by as much as it alone needs (the pairwise
judges: a comparison's ``p`` then never depends on the others of its call; the
pointwise judges: a candidate's score never depends on the candidates scored
with it).
"""

from __future__ import annotations

import warnings
from typing import Callable, TypeVar

__all__ = ["fit_context", "fit_each"]

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


def fit_each(rows: list, *, need: Callable[[object], int], max_length: int, context_len: Callable[[], int],
             rebuild: Callable[[int, list[int]], list], warn: bool, kept: str, need_note: str = "",
             error_tail: str = "", stacklevel: int = 2,
             name_row: Callable[[int], str] | None = None) -> tuple[list, list[int | None], bool]:
    """Cuts the context of each prompt that does not fit the window, by as much as that prompt needs.

    Unlike :func:`fit_context` (one cut, set by the longest prompt), each prompt
    keeps as much of the context as fits with its own candidates: its cut, so
    its judgement, is a function of that prompt's own texts, never of the other
    prompts judged in the same call (store keys name one comparison). A prompt
    needing ``need(row) = n > max_length`` tokens is rebuilt with the first
    ``context_len() - (n - max_length)`` context tokens, then cut further while
    a token merged across the cut leaves it too long (:func:`fit_context`'s
    loop, run on that prompt alone). Prompts that fit are returned as they are.

    Args:
        rows: the prompts built with the whole context.
        need: tokens a prompt needs, appended tokens included.
        max_length: the model window.
        context_len: returns the number of context tokens (called only when a
            prompt is too long; ``0`` when the template has no context).
        rebuild: ``rebuild(k, idx)`` builds the prompts ``idx`` (indices into
            ``rows``) again keeping only the first ``k`` context tokens.
        warn, kept, need_note, error_tail, stacklevel: as :func:`fit_context`.
        name_row: names prompt ``r`` in the error (default ``"row r"``), e.g. by
            its candidates.

    Returns:
        ``(rows, cuts, truncated)``: the prompts that fit, each prompt's kept
        context tokens (``None``: the whole context) and whether any was cut.

    Raises:
        ValueError: a prompt that does not fit even with the whole context
            removed (the message gives the tokens it needs without the context);
            also when a prompt rebuilt with its context cut to ``0`` tokens is
            still too long (a token merged across the cut), naming the prompt
            and by how many tokens ``kept`` alone exceed the window.
    """
    rows = list(rows)
    cuts: list[int | None] = [None] * len(rows)
    over = {r: need(row) - max_length for r, row in enumerate(rows)}
    over = {r: o for r, o in over.items() if o > 0}
    if not over:
        return rows, cuts, False
    ctx_len = context_len()
    worst = max(over.values())
    if worst > ctx_len:
        raise ValueError(f"a prompt needs {worst + max_length - ctx_len} tokens{need_note} without the context's "
                         f"share; the model allows {max_length}{error_tail}")
    if warn:
        warnings.warn(f"prompt longer than the model's {max_length} tokens: the context was cut by up to {worst} "
                      f"tokens in {len(over)} of {len(rows)} prompts, each only as far as it needs ({kept} kept "
                      "whole)", stacklevel=stacklevel + 1)
    todo = {r: ctx_len - o for r, o in over.items()}
    still: dict[int, int] = {}      # prompts too long with no context left: reported, never returned over the window
    while todo:                      # boundary merges can leave a token too many: cut that prompt again
        by_cut: dict[int, list[int]] = {}
        for r, k in sorted(todo.items()):
            by_cut.setdefault(k, []).append(r)
        todo = {}
        for k, idx in by_cut.items():
            for r, row in zip(idx, rebuild(k, idx)):
                rows[r], cuts[r] = row, k
                o = need(row) - max_length
                if o > 0 and k > 0:
                    todo[r] = max(0, k - o)
                elif o > 0:
                    still[r] = o
    if still:
        name = name_row or (lambda r: f"row {r}")
        worst = max(still.values())
        where = "; ".join(f"{name(r)} by {o}" for r, o in sorted(still.items()))
        raise ValueError(f"the {kept} alone (which are never cut) exceed the model's window of {max_length} "
                         f"tokens by {worst}, even with the context cut to 0 tokens ({where})")
    return rows, cuts, True
