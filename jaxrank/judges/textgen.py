"""Batched text generation for the judges that read answers (prompt scoring, sampling, G-Eval's steps).

Prompts are token-id lists; they go to
:func:`~jaxrank.models.llama.generate` (decoders: greedy or
temperature / nucleus sampling, left-padded rows) or to T5's greedy
``generate``, in batches whose row count is rounded up to a power of two and
whose length is rounded up to a :func:`~jaxrank.judges.pairwise.bucket`, so
few shapes are compiled.

Sampled rows can carry their own PRNG keys (:func:`row_keys`, from the seed and
a stable hash of what the row judges): a row's answer is then the same whatever
else is in its batch, whatever the batch size, and in whichever call it comes.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._buckets import bucket
from jaxrank.models.llama import generate as _llama_generate
from jaxrank.models.loading import load_model

__all__ = ["generate_texts", "pad_rows", "sample_key", "row_keys", "text_hash32", "as_loaded", "generate",
           "check_sampling", "check_seed", "SEED_LIMIT", "SAMPLING_SCHEME"]

SEED_LIMIT = 2 ** 32
"""Seeds are 32-bit: ``jax.random.PRNGKey`` keeps a seed's low 32 bits, so a larger one would sample another
seed's answers under its own store key (:func:`check_seed`)."""


SAMPLING_SCHEME = "rk1"
"""Marks the store keys of judges whose sampled rows take :func:`row_keys` (one key per row from the seed and
what the row judges); answers stored before under one key per batch are other samples and are not reused."""


def check_sampling(*, temperature, top_p, max_new_tokens) -> None:
    """Raise ``ValueError`` naming the argument when a sampling setting is unusable.

    ``temperature`` must be a finite number >= 0 (0: greedy), ``top_p`` in
    ``(0, 1]`` (0 or less keeps no token), ``max_new_tokens`` an integer >= 1.
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.number)) \
            or not 0.0 <= float(temperature) < float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.number)) or not 0.0 < float(top_p) <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int in ``[0, 2**32)`` (:data:`SEED_LIMIT`), or a ``ValueError`` naming ``name`` (a bool, a
    float, a negative seed or one of 2**32 or more: ``PRNGKey`` would wrap it onto a smaller seed's samples, and
    2**63 overflows)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or \
            not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(f"{name} must be an int in [0, 2**32) (a 32-bit PRNG seed: a larger one would wrap onto "
                         f"a smaller one's samples), got {seed!r}")
    return int(seed)


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


def generate(model, ids, mask=None, *, max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
             rng=None, eos_id=None, pad_id: int = 0):
    """:func:`jaxrank.models.llama.generate` (``rng``: one key, or one key per row ``[B, 2]``).

    With per-row keys (and ``temperature > 0``) row ``r`` samples step ``s`` with
    ``fold_in(rng[r], s)`` alone, inside the model's one compiled decoding loop, so
    its answer does not depend on the batch it is in.
    """
    rows = rng is not None and np.ndim(rng) == 2
    if rows and np.shape(rng)[0] != np.shape(ids)[0]:
        raise ValueError(f"rng holds {np.shape(rng)[0]} keys for {np.shape(ids)[0]} rows")
    # greedy decoding reads no key
    return _llama_generate(model, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                           rng=None if rows and temperature <= 0 else rng, eos_id=eos_id, pad_id=pad_id)


def generate_texts(lm, rows: Sequence[Sequence[int]], *, batch_rows: int, max_new_tokens: int,
                   temperature: float, top_p: float, key=None, keys=None) -> list[str]:
    """Completions of token prompts, ``batch_rows`` per :func:`generate` call (left-padded).

    Decoders sample (or decode greedily at ``temperature == 0``); T5 decodes
    greedily only. ``keys`` (one PRNG key per row, :func:`row_keys`): each row
    samples with its own key, so its answer is the same in any batch. Else one
    ``key``: batch ``b`` uses ``fold_in(key, b)``, deterministic given ``key`` and
    the batching.
    """
    if (key is None) == (keys is None):
        raise ValueError("give exactly one of key (one PRNG key) and keys (one key per row)")
    if keys is not None and len(keys) != len(rows):
        raise ValueError(f"keys holds {len(keys)} keys for {len(rows)} rows")
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
            if keys is not None:          # the padding rows (copies of row 0) take row 0's key
                r = np.arange(len(ids))
                rng = jnp.asarray(keys)[np.where(r < len(chunk), r, 0) + start]
            else:
                rng = jax.random.fold_in(key, b)
            g = generate(model, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                         rng=rng, eos_id=sorted(eos) or None, pad_id=lm.pad_token_id)
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


def text_hash32(parts: Sequence) -> int:
    """A stable 32-bit hash of a sequence of texts / numbers (length-prefixed, so ``("ab", "c")`` and
    ``("a", "bc")`` differ); the same in every process (unlike Python's ``hash``)."""
    h = hashlib.sha256()
    for x in parts:
        b = str(x).encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)
    return int.from_bytes(h.digest()[:4], "little")


def row_keys(seed: int, rows: Sequence[Sequence]) -> jax.Array:
    """One PRNG key per row ``[N, 2]``: ``fold_in(PRNGKey(seed), text_hash32(row))``.

    A row is what one sample judges, e.g. ``(context, text A, text B, sample index)``:
    its key, hence its answer, depends on that and the seed only.

    Raises:
        ValueError: ``seed`` outside ``[0, 2**32)`` (:func:`check_seed`).
    """
    base = jax.random.PRNGKey(check_seed(seed))
    if not len(rows):
        return jnp.zeros((0,) + base.shape, base.dtype)
    h = jnp.asarray(np.array([text_hash32(r) for r in rows], np.uint32))
    return jax.vmap(lambda x: jax.random.fold_in(base, x))(h)
