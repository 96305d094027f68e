"""The model side of a :class:`~jaxrank.judges.pairwise.PromptJudge` (private): padded batches through the
key/value cache levels, read from full-vocabulary logits (:func:`~jaxrank.judges.reading.read_continuations`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._buckets import BUCKETS, CPU_BUCKETS, bucket, decoder_row_bytes, plan_batches, rows_that_fit
from jaxrank.judges.reading import TOP_K, read_continuations
from jaxrank.models.llama import QuantisedWeight
from jaxrank.models.llama_config import attention_kernel

__all__ = ["padded", "batches", "read_decoder", "read_t5", "rows_per_call", "A_BATCH_COST", "CPU_CALL_COST"]

A_BATCH_COST = 0
"""Tokens' worth of fixed cost per call charged when the A parts are planned on a CPU (:func:`a_caches`)."""

CPU_CALL_COST = 32
"""Tokens' worth of fixed cost per B call charged by the plan on a CPU (``batch_cost == 0``, one device),
whose B rows are padded to :data:`~jaxrank.judges._buckets.CPU_BUCKETS`. Measured (issue 33, SmolLM2-135M,
one B extend against a 640-slot cache, process CPU time): 3.76 ms per token at 96 tokens a call, 3.28 at
208, 3.06 at 416, 2.95 at 832, i.e. ~88 ms a call (the scan's per-layer weight copies, the weights read
from memory once a call) plus ~2.85 ms a token: ~31 tokens' worth. ``0`` with ``BUCKETS``: the plan before."""


