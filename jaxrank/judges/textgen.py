"""Batched text generation for the judges that read answers (prompt scoring, sampling, G-Eval's steps).

Prompts are token-id lists; they go to
:func:`~jaxrank.models.llama.generate` (decoders: greedy or
temperature / nucleus sampling, left-padded rows) or to T5's greedy
``generate``, in batches whose row count is rounded up to a power of two and
whose length is rounded up to a :func:`~jaxrank.judges.pairwise.bucket`, so
few shapes are compiled.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._buckets import bucket
from jaxrank.models.llama import generate
from jaxrank.models.loading import load_model

__all__ = ["generate_texts", "pad_rows", "sample_key", "as_loaded"]


def as_loaded(model):
    """A :class:`~jaxrank.models.loading.LoadedModel` as it is, anything else through ``load_model``."""
    if not hasattr(model, "model"):
        model = load_model(model)
    return model


def pad_rows(rows: Sequence[Sequence[int]], batch: int, pad_id: int, *, left: bool):
    """``(ids, mask)`` ``[b, bucket(longest)]``, ``b`` = ``len(rows)`` rounded up to a power of two
    (at most ``batch``); the extra rows copy row 0 (few static shapes)."""
    n_rows = max(len(rows), min(batch, 1 << (len(rows) - 1).bit_length()))
    length = bucket(max(map(len, rows)))
    ids = np.full((n_rows, length), pad_id, np.int32)
    mask = np.zeros((n_rows, length), bool)
    for r in range(n_rows):
        x = rows[r] if r < len(rows) else rows[0]
        sl = slice(length - len(x), length) if left else slice(0, len(x))
        ids[r, sl], mask[r, sl] = x, True
    return ids, mask


def generate_texts(lm, rows: Sequence[Sequence[int]], *, batch_rows: int, max_new_tokens: int,
                    temperature: float, top_p: float, key) -> list[str]:
    """Completions of token prompts, ``batch_rows`` per :func:`generate` call (left-padded).

    Decoders sample (or decode greedily at ``temperature == 0``); T5 decodes
    greedily only. Batch ``b`` uses ``fold_in(key, b)``: deterministic given ``key``.
    """
    tok, model = lm.tokenizer, lm.model
    decoder = lm.architecture != "t5"
    if not decoder and temperature > 0:
        raise NotImplementedError("t5 generation is greedy only; use temperature=0 with a t5 model")
    eos = set(lm.eos_token_ids) | ({tok.eos_token_id} if getattr(tok, "eos_token_id", None) is not None else set())
    if not decoder and tok.eos_token_id is not None:
        rows = [list(r) + [tok.eos_token_id] for r in rows]
    out: list[str] = []
    for b, start in enumerate(range(0, len(rows), batch_rows)):
        chunk = rows[start:start + batch_rows]
        ids, mask = pad_rows(chunk, batch_rows, lm.pad_token_id, left=decoder)
        if decoder:
            g = generate(model, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                         rng=jax.random.fold_in(key, b), eos_id=sorted(eos) or None, pad_id=lm.pad_token_id)
            toks, lens = np.asarray(g.tokens), np.asarray(g.lengths)
        else:
            toks = np.asarray(model.generate(jnp.asarray(ids), jnp.asarray(mask), max_new_tokens,
                                             tok.eos_token_id))
            lens = np.full(len(toks), toks.shape[1])
        for r in range(len(chunk)):
            seq = []
            for t in toks[r, :lens[r]].tolist():
                if t in eos:
                    break
                seq.append(t)
            out.append(tok.decode(seq, skip_special_tokens=True))
    return out


def sample_key(seed: int, *texts: str) -> jax.Array:
    """A PRNG key from ``seed`` and the texts judged (stateless: same call, same samples)."""
    key = jax.random.PRNGKey(seed)
    for t in texts:
        key = jax.random.fold_in(key, zlib.crc32(t.encode("utf-8")) & 0x7FFFFFFF)
    return key
