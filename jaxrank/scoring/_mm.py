"""Newman's (2023) minorise-maximise update of Bradley-Terry log-strengths, in the log domain.

Newman (2023, JMLR 24:238, eq. 13) updates ``r_n = exp(s_n)`` as

    r_n <- [sum_k won_{n,k} r_o / (r_n + r_o)] / [sum_k lost_{n,k} / (r_n + r_o)]

over the comparisons ``k`` of item ``n`` against ``o``. With
``r_o / (r_n + r_o) = sigmoid(s_o - s_n)`` and
``1 / (r_n + r_o) = exp(-s_n) sigmoid(s_n - s_o)`` this is

    s_n <- s_n + log A_n - log B_n,
    A_n = sum_k won_{n,k} sigmoid(s_o - s_n),   B_n = sum_k lost_{n,k} sigmoid(s_n - s_o),

which never forms ``exp(s)``: it stays finite however far apart the scores are
(hard decisions on a separable pool spread them over 100+ log-units). One update
moves an item whose comparisons are all saturated straight to its optimum given
the others, which is exactly where Newton's method crawls (about one log-unit
per step); :mod:`jaxrank.scoring.soft_bt` uses a few updates as its start on
large sparse pools of hard decisions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrank import _graph


def newman_step(e: _graph.Edges, a, b, s, gamma=0.0, prior=0.0):
    """The log-step ``log A_n - log B_n`` of one Newman update of every item (module docstring).

    Args:
        e: edge space of one context.
        a, b: per-edge wins of the edge's first item over its second, and of the second over the first.
        s: ``[N]`` log-strengths.
        gamma: a positional bias: the edge's first item wins with ``sigmoid(s_i - s_j - gamma)``.
        prior: precision ``lambda`` of an ``N(0, 1 / lambda)`` prior on every score, as
            ``lambda max(-s_n, 0)`` more wins and ``lambda max(s_n, 0)`` more losses (the
            fixed point ``A_n - B_n = lambda s_n`` is the MAP's stationarity condition).
    """
    d = _graph.head(e, s) - _graph.tail(e, s) - gamma
    up, down = jax.nn.sigmoid(-d), jax.nn.sigmoid(d)       # sigmoid(s_o - s_n) for the head, the tail
    won = _graph.item_sums(e, a * up, b * down) + prior * jnp.maximum(-s, 0)
    lost = _graph.item_sums(e, b * down, a * up) + prior * jnp.maximum(s, 0)
    tiny = jnp.finfo(s.dtype).tiny
    return jnp.log(jnp.maximum(won, tiny)) - jnp.log(jnp.maximum(lost, tiny))


def newman_update(e: _graph.Edges, a, b, s, live):
    """One Newman update of the log-strengths ``s`` (not centred).

    Args:
        e: edge space of one context.
        a, b: per-edge wins of the edge's first item over its second, and of the second over the first.
        s: ``[N]`` log-strengths.
        live: ``[N]`` items in at least one comparison (the others keep their ``s``).
    """
    return jnp.where(live, s + newman_step(e, a, b, s), s)


def newman_polish(e: _graph.Edges, a, b, s, gamma, prior, labels, sweeps: int, cap: float):
    """``sweeps`` Newman updates from ``s`` with a positional bias ``gamma`` and a score prior, each
    item's log-step clipped to ``[-cap, cap]`` (and halved where it changes sign), centred per component.

    The start polish of ``soft_bt``'s Newton solver (``_soft_bt_newton.POLISH_SWEEPS``). Items in no
    comparison keep their ``s``.
    """
    live = _graph.item_sums(e, a + b, a + b) > 0
    sizes = _graph.component_sizes(labels, s.dtype)

    def body(_, carry):
        s, prev = carry
        delta = jnp.clip(newman_step(e, a, b, s, gamma, prior), -cap, cap)
        delta = jnp.where(live, jnp.where(delta * prev < 0, 0.5 * delta, delta), 0)
        s = s + delta
        return s - _graph.component_mean(s, labels, sizes), delta

    return jax.lax.fori_loop(0, sweeps, body, (s, jnp.zeros_like(s)))[0]


def newman_sweeps(e: _graph.Edges, a, b, labels, sizes, sweeps: int):
    """``sweeps`` Newman updates from ``s = 0``, each centred per component; an item whose step
    changes sign from one update to the next takes half of it (breaks Newman's period-2 cycles
    on nearly separable components without moving the fixed point)."""
    s0 = jnp.zeros(labels.shape, a.dtype)
    live = _graph.item_sums(e, a + b, a + b) > 0

    def body(_, carry):
        s, prev = carry
        delta = newman_update(e, a, b, s, live) - s
        delta = jnp.where(delta * prev < 0, 0.5 * delta, delta)
        s = s + delta
        return s - _graph.component_mean(s, labels, sizes), delta

    return jax.lax.fori_loop(0, sweeps, body, (s0, s0))[0]


def log_newton_step(e: _graph.Edges, a, b, s, prior=0.0):
    """Per item, one Newton step on Newman's equation ``phi_n(s_n) = log A_n - log B_n = 0`` with the
    other items held: ``-phi_n / phi_n'`` (``A``, ``B`` and ``prior`` as in :func:`newman_step`).

    Where all of an item's comparisons are saturated, ``phi_n'`` is ``-1`` (saturated on one side:
    Newman's own step, exact) or ``-2`` (wins far below and losses far above: half of Newman's step,
    again exact, where Newman's full step would reflect the item to the other side of its optimum);
    near the optimum it is Newton's step for the item alone. ``phi_n'`` is kept below ``-1e-3`` and a
    non-finite step is 0.
    """
    d = _graph.head(e, s) - _graph.tail(e, s)
    up, down = jax.nn.sigmoid(-d), jax.nn.sigmoid(d)
    hh = up * down
    neg, pos = (s < 0).astype(s.dtype), (s > 0).astype(s.dtype)
    won, lost, dwon, dlost = _graph.item_sums_many(
        e, (a * up, b * down, a * hh, b * hh), (b * down, a * up, b * hh, a * hh))
    won, lost = won + prior * jnp.maximum(-s, 0), lost + prior * jnp.maximum(s, 0)
    tiny = jnp.finfo(s.dtype).tiny
    won, lost = jnp.maximum(won, tiny), jnp.maximum(lost, tiny)
    dphi = -(dwon + prior * neg) / won - (dlost + prior * pos) / lost      # d log A / ds - d log B / ds
    step = -(jnp.log(won) - jnp.log(lost)) / jnp.minimum(dphi, -1e-3)
    return jnp.where(jnp.isfinite(step), step, 0)