def rows_per_call(judge, model, cache_slots: int, new_tokens: int) -> int:
    """The batch size of one call: ``judge.batch_size``, or with ``batch_size="auto"`` on an accelerator the
    largest of :data:`~jaxrank.judges._buckets.AUTO_ROWS` whose rows (:func:`decoder_row_bytes`) fit in
    60% of the device memory free now (rows split over a mesh's data axis, heads over its model axis).

    On a mesh whose model axis does not divide ``num_key_value_heads`` the cache and the new keys and
    values are held whole on every device (:func:`~jaxrank.models.partition.kv_heads_split`), and the
    logits read where it does not divide the vocabulary: those terms count whole per device, the rest
    divided by the model axis."""
    if not getattr(judge, "auto_batch", False):
        return judge.batch_size
    mesh = getattr(model, "mesh", None)
    device = mesh.devices.flat[0] if mesh is not None else jax.local_devices()[0]
    stats = device.memory_stats() or {}
    if "bytes_limit" not in stats:
        return judge.batch_size
    free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    config = judge.lm.config
    wq = judge.lm.model.weights()["wq"]
    fused = attention_kernel(config, None if isinstance(wq, QuantisedWeight) else wq.dtype) == "fused"
    itemsize = np.dtype(judge.cache_dtype or np.float32).itemsize
    width = judge.reading.width
    row = decoder_row_bytes(config, cache_slots, new_tokens, itemsize, width=width, fused_attention=fused)
    data, split = getattr(model, "data_size", 1), getattr(model, "model_size", 1)
    whole = 0                                 # bytes of a row every device holds in full
    if split > 1 and config.num_key_value_heads % split:
        # the cache row and the new keys and values, as decoder_row_bytes counts them
        whole += 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * (
            int(cache_slots) * itemsize + int(new_tokens) * 4)
    if split > 1 and config.vocab_size % split:
        whole += 4 * width * config.vocab_size
    return data * rows_that_fit(whole + -(-(row - whole) // split), free)


def padded(judge, rows: list[list[int]], b: int, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` right-padded to ``[b, length]`` (default ``bucket(longest)``) ids and mask; rows past
    ``len(rows)`` copy row 0."""
    length = bucket(max(map(len, rows))) if length is None else length
    ids = np.full((b, length), judge.lm.pad_token_id, np.int32)
    mask = np.zeros((b, length), bool)
    for r, x in enumerate(rows):
        ids[r, :len(x)] = x
        mask[r, :len(x)] = True
    ids[len(rows):], mask[len(rows):] = ids[0], mask[0]    # filler rows: static shapes
    return ids, mask

def batches(judge, rows: list[list[int]]):
    """Padded ``[b, T]`` batches in order: ``T`` and ``b`` (up to ``batch_size``) rounded up to buckets."""
    bs = judge.batch_size
    for start in range(0, len(rows), bs):
        chunk = rows[start:start + bs]
        yield len(chunk), *padded(judge, chunk, min(bs, 1 << (len(chunk) - 1).bit_length()))

def read_decoder(judge, pairs, progress=None):
    """``(log P(L_A), log P(L_B)) [R, 2]``, top ids and probabilities ``[R, k]`` of cache-split rows.

    Two cache levels: the context once, then context + candidate A once per
    A. Each comparison runs its B part and the labels' appended tokens
    (:meth:`~jaxrank.judges.reading.LabelContinuations.rows`: one row when
    the labels differ in their last token only, else one per label); the
    full-vocabulary logits at the positions a row reads give the labels'
    summed log-probabilities (:func:`~jaxrank.judges.reading.read_continuations`).
    Rows sharing an A run in batches cut by :func:`plan_batches` (sorted by
    length, fewest padded tokens plus ``batch_cost`` a call; on a CPU the rows
    padded to :data:`~jaxrank.judges._buckets.CPU_BUCKETS` and
    :data:`CPU_CALL_COST` charged a call). When calls have a cost (``batch_cost > 0``,
    as on a GPU) and a batch holds more rows than one A has comparisons, the
    A parts are extended ``batch_size // (comparisons per A)`` at a time and
    their rows share batches, each row reading its own A's cache
    (:meth:`~jaxrank.models.llama.KVCache.rows`); otherwise each A's batch-1
    cache is shared by its rows without a copy, and the A parts run padded to
    their own length bucket (:func:`a_caches`). When the labels are read at one
    position (``width == 1``) the B batches run the last layer at each row's
    last token only (``extend(last_only=True)``).

    On a mesh (``PromptJudge(mesh=)``) ``judge.runner`` is a
    :class:`~jaxrank.models.partition.ShardedLlama`: the same calls with the
    weights and caches split over the model axis by heads, the batches (padded
    to multiples of the data axis) over the data axis by rows; the batch-1
    prefix and A caches are replicated over the data axis.
    """
    model = judge.runner
    multiple = getattr(model, "data_size", 1)
    rows_of = rows_of_model(model)
    prefix = pairs[0][0]
    if any(p != prefix for p, _, _ in pairs):            # one context per call
        raise AssertionError("comparisons of one call must share their prefix")
    subs = judge.reading.rows()
    width = judge.reading.width
    plen = bucket(len(prefix))
    alen = bucket(max(len(a) for _, a, _ in pairs))
    pid = np.full((1, plen), judge.lm.pad_token_id, np.int32)
    pmask = np.zeros((1, plen), bool)
    pid[0, :len(prefix)] = prefix
    pmask[0, :len(prefix)] = True
    cache = model.prefill(pid, pmask, capacity=plen + alen, cache_dtype=judge.cache_dtype)
    n = len(pairs)
    logp = np.zeros((n, 2), np.float64)
    top_ids = np.zeros((n, TOP_K), np.int32)
    top_probs = np.zeros((n, TOP_K), np.float32)
    groups: dict[tuple, list[int]] = {}
    for r, (_, a, _) in enumerate(pairs):
        groups.setdefault(tuple(a), []).append(r)
    # On a CPU (batch_cost 0) a call costs its tokens alone, so mixing A's gains nothing: keep each
    # A's batch-1 cache shared without copies.
    longest = bucket(max(len(b) for _, _, b in pairs) + max(len(x[0]) for x in subs))
    rows = rows_per_call(judge, model, plen + alen, longest)
    together = max(1, rows // max(1, n * len(subs) // len(groups))) if judge.batch_cost else 1
    if together > 1:                                      # A rows split evenly over the data axis
        together = -(-together // multiple) * multiple
    items = list(groups.items())
    pending: list = []
    last_only = width == 1 and getattr(model, "EXTEND_LAST_ONLY", False)
    # on a CPU a call's cost is its tokens plus a small fixed part: finer lengths, a cost per call
    cpu = judge.batch_cost == 0 and multiple == 1 and jax.default_backend() == "cpu"
    buckets, cost = (CPU_BUCKETS if cpu else BUCKETS), (CPU_CALL_COST if cpu else judge.batch_cost)

    def collect(part, out):
        lp, ti, tp = (np.asarray(x) for x in out)
        for q, (r, s) in enumerate(part):
            logp[r] += lp[q]
            if s == 0:
                top_ids[r], top_probs[r] = ti[q], tp[q]
        if progress is not None:
            progress(sum(1 for _, s in part if s == len(subs) - 1))

    for chunk, cache_a, width_a in a_caches(judge, model, cache, items, together, alen, multiple):
        owner = {r: k for k, (_, rs) in enumerate(chunk) for r in rs}
        flat = [(r, s) for r in owner for s in range(len(subs))]
        seqs = {(r, s): pairs[r][2] + subs[s][0] for r, s in flat}
        flat.sort(key=lambda rs: len(seqs[rs]))            # similar lengths share a batch
        for start, stop, b in plan_batches([len(seqs[rs]) for rs in flat], rows, buckets=buckets,
                                           batch_cost=cost, multiple=multiple):
            part = flat[start:stop]
            ids, mask = padded(judge, [seqs[rs] for rs in part], b,
                               length=bucket(max(len(seqs[rs]) for rs in part), buckets))
            pos = np.zeros((b, width), np.int32)
            tgt = np.zeros((b, 2, width), np.int32)
            val = np.zeros((b, 2, width), bool)
            for q, (r, s) in enumerate(part):
                pos[q] = np.minimum(len(pairs[r][2]) - 1 + np.arange(width), ids.shape[1] - 1)
                tgt[q], val[q] = subs[s][1], subs[s][2]
            pos[len(part):] = pos[0]
            if width_a == 1:
                ca = cache_a
            else:
                idx = np.full(b, owner[part[0][0]], np.int32)          # filler rows read row 0's A
                idx[:len(part)] = [owner[r] for r, _ in part]
                ca = rows_of(cache_a, idx)
            # one label token read: the last hidden state alone, so the last layer runs the last tokens only
            out = model.extend(ca, ids, mask, **({"last_only": True} if last_only else {}))
            # the positions a row reads are its last `width`: one label token read, the last hidden state
            logits = model.logits_at(out.last_hidden)[:, None] if width == 1 else \
                model.logits_at(out.hidden, positions=pos)
            pending.append((part, read_continuations(logits, tgt, val)))
            if len(pending) > 1:          # the device runs this batch while the host reads the last one
                collect(*pending.pop(0))
    while pending:
        collect(*pending.pop(0))
    return logp, top_ids, top_probs

def a_caches(judge, model, cache, items, together, alen, multiple):
    """``(chunk, cache_a, width_a)`` for the A parts ``items`` (``[(a_ids, rows), ...]``) after the prefix
    ``cache``: ``chunk`` the A's whose rows read ``cache_a`` (row ``k`` of it for ``chunk[k]``; a batch-1
    cache shared by all rows when ``width_a == 1``).

    ``together > 1`` (calls with a cost): ``together`` A's a call, each padded to ``alen``. On one device
    with ``together == 1`` (a CPU) the A's, sorted by length, run in the calls :func:`plan_batches` cuts with
    :data:`A_BATCH_COST` per call (cut as if padded to ``BUCKETS``, then each call padded to its own longest
    A's step of :data:`~jaxrank.judges._buckets.CPU_BUCKETS`: cut with the finer steps and no cost a call,
    the 16 A's of a SummEval article would run as 12 calls instead of 7 to save 48 of 1,472 tokens;
    longer matrix products than one A at a time, less padding than every A at ``alen``), and each A's row
    is taken out of its call's cache as a batch-1 cache, so the B batches share it without copies.
    ``A_BATCH_COST = None``: one A a call, padded to ``alen`` (before issue 33).
    """
    if together == 1 and multiple == 1 and A_BATCH_COST is not None:
        order = sorted(range(len(items)), key=lambda k: len(items[k][0]))
        for start, stop, b in plan_batches([len(items[k][0]) for k in order], judge.batch_size,
                                           batch_cost=A_BATCH_COST):
            chunk = [items[k] for k in order[start:stop]]
            t = bucket(len(chunk[-1][0]), CPU_BUCKETS if jax.default_backend() == "cpu" else BUCKETS)
            aid, amask = padded(judge, [a for a, _ in chunk], b, length=t)
            base = cache if b == 1 else rows_of_model(model)(cache, np.zeros(b, np.int32))
            cache_b = model.extend(base, aid, amask, update=True).cache
            for q, item in enumerate(chunk):
                yield [item], cache_b if b == 1 else rows_of_model(model)(cache_b, np.array([q], np.int32)), 1
        return
    for g0 in range(0, len(items), together):
        chunk = items[g0:g0 + together]
        width_a = together                                # a fixed A batch: one compiled shape
        aid = np.full((width_a, alen), judge.lm.pad_token_id, np.int32)
        amask = np.zeros((width_a, alen), bool)
        for k, (a, _) in enumerate(chunk):
            aid[k, :len(a)] = a
            amask[k, :len(a)] = True
        aid[len(chunk):], amask[len(chunk):] = aid[0], amask[0]     # filler A rows
        base = cache if width_a == 1 else rows_of_model(model)(cache, np.zeros(width_a, np.int32))
        yield chunk, model.extend(base, aid, amask, update=True).cache, width_a


def rows_of_model(model):
    """``rows(cache, index)`` of ``model`` (a sharded model's own, pinned to its shardings) or the cache's."""
    return getattr(model, "rows", None) or (lambda c, index: c.rows(index))


def read_t5(judge, rows, progress=None):
    """The decoder's first step, full vocabulary: label log-probabilities and top tokens per row."""
    model = judge.lm.model
    tgt = np.asarray(judge._label_ids, np.int32).reshape(2, 1)
    out = []
    for real, ids, mask in batches(judge, rows):
        enc = model.encode(jnp.asarray(ids), jnp.asarray(mask))
        logits = model.decoder_logits_first_step(enc, jnp.asarray(mask))[:, None]
        b = ids.shape[0]
        lp, ti, tp = read_continuations(logits, np.broadcast_to(tgt, (b, 2, 1)), np.ones((b, 2, 1), bool))
        out.append(tuple(np.asarray(x)[:real] for x in (lp, ti, tp)))
        if progress is not None:
            progress(real)
    return tuple(np.concatenate(x) for x in zip(*out))
