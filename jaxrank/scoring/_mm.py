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


MODEL_STEP_MAX = 60.0
"""Largest log-step of :func:`saturation_step` (``exp(60)`` keeps its quadratic in float32's range);
an item further off takes several."""


def saturation_step(e: _graph.Edges, a, b, s, prior=0.0, groups=None):
    """Per item, the log-step to the root of Newman's equation ``A_n(s_n) = B_n(s_n)`` under a model
    exact wherever the item's comparisons are saturated, with the other items held.

    ``A_n = sum_k won_{n,k} sigmoid(s_o - s_n)`` and ``B_n = sum_k lost_{n,k} sigmoid(s_n - s_o)`` (as
    in :func:`newman_step`). Each term of ``A_n`` is either flat in ``s_n`` (an opponent far above)
    or decays as ``exp(s_o - s_n)`` (far below), and likewise for ``B_n``; so near saturation
    ``A_n(s_n + x) = alpha + beta exp(-x)`` and ``B_n(s_n + x) = gamma + delta exp(x)``, with
    ``beta = -A_n'``, ``alpha = A_n - beta``, ``delta = B_n'``, ``gamma = B_n - delta`` at the current
    score. The root of ``alpha + beta / z = gamma + delta z`` (``z = exp(x)``) is the positive root
    of ``delta z^2 + (gamma - alpha) z - beta = 0``. The model is exact where every term is
    saturated, whichever side: wins only far below (Newman's own step), wins far below and losses
    far above (half of Newman's step), and an item held loosely between the two with prior mass both
    ways, where Newton's step on ``log A_n - log B_n`` is unbounded (``A_n`` and ``B_n`` both nearly
    constant) and Newman's is far too short: the model puts it where the nearest wins' exponential
    tail balances the net prior pull. Near the root it agrees with Newton's step on
    ``log A_n - log B_n`` to first order.

    ``log A_n`` and ``log B_n`` are log-sum-exps of the terms' logarithms (``log a + log sigmoid(-d)``
    and ``log b + log sigmoid(d)``), shifted by each item's largest term: exact however far out the
    item sits (summed as ``sigmoid`` values, an item more than ~87 log-units below all its
    opponents underflowed ``B_n`` to 0). The step is clipped to ``+-MODEL_STEP_MAX``; a non-finite
    one is 0.
    """
    d = _graph.head(e, s) - _graph.tail(e, s)
    qd, qmd = jax.nn.sigmoid(d), jax.nn.sigmoid(-d)
    u = jnp.log(a) + jax.nn.log_sigmoid(-d)     # the head's win term, the tail's loss term (weight of d/ds: qd)
    v = jnp.log(b) + jax.nn.log_sigmoid(d)      # the head's loss term, the tail's win term (weight: qmd)
    if groups is not None:   # one step per group, over the comparisons that leave it
        inside = _graph.head(e, groups) == _graph.tail(e, groups)
        u, v = jnp.where(inside, -jnp.inf, u), jnp.where(inside, -jnp.inf, v)
        e = _graph.Edges(groups[e.i], groups[e.j], e.num_items, False)
    finite = lambda m: jnp.where(jnp.isfinite(m), m, 0)
    ma, mb = finite(_graph.item_max(e, u, v)), finite(_graph.item_max(e, v, u))
    ea_h, ea_t = jnp.exp(u - _graph.head(e, ma)), jnp.exp(v - _graph.tail(e, ma))
    eb_h, eb_t = jnp.exp(v - _graph.head(e, mb)), jnp.exp(u - _graph.tail(e, mb))
    # separate sums: stacking [R, 4] columns for one scatter costs more than it saves on large pools
    sa, sa1 = _graph.item_sums(e, ea_h, ea_t), _graph.item_sums(e, ea_h * qd, ea_t * qmd)
    sb, sb1 = _graph.item_sums(e, eb_h, eb_t), _graph.item_sums(e, eb_h * qmd, eb_t * qd)
    pa, pb = prior * jnp.maximum(-s, 0), prior * jnp.maximum(s, 0)
    pda, pdb = prior * (s < 0), prior * (s > 0)
    if groups is not None:
        n = s.shape[0]
        pa, pb, pda, pdb = (jax.ops.segment_sum(x * jnp.ones_like(s), groups, n) for x in (pa, pb, pda, pdb))
    log_a = jnp.logaddexp(ma + jnp.log(sa), jnp.log(pa))
    log_b = jnp.logaddexp(mb + jnp.log(sb), jnp.log(pb))
    # the exponential shares beta / A and delta / B (-d log A / ds and d log B / ds), in [0, 1]
    ra = jnp.clip(jnp.exp(ma + jnp.log(sa1) - log_a) + jnp.exp(jnp.log(pda) - log_a), 0, 1)
    rb = jnp.clip(jnp.exp(mb + jnp.log(sb1) - log_b) + jnp.exp(jnp.log(pdb) - log_b), 0, 1)
    # divided by B and by scale = max(1, A / B): rb z^2 + [(1 - rb) - E (1 - ra)] z - E ra = 0, E = A / B
    kappa = jnp.clip(log_a - log_b, -MODEL_STEP_MAX, MODEL_STEP_MAX)
    scale = jnp.exp(jnp.maximum(kappa, 0))
    big = jnp.exp(kappa - jnp.maximum(kappa, 0))          # E / scale, in (0, 1]
    c2, c1, c0 = rb / scale, (1 - rb) / scale - big * (1 - ra), big * ra
    root = jnp.sqrt(c1 * c1 + 4 * c2 * c0)
    # the positive root, in the form without cancellation for either sign of c1
    z = jnp.where(c1 < 0, (root - c1) / jnp.maximum(2 * c2, jnp.finfo(s.dtype).tiny), 2 * c0 / (c1 + root))
    step = jnp.clip(jnp.log(z), -MODEL_STEP_MAX, MODEL_STEP_MAX)
    step = jnp.where(jnp.isfinite(step), step, 0)
    return step if groups is None else step[groups]
