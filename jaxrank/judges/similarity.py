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
the texts are packed several to a row of ``row_length`` tokens (best-fit
decreasing), each attending only to itself with its own positions
(:func:`~jaxrank.models.bert.embed_packed`: a text's embedding is the one it
has alone, up to float32 rounding), in passes of ``batch_size`` rows: one
shape, one compiled program, padding only at the rows' tails; the pipeline
(``jaxrank.assessment.judge_contexts``) calls it before judging. On the main
job (1,648 distinct texts, 24,000 comparisons; ``benchmarks/main_job_speed.py``)
that is 70 passes of 8 x 256 (3% padding). Before (until commit 2e51cd4),
texts were padded to 5 lengths (5 shapes to compile, 14% padding); before that
(until 8534c28), each context's 17 texts went in small passes of many shapes
through ``nnx.jit``, whose per-call walk of the module graph cost about
50-150 ms on a busy CPU. The encoder's arithmetic is
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
import os
import time
import warnings
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank.judges._buckets import bucket
from jaxrank.judges.pairwise import Judgement, check_pairs
from jaxrank.models import bert as st
from jaxrank.models.bert import embed_packed
from jaxrank.models.loading import load_model

__all__ = ["SimilarityJudge", "EncoderStats"]


@functools.partial(jax.jit, static_argnames=("graphdef", "num_segments", "pooling"))
def _encode(graphdef, state, ids: jax.Array, segment_ids: jax.Array, num_segments: int, pooling: str) -> jax.Array:
    """:func:`~jaxrank.models.bert.embed_packed` of the model ``(graphdef, state)``: a plain ``jax.jit`` over
    the split model, so a call flattens a pytree of arrays rather than the module graph (about 50-150 ms a
    call under ``nnx.jit`` on a busy CPU); one compiled program per ``(rows, length)``."""
    return embed_packed(nnx.merge(graphdef, state), ids, segment_ids, num_segments=num_segments, pooling=pooling)


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


def _folder_settings(model, pooling: str | None) -> tuple[str, int | None]:
    """``(pooling, max_seq_length)`` of a judge: ``pooling``, or (``None``) the model folder's
    sentence-transformers pooling (``"mean"`` without one), and the folder's ``max_seq_length`` (``None``
    without one); warns when a given ``pooling`` differs from the folder's. A folder with a module jaxrank
    does not run (``Dense`` ...) is refused whatever ``pooling`` says
    (:func:`~jaxrank.models.bert.sentence_transformer_settings`)."""
    path = getattr(model, "path", None)
    is_dir = False
    try:
        is_dir = path is not None and os.path.isdir(path)
    except TypeError:
        pass
    own, why, max_seq = "mean", None, None
    is_st = is_dir and any(os.path.exists(os.path.join(path, f))
                           for f in ("modules.json", "1_Pooling", "sentence_bert_config.json"))
    if is_st:
        _, pool_dir = st.read_modules(path)
        max_seq = st.read_max_seq_length(path)
        try:
            own = st.read_pooling(path, pool_dir)
        except ValueError as e:
            if pooling is None:
                raise ValueError(f"{path}: {e}; pass pooling= to choose one") from e
            why = str(e)
    if pooling is None:
        return own, max_seq
    if why is not None:
        warnings.warn(f"pooling={pooling!r}: the sentence-transformers pooling of {path} cannot be read ({why}); "
                      "the embeddings may not be the model's own", stacklevel=3)
    elif pooling != own and is_st:
        warnings.warn(f"pooling={pooling!r} differs from {path}'s sentence-transformers pooling {own!r}: "
                      "the embeddings are not the model's own (pooling=None uses the folder's)", stacklevel=3)
    return pooling, max_seq


