"""Embedding-similarity pairwise judge: a cheap, LLM-free baseline (issue 3).

Each text is embedded with a sentence encoder (BERT family, e.g. MiniLM-L6:
mask-aware mean of the last hidden state, L2-normalised, as
sentence-transformers does), and a candidate's score is its cosine similarity
to the context, ``c_x = cos(e(x), e(context))``. A comparison turns the gap
into a probability with a Bradley-Terry link:

``p = P(A better) = sigmoid(k * (c_A - c_B))``.

Each distinct text is embedded once and kept by its text, so judging all
``N (N - 1)`` ordered pairs costs at most ``N + 1`` encodes, and a text met
again (in another context, or a rerun in the same process) costs none.
:meth:`SimilarityJudge.prefetch` embeds the texts of many contexts in one plan:
sorted by length, padded to a few lengths of ``BUCKETS`` (chosen to trade
padding against compiling another shape, :data:`COMPILE_COST_TOKENS`), in full
passes, one compiled program per ``(rows, length)``; the pipeline
(``jaxrank.assessment.judge_contexts``) calls it before judging. On the main
job (1,648 distinct texts, 24,000 comparisons; ``benchmarks/main_job_speed.py``)
this halved the judging's CPU time (128 -> 66 CPU s): before, each context's 17
texts went in small passes of many shapes (dozens of compiles) through
``nnx.jit``, whose per-call walk of the module graph cost about 50-150 ms on a
busy CPU; now 79 full passes of 5 shapes, and the encoder's arithmetic is
nearly all that is left. ``p`` is exactly antisymmetric:
``p(a, b) = 1 - p(b, a)``.

Choice of ``k`` (default 20): on SummEval with MiniLM-L6 (first 10
articles), summary-article cosines lie in [0.51, 0.97] and the gaps between
two summaries of one article have a standard deviation of 0.12 and a
maximum of 0.39; ``k = 20`` maps a typical gap (0.1) to ``p = 0.88`` and the
largest gap to ``p = 0.9996``, so ``p`` stays strictly inside (0, 1) in
float32 (``sigmoid`` saturates there only beyond gaps of about 0.8) while
still spreading over the interval. The ranking does not depend on ``k``
(it only matters for soft aggregators and calibration).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank.judges._buckets import BUCKETS, bucket
from jaxrank.judges.pairwise import Judgement, check_pairs
from jaxrank.models.bert import embed
from jaxrank.models.loading import load_model

__all__ = ["SimilarityJudge", "EncoderStats", "COMPILE_COST_TOKENS"]

COMPILE_COST_TOKENS = 4096
"""What compiling one more encoder shape costs, in tokens' worth of encoding: the plan of
:meth:`SimilarityJudge.prefetch` pads texts up to a longer length rather than open a length for
fewer padded tokens than this. Measured for MiniLM-L6 on 2 busy CPU cores (load 5-12,
``benchmarks/main_job_speed.py``): a shape compiles in 3-5 s, and the encoder reads 700-1,500
tokens/s."""


@functools.partial(jax.jit, static_argnames=("graphdef", "pooling"))
def _encode(graphdef, state, ids: jax.Array, mask: jax.Array, pooling: str) -> jax.Array:
    """:func:`~jaxrank.models.bert.embed` of the model ``(graphdef, state)``: a plain ``jax.jit`` over the
    split model, so a call flattens a pytree of arrays rather than the module graph (about 50-150 ms a
    call under ``nnx.jit`` on a busy CPU); one compiled program per ``(rows, length)``."""
    return embed(nnx.merge(graphdef, state), ids, mask, pooling=pooling)


@dataclasses.dataclass
class EncoderStats:
    """Where a :class:`SimilarityJudge`'s encoding time went (summed over its calls).

    Attributes:
        texts: texts encoded (each distinct text once while it is cached).
        passes: encoder calls.
        tokens: real tokens encoded.
        padded_tokens: tokens the encoder ran, padding included.
        shapes: the ``(rows, length)`` of the passes.
        tokenize_s: seconds in the tokenizer.
        dispatch_s: seconds handing passes to the encoder: tracing and compiling a shape not yet
            compiled in this process, else about a millisecond.
        wait_s: seconds waiting for the encoder's results (the encoding itself).
        cache_hits: texts asked for that were already cached.
    """

    texts: int = 0
    passes: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    shapes: set = dataclasses.field(default_factory=set)
    tokenize_s: float = 0.0
    dispatch_s: float = 0.0
    wait_s: float = 0.0
    cache_hits: int = 0


class SimilarityJudge:
    """``p = sigmoid(k (cos(A, context) - cos(B, context)))`` with sentence embeddings.

    Each distinct text is embedded once and kept (by its text) for later calls: judging every context
    of a data set embeds its contexts and candidates once each, and :meth:`prefetch` embeds them all
    in one plan of few, full, padded shapes (each compiled once per process).

    Args:
        model: a BERT-family :class:`~jaxrank.models.loading.LoadedModel` or a
            name / path for ``load_model`` (default ``"minilm-l6"``).
        k: the slope of the link (see the module notes for the default).
        max_length: tokens per text (longer texts are cut at the end; MiniLM
            was trained with 256).
        batch_size: texts per encoder pass at the full length ``max_length``; shorter texts go
            more to a pass, as many as fill ``batch_size * max_length`` tokens. Lengths are padded
            to a few of :data:`~jaxrank.judges.pairwise.BUCKETS`.
        pooling: ``"mean"`` (default), ``"cls"``, ``"max"`` or ``"mean_sqrt_len"``.
        cache_size: embeddings kept (the oldest are dropped beyond it; 384 floats each for MiniLM).

    Attributes:
        stats: an :class:`EncoderStats`, where the encoding time went.
        chunk: comparisons per ``compare`` call and per store write in
            :func:`~jaxrank.assessment.judge_contexts` (4096: once its texts are embedded a
            context's comparisons take microseconds, so each context is one store write; at 32,
            the store's ``fsync`` per write was 11 s of the main job).

    Raises:
        ValueError: a model that is not a BERT encoder or has no tokenizer; ``k <= 0``; a
            ``batch_size``, ``max_length`` or ``cache_size`` out of range.
    """

    chunk = 4096

    def __init__(self, model="minilm-l6", *, k: float = 20.0, max_length: int = 256, batch_size: int = 8,
                 pooling: str = "mean", cache_size: int = 65536):
        if not hasattr(model, "model"):
            model = load_model(model)
        if model.architecture != "bert":
            raise ValueError(f"SimilarityJudge needs a BERT-family sentence encoder, got {model.architecture}")
        if model.tokenizer is None:
            raise ValueError(f"model {model.name} has no tokenizer")
        if not k > 0:
            raise ValueError(f"k must be > 0, got {k}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        limit = int(getattr(model.config, "max_position_embeddings", 512))
        if not 2 < max_length <= limit:
            raise ValueError(f"max_length must be in (2, {limit}], got {max_length}")
        self.lm = model
        self.k, self.max_length, self.batch_size, self.pooling = float(k), int(max_length), int(batch_size), pooling
        self.cache_size = int(cache_size)
        self._limit = limit
        top = bucket(self.max_length)
        self._lengths = sorted({min(b, limit) for b in (*BUCKETS, top) if b <= top})   # the padded lengths
        self._graph, self._state = nnx.split(model.model)
        self._cache: dict[str, tuple[np.ndarray, bool]] = {}
        self._memo_key = None
        self._memo = None
        self._warned = False
        self.stats = EncoderStats()

    @property
    def name(self) -> str:
        """Judge id: the encoder name and ``k``."""
        return f"{self.lm.name}-cos-k{self.k:g}"

    @property
    def fingerprint(self) -> str:
        """What the judge is, for the store's keys: the encoder's fingerprint
        (:attr:`~jaxrank.models.LoadedModel.fingerprint`), the token limit and the pooling."""
        return f"{self.lm.fingerprint}-L{self.max_length}-{self.pooling}"

    def _tokens(self, texts: Sequence[str]) -> list[tuple[list[int], bool]]:
        """Token ids of each text (cut to ``max_length``, keeping ``[SEP]``) and whether it was cut."""
        t0 = time.perf_counter()
        enc = self.lm.tokenizer(list(texts), add_special_tokens=True, truncation=True,
                                max_length=self.max_length + 1)["input_ids"]
        out = []
        for ids in enc:
            ids = list(ids)
            if len(ids) <= self.max_length:
                out.append((ids, False))
            else:
                out.append((ids[:self.max_length - 1] + ids[-1:], True))   # keep [SEP], as truncation=True does
        self.stats.tokenize_s += time.perf_counter() - t0
        return out

    def _rows(self, length: int) -> int:
        """Texts per pass at a padded length: as many as fill ``batch_size * max_length`` tokens."""
        return max(1, self.batch_size * self.max_length // length)

    def _pad_lengths(self, lengths: Sequence[int]) -> list[int]:
        """The padded length of each text: the lengths of :data:`BUCKETS` (up to ``max_length``'s bucket)
        that cost the fewest padded tokens plus :data:`COMPILE_COST_TOKENS` per length used (a dynamic
        programme over the buckets; the longest text's bucket is always one)."""
        grid = self._lengths
        cell = [min(k for k, g in enumerate(grid) if g >= n) for n in lengths]
        counts = np.bincount(cell, minlength=len(grid)) if cell else np.zeros(len(grid), int)
        top = max(cell) if cell else 0
        best = [0.0] * (top + 1)          # best[t]: cells 0..t covered, grid[t] a chosen length
        back = [-1] * (top + 1)
        for t in range(top + 1):
            best[t], back[t] = np.inf, -1
            for p in range(-1, t):
                cost = (best[p] if p >= 0 else 0.0) + COMPILE_COST_TOKENS + grid[t] * counts[p + 1:t + 1].sum()
                if cost < best[t]:
                    best[t], back[t] = cost, p
        chosen, t = [], top
        while t >= 0:
            chosen.append(t)
            t = back[t]
        chosen = sorted(grid[c] for c in chosen)
        return [min(g for g in chosen if g >= n) for n in lengths]

    def _plan(self, lengths: Sequence[int]) -> list[tuple[int, int, list[int]]]:
        """The encoder passes ``(rows, length, text indices)``: texts sorted longest first and cut into
        passes of :meth:`_rows` of the padded length of each pass's first text; a last pass that is not
        full has a power of two of rows."""
        pad = self._pad_lengths(lengths)
        order = sorted(range(len(lengths)), key=lambda r: (-pad[r], -lengths[r], r))
        passes, start = [], 0
        while start < len(order):
            length = pad[order[start]]
            rows = self._rows(length)
            idx = order[start:start + rows]
            start += len(idx)
            if len(idx) < rows:
                rows = min(rows, 1 << (len(idx) - 1).bit_length())
            passes.append((rows, length, idx))
        return passes

    def _encode_missing(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> None:
        """Embed the texts not yet cached (each distinct one once) and cache them."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not todo:
            return
        rows = self._tokens(todo)
        pad_id = self.lm.pad_token_id
        pending = None

        def collect(item):
            idx, out = item
            t0 = time.perf_counter()
            e = np.asarray(out, np.float32)
            self.stats.wait_s += time.perf_counter() - t0
            for r, k in enumerate(idx):
                self._cache[todo[k]] = (e[r].copy(), rows[k][1])
            if progress is not None:
                progress(len(idx))

        for nb, length, idx in self._plan([len(x) for x, _ in rows]):
            ids = np.full((nb, length), pad_id, np.int32)
            mask = np.zeros((nb, length), np.int32)
            for r in range(nb):
                x = rows[idx[r] if r < len(idx) else idx[0]][0]
                ids[r, :len(x)], mask[r, :len(x)] = x, 1
            t0 = time.perf_counter()
            out = _encode(self._graph, self._state, jnp.asarray(ids), jnp.asarray(mask), self.pooling)
            self.stats.dispatch_s += time.perf_counter() - t0
            self.stats.passes += 1
            self.stats.shapes.add((nb, length))
            self.stats.tokens += sum(len(rows[k][0]) for k in idx)
            self.stats.padded_tokens += nb * length
            if pending is not None:            # the previous pass's results, while this one runs
                collect(pending)
            pending = (idx, out)
        collect(pending)
        self.stats.texts += len(todo)
        while len(self._cache) > self.cache_size:          # the oldest first (dicts keep insertion order)
            del self._cache[next(iter(self._cache))]

    def prefetch(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> None:
        """Embed every distinct text of ``texts`` not yet cached, all in one plan of encoder passes.

        ``jaxrank.assessment.judge_contexts`` calls it with the texts of every context it is about to
        judge, so the passes are full and of few shapes, whatever the contexts.

        Args:
            texts: the texts (repeats are embedded once).
            progress: told the number of texts of each finished pass (after first the number
                already cached).
        """
        cached = len(set(t for t in texts if t in self._cache))
        if progress is not None and cached:
            progress(cached)
        self._encode_missing(texts, progress)

    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, bool]:
        """``(embeddings [n, H] float32, any_truncated)`` of the texts, unit length (cached by text)."""
        if not len(texts):
            return np.zeros((0, 0), np.float32), False
        self.stats.cache_hits += sum(t in self._cache for t in texts)
        self._encode_missing(texts)
        got = [self._cache.get(t) for t in texts]
        if any(g is None for g in got):                    # more texts than the cache holds
            self._cache.clear()
            got = []
            for t in texts:
                self._encode_missing([t])
                got.append(self._cache[t])
        return np.stack([e for e, _ in got]).astype(np.float32), any(t for _, t in got)

    def _embedded(self, context: str, candidates: Sequence[str]):
        key = (context, tuple(candidates))
        if self._memo_key != key:
            e, truncated = self.embed([context, *candidates])
            if truncated and not self._warned:
                warnings.warn(f"texts longer than {self.max_length} tokens were cut at the end", stacklevel=3)
                self._warned = True
            self._memo, self._memo_key = (e[0], e[1:], truncated), key
        return self._memo

    def scores(self, context: str, candidates: Sequence[str]) -> np.ndarray:
        """``cos(candidate, context)`` ``[N]`` (float64; embeddings are unit vectors)."""
        if len(candidates) == 0:
            return np.zeros(0, np.float64)
        ctx, cand, _ = self._embedded(context, candidates)
        return cand.astype(np.float64) @ ctx.astype(np.float64)

    def compare(self, context: str, candidates: Sequence[str], i, j) -> Judgement:
        """``p = sigmoid(k (cos_i - cos_j))`` for every comparison of one context.

        Returns:
            :class:`Judgement` with ``p [R]`` and ``logits = k * (cos_i, cos_j)`` (softmax gives ``p``).

        Raises:
            ValueError: an index out of range or an empty candidate text.
        """
        i, j = check_pairs(candidates, i, j)
        if i.size == 0:
            return Judgement(np.zeros(0, np.float32), False, np.zeros((0, 2), np.float32))
        c = self.scores(context, candidates)
        truncated = self._memo[2]
        d = self.k * (c[i] - c[j])
        p = 0.5 * (1.0 + np.tanh(0.5 * d))
        return Judgement(p.astype(np.float32), bool(truncated),
                         (self.k * np.stack([c[i], c[j]], -1)).astype(np.float32))
