"""Padded lengths and batch plans shared by the LLM judges (private).

Few compiled shapes: sequence lengths are rounded up to :data:`BUCKETS`, batch
sizes to powers of two, and rows sorted by length are cut into the batches that
run the fewest padded tokens (:func:`plan_batches`).
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["BUCKETS", "CPU_BUCKETS", "bucket", "batch_sizes", "plan_batches", "ACCELERATOR_BATCH_COST",
           "AUTO_ROWS", "decoder_row_bytes", "rows_that_fit"]

BUCKETS = (16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
           1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336,
           16384, 20480, 24576, 28672, 32768)
"""Padded lengths (steps of at most 1.25x above 64 tokens): few compiled shapes, little padding."""

CPU_BUCKETS = tuple(range(8, 256, 8)) + tuple(b for b in BUCKETS if b >= 256)
"""Finer padded lengths for the judge's per-comparison rows on a CPU (steps of 8 tokens up to 256): the B
batches of a SummEval article (16 candidates, batch 8) run 4% more padded tokens than real instead of 8.5%
(planned with :data:`~jaxrank.judges._forward.CPU_CALL_COST`: 12 -> 14 compiled shapes; issue 33)."""


def bucket(n: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket length ``>= n`` (multiples of the largest bucket beyond it)."""
    for b in buckets:
        if n <= b:
            return b
    top = buckets[-1]
    return -(-n // top) * top


def batch_sizes(batch_size: int, multiple: int = 1) -> tuple[int, ...]:
    """The padded batch sizes a judge compiles for: powers of two below ``batch_size``, and ``batch_size``,
    each rounded up to a multiple of ``multiple`` (the devices a batch is split over by rows)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    return tuple(sorted({-(-min(batch_size, 1 << k) // multiple) * multiple
                         for k in range(batch_size.bit_length() + 1)}))


ACCELERATOR_BATCH_COST = 2048
"""Tokens' worth of fixed cost per forward call that :class:`PromptJudge` charges on a GPU or TPU
(``batch_cost="auto"``), so batches are few and full. Measured on an H100
(``benchmarks/judge_gpu.py``, 240 comparisons per SummEval article): planned for padded tokens
alone (batch 16), an article took about 130 calls of ~2 rows and Qwen2.5-1.5B's shapes judged 131
comparisons/s; with this cost (batch 240), 6 calls and 271/s (Llama-3-8B's: 63 -> 101/s at batch
48; 133/s at batch 120 with bfloat16 caches). On a
CPU the cost is the tokens alone (0): SmolLM2-135M on 2 shared cores (load 5-10) spent 6.2 and 6.3 ms per
padded B token with the plan (8 candidates: 38 calls, 9% padding) and with full batches (batch_cost=1000:
8 calls, 55% padding), so full batches were 1.5x slower (2.0x with 6 candidates; issue 33)."""


def plan_batches(lengths: Sequence[int], batch_size: int,
                 buckets: Sequence[int] = BUCKETS, *, batch_cost: int = 0,
                 multiple: int = 1) -> list[tuple[int, int, int]]:
    """Cut rows sorted by length into consecutive batches that run the fewest padded tokens.

    A batch of rows ``start:stop`` runs ``b * bucket(lengths[stop - 1])`` tokens,
    ``b`` the smallest of :func:`batch_sizes` holding its ``stop - start`` rows
    (the rest are filler copies). Dynamic programming over the cut points
    minimises the sum, ``C(e) = min_{s} C(s) + b(e - s) * bucket(lengths[e - 1]) + batch_cost``,
    ties going to fewer batches; fixed chunks of ``batch_size`` instead pad a
    long row's bucket onto every row of its chunk and fill a short last chunk
    (41% more tokens than real on a SummEval article, against 8% planned; the
    cost per token of a forward pass hardly depends on the batch size on CPU).

    Args:
        lengths: ``[n]`` row lengths, ascending.
        batch_size: most rows per batch.
        buckets: the padded lengths (:func:`bucket`).
        batch_cost: tokens' worth of fixed cost charged per batch (a forward
            call's overhead; 0: padded tokens alone).
        multiple: padded batch sizes are multiples of it (:func:`batch_sizes`:
            a batch split over ``multiple`` devices by rows).

    Returns:
        ``[(start, stop, b), ...]`` covering ``0:n`` in order.

    Raises:
        ValueError: ``lengths`` not ascending, ``batch_size < 1``, ``batch_cost < 0`` or ``multiple < 1``.
    """
    if batch_cost < 0:
        raise ValueError(f"batch_cost must be >= 0, got {batch_cost}")
    sizes = batch_sizes(batch_size, multiple)
    n = len(lengths)
    if any(lengths[k] > lengths[k + 1] for k in range(n - 1)):
        raise ValueError("lengths must be sorted ascending")
    cost = [(0, 0)] + [None] * n           # (padded tokens, batches) of the best plan of rows 0:e
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)
    for e in range(1, n + 1):
        t = bucket(lengths[e - 1], buckets)
        for s in range(max(0, e - batch_size), e):
            b = next(x for x in sizes if x >= e - s)
            c = (cost[s][0] + b * t + batch_cost, cost[s][1] + 1)
            if cost[e] is None or c < cost[e]:
                cost[e], cut[e] = c, (s, b)
    plan, e = [], n
    while e:
        s, b = cut[e]
        plan.append((s, e, b))
        e = s
    return plan[::-1]


AUTO_ROWS = (8, 16, 32, 64, 96, 128, 192, 256)
"""The batch sizes ``PromptJudge(batch_size="auto")`` picks from on an accelerator (few compiled shapes)."""


def decoder_row_bytes(config, cache_slots: int, new_tokens: int, cache_itemsize: int, *, width: int = 1,
                      fused_attention: bool = True) -> int:
    """Device bytes one batch row of a cached decoder forward holds at its peak (an estimate, from above).

    ``2 L S K Dh c`` for the row's copy of its cached keys and values (``S`` slots, ``c`` bytes each),
    ``2 L T K Dh 4`` for the new keys and values the layers stack in float32, one layer's float32
    transients ``T (4 D + 3 F + H Dh)`` (residual, norms, the MLP's gate, up and product, queries), the
    materialised attention scores ``3 H T (S + T) 4`` unless the kernel is fused, and the logits read at
    ``width`` positions, ``width V 4``.
    """
    L, K, Dh = config.num_hidden_layers, config.num_key_value_heads, config.head_dim
    H, D, F, V = config.num_attention_heads, config.hidden_size, config.intermediate_size, config.vocab_size
    s, t = int(cache_slots), int(new_tokens)
    total = 2 * L * s * K * Dh * int(cache_itemsize) + 2 * L * t * K * Dh * 4
    total += 4 * t * (4 * D + 3 * F + H * Dh) + 4 * width * V
    if not fused_attention:
        total += 3 * 4 * H * t * (s + t)
    return int(total)


def rows_that_fit(row_bytes: int, free_bytes: int, *, fraction: float = 0.6, sizes=AUTO_ROWS) -> int:
    """The largest of ``sizes`` whose rows take at most ``fraction`` of ``free_bytes`` (the smallest if none does)."""
    if row_bytes < 1:
        raise ValueError(f"row_bytes must be >= 1, got {row_bytes}")
    limit = fraction * max(int(free_bytes), 0) / row_bytes
    fit = [b for b in sizes if b <= limit]
    return fit[-1] if fit else sizes[0]