class SimilarityJudge:
    """``p = sigmoid(k (cos(A, context) - cos(B, context)))`` with sentence embeddings.

    Each distinct text is embedded once and kept (by its text) for later calls: judging every context
    of a data set embeds its contexts and candidates once each, and :meth:`prefetch` embeds them all
    in one plan of full passes of one shape (texts packed into rows; compiled once per process).

    Args:
        model: a BERT-family :class:`~jaxrank.models.loading.LoadedModel` or a
            name / path for ``load_model`` (default ``"minilm-l6"``).
        k: the slope of the link (see the module notes for the default).
        max_length: tokens per text (longer texts are cut at the end); ``None`` (the default): the
            model folder's sentence-transformers ``max_seq_length`` (``sentence_bert_config.json``; 256
            for MiniLM, which was trained with it), at most ``max_position_embeddings``, else 256.
        batch_size: rows per encoder pass; a row holds ``row_length`` tokens (``max_length`` rounded up
            to a bucket of :data:`~jaxrank.judges._buckets.BUCKETS`), as many texts as fit (at most
            ``texts_per_row``), so a pass reads ``batch_size * row_length`` tokens of any mix of texts.
        pooling: ``"mean"``, ``"cls"``, ``"max"`` or ``"mean_sqrt_len"``; ``None`` (the default): the
            model folder's sentence-transformers pooling (``1_Pooling/config.json``, through
            :func:`~jaxrank.models.bert.sentence_transformer_settings`; ``"mean"`` where the folder has
            none, as for a bare BERT checkpoint or a GGUF file). A pooling given that differs from the
            folder's warns (the embeddings are then not the model's own).
        cache_size: embeddings kept (the oldest are dropped beyond it; 384 floats each for MiniLM).

    Attributes:
        row_length: tokens per packed row (``max_length``'s bucket).
        texts_per_row: most texts in one row (``row_length // 4``; the output's texts per row).
        stats: an :class:`EncoderStats`, where the encoding time went.
        chunk: comparisons per ``compare`` call and per store write in
            :func:`~jaxrank.assessment.judge_contexts` (4096: once its texts are embedded a
            context's comparisons take microseconds, so each context is one store write; at 32,
            the store's ``fsync`` per write was 11 s of the main job).

    Raises:
        ValueError: a model that is not a BERT encoder or has no tokenizer; ``k <= 0``; a
            ``batch_size``, ``max_length`` or ``cache_size`` out of range; an unknown ``pooling``;
            ``pooling=None`` on a folder whose sentence-transformers pooling jaxrank does not run
            (several modes at once, ``lasttoken``, ...); a sentence-transformers folder with a module
            other than ``Transformer``, ``Pooling`` and ``Normalize`` (e.g. ``Dense``).
    """

    chunk = 4096

    def __init__(self, model="minilm-l6", *, k: float = 20.0, max_length: int | None = None, batch_size: int = 8,
                 pooling: str | None = None, cache_size: int = 65536):
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
        if pooling not in (None, "mean", "cls", "max", "mean_sqrt_len"):
            raise ValueError(f"pooling must be None, 'mean', 'cls', 'max' or 'mean_sqrt_len', got {pooling!r}")
        pooling, max_seq = _folder_settings(model, pooling)
        limit = int(getattr(model.config, "max_position_embeddings", 512))
        from_folder = max_length is None and max_seq is not None
        if max_length is None:
            max_length = 256 if max_seq is None else min(max_seq, limit)
        if not 2 < max_length <= limit:
            raise ValueError(f"max_length must be in (2, {limit}], got {max_length}"
                             + (" (the folder's max_seq_length)" if from_folder else ""))
        self.lm = model
        self.k, self.max_length, self.batch_size, self.pooling = float(k), int(max_length), int(batch_size), pooling
        self.cache_size = int(cache_size)
        self._limit = limit
        self.row_length = bucket(self.max_length)
        self.texts_per_row = max(1, self.row_length // 4)
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

    def _pack(self, lengths: Sequence[int]) -> list[list[int]]:
        """Texts (indices into ``lengths``) packed into rows of :attr:`row_length` tokens, at most
        :attr:`texts_per_row` a row: best-fit decreasing (longest text first, into the fullest row it
        fits, else a new row). Rows come out in the order they were opened."""
        cap, most = self.row_length, self.texts_per_row
        rows: list[list[int]] = []
        room_of: list[list[int]] = [[] for _ in range(cap + 1)]   # room_of[r]: open rows with r tokens free
        for k in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
            n = int(lengths[k])
            if not 0 <= n <= cap:
                raise ValueError(f"a text of {n} tokens does not fit a row of {cap}")
            free = next((r for r in range(n, cap + 1) if room_of[r]), None)
            if free is None:
                row, free = len(rows), cap
                rows.append([])
            else:
                row = room_of[free].pop()
            rows[row].append(k)
            if len(rows[row]) < most:
                room_of[free - n].append(row)
        return rows

    def _plan(self, lengths: Sequence[int]) -> list[tuple[int, list[list[int]]]]:
        """The encoder passes ``(rows, packed rows of text indices)``: :meth:`_pack`'s rows cut into passes of
        ``batch_size`` rows, every pass ``batch_size x row_length`` (the last one filled up with empty rows),
        so a job compiles one shape; a job of fewer rows than ``batch_size`` runs one pass of a power of two
        of rows."""
        rows = self._pack(lengths)
        if not rows:
            return []
        nb = self.batch_size if len(rows) >= self.batch_size else 1 << (len(rows) - 1).bit_length()
        return [(nb, rows[i:i + nb]) for i in range(0, len(rows), nb)]

    def _encode_missing(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> None:
        """Embed the texts not yet cached (each distinct one once) and cache them."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not todo:
            return
        tokens = self._tokens(todo)
        same: dict[tuple, list[int]] = {}            # texts with the same token ids share one embedding
        for k, (x, _) in enumerate(tokens):          # (bit for bit: two such texts tie exactly, as unpacked)
            same.setdefault(tuple(x), []).append(k)
        group = {ks[0]: ks for ks in same.values()}
        pad_id, length, most = self.lm.pad_token_id, self.row_length, self.texts_per_row
        pending = None

        def collect(item):
            packed, out = item
            t0 = time.perf_counter()
            e = np.asarray(out, np.float32)
            self.stats.wait_s += time.perf_counter() - t0
            done = 0
            for r, row in enumerate(packed):
                for s, k in enumerate(row):
                    for m in group[k]:
                        self._cache[todo[m]] = (e[r, s].copy(), tokens[m][1])
                    done += len(group[k])
            if progress is not None:
                progress(done)

        reps = list(group)
        plan = [(nb, [[reps[i] for i in row] for row in packed])
                for nb, packed in self._plan([len(tokens[k][0]) for k in reps])]
        for nb, packed in plan:
            ids = np.full((nb, length), pad_id, np.int32)
            seg = np.zeros((nb, length), np.int32)
            for r, row in enumerate(packed):
                at = 0
                for s, k in enumerate(row):
                    x = tokens[k][0]
                    ids[r, at:at + len(x)], seg[r, at:at + len(x)] = x, s + 1
                    at += len(x)
            t0 = time.perf_counter()
            out = _encode(self._graph, self._state, jnp.asarray(ids), jnp.asarray(seg), most, self.pooling)
            self.stats.dispatch_s += time.perf_counter() - t0
            self.stats.passes += 1
            self.stats.shapes.add((nb, length))
            self.stats.tokens += int((seg > 0).sum())
            self.stats.padded_tokens += nb * length
            if pending is not None:            # the previous pass's results, while this one runs
                collect(pending)
            pending = (packed, out)
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
