"""Embedding-similarity pairwise judge: a cheap, LLM-free baseline (issue 3).

Each text is embedded with a sentence encoder (BERT family, e.g. MiniLM-L6:
mask-aware mean of the last hidden state, L2-normalised, as
sentence-transformers does), and a candidate's score is its cosine similarity
to the context, ``c_x = cos(e(x), e(context))``. A comparison turns the gap
into a probability with a Bradley-Terry link:

``p = P(A better) = sigmoid(k * (c_A - c_B))``.

The context and every candidate are embedded once per context (one call
caches them), so judging all ``N (N - 1)`` ordered pairs costs ``N + 1``
encodes. ``p`` is exactly antisymmetric: ``p(a, b) = 1 - p(b, a)``.

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

import warnings
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from jaxrank.judges.pairwise import Judgement, bucket, check_pairs
from jaxrank.models.bert import embed
from jaxrank.models.loading import load_model

__all__ = ["SimilarityJudge"]


class SimilarityJudge:
    """``p = sigmoid(k (cos(A, context) - cos(B, context)))`` with sentence embeddings.

    Args:
        model: a BERT-family :class:`~jaxrank.models.loading.LoadedModel` or a
            name / path for ``load_model`` (default ``"minilm-l6"``).
        k: the slope of the link (see the module notes for the default).
        max_length: tokens per text (longer texts are cut at the end; MiniLM
            was trained with 256).
        batch_size: texts per encoder pass (rows padded to a power of two, lengths to buckets).
        pooling: ``"mean"`` (default), ``"cls"``, ``"max"`` or ``"mean_sqrt_len"``.

    Raises:
        ValueError: a model that is not a BERT encoder or has no tokenizer; ``k <= 0``.
    """

    def __init__(self, model="minilm-l6", *, k: float = 20.0, max_length: int = 256, batch_size: int = 32,
                 pooling: str = "mean"):
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
        limit = int(getattr(model.config, "max_position_embeddings", 512))
        if not 2 < max_length <= limit:
            raise ValueError(f"max_length must be in (2, {limit}], got {max_length}")
        self.lm = model
        self.k, self.max_length, self.batch_size, self.pooling = float(k), int(max_length), int(batch_size), pooling
        self._limit = limit
        self._memo_key = None
        self._memo = None
        self._warned = False

    @property
    def name(self) -> str:
        """Judge id: the encoder name and ``k``."""
        return f"{self.lm.name}-cos-k{self.k:g}"

    @property
    def fingerprint(self) -> str:
        """What the judge is, for the store's keys: the encoder's fingerprint
        (:attr:`~jaxrank.models.LoadedModel.fingerprint`), the token limit and the pooling."""
        return f"{self.lm.fingerprint}-L{self.max_length}-{self.pooling}"

    def _tokens(self, text: str) -> tuple[list[int], bool]:
        ids = list(self.lm.tokenizer(text, add_special_tokens=True, truncation=True,
                                     max_length=self.max_length + 1)["input_ids"])
        if len(ids) <= self.max_length:
            return ids, False
        return ids[:self.max_length - 1] + ids[-1:], True          # keep [SEP], as truncation=True does

    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, bool]:
        """``(embeddings [n, H] float32, any_truncated)`` of the texts, unit length."""
        rows = [self._tokens(t) for t in texts]
        out = np.zeros((len(texts), 0), np.float32)
        if not rows:
            return out, False
        pad = self.lm.pad_token_id
        parts = {}
        for idx in self._groups([len(x) for x, _ in rows]):
            nb = min(self.batch_size, 1 << (len(idx) - 1).bit_length())
            length = min(bucket(len(rows[idx[0]][0])), max(self._limit, len(rows[idx[0]][0])))
            ids = np.full((nb, length), pad, np.int32)
            mask = np.zeros((nb, length), np.int32)
            for r in range(nb):
                x = rows[idx[r] if r < len(idx) else idx[0]][0]
                ids[r, :len(x)], mask[r, :len(x)] = x, 1
            e = np.asarray(embed(self.lm.model, jnp.asarray(ids), jnp.asarray(mask), pooling=self.pooling))
            for r, k in enumerate(idx):
                parts[k] = e[r]
        return np.stack([parts[r] for r in range(len(rows))]).astype(np.float32), any(t for _, t in rows)

    def _groups(self, lengths: list[int]) -> list[list[int]]:
        """Indices in batches of at most ``batch_size`` texts of one length bucket (longest first)."""
        order = sorted(range(len(lengths)), key=lambda r: -lengths[r])
        groups: list[list[int]] = []
        for r in order:
            if groups and len(groups[-1]) < self.batch_size and bucket(lengths[groups[-1][0]]) == bucket(lengths[r]):
                groups[-1].append(r)
            else:
                groups.append([r])
        return groups

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
