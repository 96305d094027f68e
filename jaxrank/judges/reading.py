"""How a judge reads the model's answer: whole-text tokens, label continuations, label mass.

A prompt judge's ``p = P(A better)`` (llm-comparative-assessment eq. 3) means
something only when the label words are what the model actually answers. This
module holds the pieces every LLM judge shares to make sure of that:

* **Whole-text tokens.** A prompt is rendered to one string and tokenised as
  a whole (:func:`whole_text_ids`), so the ids the model reads are exactly the
  tokenizer's ids of that text; the key/value cache levels are the longest
  common token prefixes of the rendered prompts (:func:`shared_split`), never
  pieces tokenised apart (which left a bare space token at piece boundaries).
* **Label continuations.** Each label is scored as the whole continuation the
  model would write after the prompt: ``log P(L_k) = sum_m log P(L_k[m] |
  prompt, L_k[:m])`` over its tokens (:class:`LabelContinuations`), so
  ``"Summary A"`` vs ``"Summary B"`` or ``" A"`` vs ``" B"`` after an answer
  prefix are read as the model writes them, and
  ``p = P(L_A) / (P(L_A) + P(L_B))``. The label is written after the prompt
  as a person writes it (:func:`label_lead`: ``"Answer: A"``, ``"(A"``,
  ``"**A"``), and a trailing space that would merge into the label's first
  token moves into the label (:func:`healed_tail`: ``"Summary "`` is read as
  ``"Summary"`` then ``" A"``).
* **Label mass.** ``P(L_A) + P(L_B)`` out of the whole vocabulary: the share of
  the model's answer that the two labels hold. Below a threshold (default
  :data:`MIN_LABEL_MASS`) the judge warns once with the model's own top next
  tokens (:class:`LabelMassWarning`); ``strict=True`` refuses
  (:class:`LabelMassError`).
* **Answer prefix.** A model that answers ``"Summary A is more coherent"``
  puts almost no mass on ``"A"`` right after the assistant header. Its own
  greedy start on a few pairs gives the words it writes before the label
  (:func:`answer_prefix_of`), which then go into the assistant turn (prefill),
  and the labels are read after them.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank._faults import Fault

__all__ = ["MIN_LABEL_MASS", "TOP_K", "LabelMassWarning", "LabelMassError", "LabelContinuations",
           "label_continuations", "label_lead", "healed_tail", "whole_text_ids", "shared_split", "cut_text", "read_continuations", "read_tokens",
           "answer_prefix_of", "naming_word", "check_label_mass", "format_top_tokens"]

MIN_LABEL_MASS = 0.5
"""Default threshold on the labels' share of the model's answer below which a judge warns (or, strict, refuses)."""

TOP_K = 5
"""How many of the model's top next tokens a judgement keeps (the answer position)."""


class LabelMassWarning(UserWarning):
    """The labels hold less of the model's answer than the judge's ``min_label_mass``."""


class LabelMassError(ValueError, Fault):
    """A strict judge refused: the labels hold less of the model's answer than ``min_label_mass``."""


# --------------------------------------------------------------------------- tokens
def whole_text_ids(tokenizer, texts: Sequence[str], *, add_special_tokens: bool) -> list[list[int]]:
    """The tokenizer's ids of each whole text (one batched call of a fast tokenizer)."""
    if not texts:
        return []
    enc = tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]
    return [list(map(int, x)) for x in enc]


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    first = rows[0]
    n = min(map(len, rows))
    for r in rows[1:]:
        k = 0
        while k < n and r[k] == first[k]:
            k += 1
        n = k
    return n


def shared_split(rows: Sequence[Sequence[int]], groups: Sequence) -> list[tuple[list[int], list[int], list[int]]]:
    """``(prefix, a_part, b_part)`` of whole-text rows: the cache levels as longest common token prefixes.

    ``prefix`` is the longest common prefix of every row (the context's cache),
    ``prefix + a_part`` the longest common prefix of the rows of one group (the
    rows with the same candidate in position A), ``b_part`` the rest; each part
    keeps at least one token (``a_part`` and ``b_part`` are never empty; a
    group whose rows part right after ``prefix`` then gets a one-token
    ``a_part`` per row), and ``prefix + a_part + b_part`` is the row, token for
    token.

    Args:
        rows: token ids of the whole prompts of one context.
        groups: a hashable group label per row.

    Raises:
        ValueError: a row of fewer than 3 tokens, or ``groups`` of another length.
    """
    if len(groups) != len(rows):
        raise ValueError(f"groups has {len(groups)} labels for {len(rows)} rows")
    if not rows:
        return []
    if min(map(len, rows)) < 3:
        raise ValueError("a prompt of fewer than 3 tokens cannot be split into cache levels")
    p = min(_common_prefix(rows), min(map(len, rows)) - 2)
    members: dict = collections.defaultdict(list)
    for r, g in enumerate(groups):
        members[g].append(r)
    cut = {}
    for g, rs in members.items():
        sub = [rows[r] for r in rs]
        cut[g] = max(p + 1, min(_common_prefix(sub), min(map(len, sub)) - 1))
    return [(list(row[:p]), list(row[p:cut[g]]), list(row[cut[g]:])) for row, g in zip(rows, groups)]


def cut_text(tokenizer, text: str, k: int) -> str:
    """The first ``k`` tokens of ``text`` as text (character offsets of a fast tokenizer, else decoding)."""
    if k <= 0:
        return ""
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        return text if k >= len(offsets) else text[:offsets[k - 1][1]]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text if k >= len(ids) else tokenizer.decode(ids[:k])


# ---------------------------------------------------------------------- continuations
@dataclasses.dataclass(frozen=True)
class LabelContinuations:
    """The token ids of the two label continuations a judge scores after the prompt.

    Attributes:
        ids: ``(L_A, L_B)``, each the tokens of one label as the model would
            write it after the prompt (leading space, shared words such as
            ``"Summary"`` included).
        texts: the two continuations as text.
    """

    ids: tuple[tuple[int, ...], tuple[int, ...]]
    texts: tuple[str, str]

    @property
    def common(self) -> tuple[int, ...]:
        """The tokens both continuations start with."""
        return tuple(self.ids[0][:_common_prefix(self.ids)])

    @property
    def single_row(self) -> bool:
        """Whether one row reads both labels: they differ in their last token only."""
        c = len(self.common)
        return len(self.ids[0]) == len(self.ids[1]) == c + 1

    @property
    def width(self) -> int:
        """Positions read per row: the longest continuation's length."""
        return max(map(len, self.ids))

    def rows(self) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
        """The rows one comparison runs after its prompt: ``(appended ids, targets [2, K], valid [2, K])``.

        Row ``r`` reads positions ``len(prompt) - 1 + m`` for ``m < K``
        (``K = width``); ``targets[k, m]`` is the token of label ``k`` read
        there, where ``valid[k, m]``. One row (the common tokens appended) when
        the labels differ only in their last token, else one row per label
        (its own tokens but the last appended).
        """
        k = self.width
        if self.single_row:
            t = np.zeros((2, k), np.int32)
            v = np.zeros((2, k), bool)
            for lab in range(2):
                t[lab, :len(self.ids[lab])] = self.ids[lab]
                v[lab, :len(self.ids[lab])] = True
            return [(list(self.common), t, v)]
        out = []
        for lab in range(2):
            t = np.zeros((2, k), np.int32)
            v = np.zeros((2, k), bool)
            t[lab, :len(self.ids[lab])] = self.ids[lab]
            v[lab, :len(self.ids[lab])] = True
            out.append((list(self.ids[lab][:-1]), t, v))
        return out


_BINDS_NEXT = frozenset("([{<\"'`*_\u201c\u2018\u00ab")
"""Characters written right before the next word, with no space: opening brackets and quotes, and markdown
emphasis (``"(A)"``, ``"**A**"``, ``"'A'"``)."""


def label_lead(prompt: str) -> str:
    """What a person writes between ``prompt`` and a label: ``" "`` after a word or punctuation (``"Answer:"``
    -> ``" A"``, ``"Summary"`` -> ``" A"``), nothing after whitespace (a newline ending a chat header) or
    after a character that binds to the next word (``"("`` -> ``"A"``, ``"**"`` -> ``"A"``; :data:`_BINDS_NEXT`)."""
    if not prompt or prompt[-1].isspace() or prompt[-1] in _BINDS_NEXT:
        return ""
    return " "


def healed_tail(tokenizer, prompt: str, labels: Sequence[str]) -> int:
    """How many trailing spaces or tabs of ``prompt`` belong to the label (token healing).

    A prompt ending in ``"Summary "`` makes the model read a lone space token,
    after which ``"A"`` is almost never written (SmolLM2: mass 0.0004, top next
    token ``'1'``): a person writing ``"Summary A"`` gets the tokens
    ``"Summary", " A"``. When the tokens of ``prompt + label`` do not start
    with the tokens of ``prompt`` (the trailing space merges into the label's
    first token), the trailing run of spaces and tabs is moved out of the
    prompt, and the label is read with its own lead (:func:`label_lead`:
    ``" A"`` after the word). A newline (a chat header's end) is never moved.

    Returns:
        The number of trailing characters to strip from ``prompt`` (0 when
        nothing merges).
    """
    n = len(prompt) - len(prompt.rstrip(" \t"))
    if n == 0 or n == len(prompt):
        return 0
    base = whole_text_ids(tokenizer, [prompt], add_special_tokens=False)[0]
    for w in labels:
        full = whole_text_ids(tokenizer, [prompt + w], add_special_tokens=False)[0]
        if full[:len(base)] != base:
            return n
    return 0


def label_continuations(tokenizer, prompt: str, labels: Sequence[str], *, add_special_tokens: bool = False,
                        drop: Sequence[int] = ()) -> LabelContinuations:
    """The two label continuations of ``prompt`` as the tokenizer writes them after its whole text.

    The label follows the prompt's last character as a person writes it
    (:func:`label_lead`): with a space after a word or punctuation
    (``"Answer:" + " A"``, ``"Summary" + " A"``), without one after a newline
    (a chat assistant header) or an opening bracket, quote or emphasis
    (``"(" + "A"``, ``"**" + "A"``). Its tokens are those of
    ``tokenize(prompt + label)`` past ``tokenize(prompt)`` when the prompt's
    own tokens are unchanged by the label; otherwise (a token merging across
    the boundary) the label's own tokens. A prompt ending in a space that
    merges with the label should be healed first (:func:`healed_tail`; a
    :class:`~jaxrank.judges.PromptJudge` renders its prompts so).

    Args:
        tokenizer: the judge's tokenizer.
        prompt: one rendered prompt (any comparison: the continuations depend
            only on its last characters).
        labels: the two label words.
        add_special_tokens: as the judge tokenises its prompts.
        drop: token ids never part of a label (end-of-sequence).

    Raises:
        ValueError: the two continuations are the same tokens.
    """
    lead = label_lead(prompt)
    base = whole_text_ids(tokenizer, [prompt], add_special_tokens=add_special_tokens)[0]
    ids = []
    for w in labels:
        full = whole_text_ids(tokenizer, [prompt + lead + w], add_special_tokens=add_special_tokens)[0]
        if full[:len(base)] == base and len(full) > len(base):
            x = full[len(base):]
        else:
            x = whole_text_ids(tokenizer, [lead + w], add_special_tokens=False)[0]
        ids.append(tuple(t for t in x if t not in set(drop)))
    if ids[0] == ids[1] or not ids[0] or not ids[1]:
        raise ValueError(f"label words {tuple(labels)!r} tokenise to {list(ids[0])} and {list(ids[1])} after the "
                         "prompt: nothing to compare; choose other label words")
    return LabelContinuations((ids[0], ids[1]), (lead + labels[0], lead + labels[1]))


@functools.partial(jax.jit, static_argnames=("top_k",))
def read_continuations(logits: jax.Array, targets: jax.Array, valid: jax.Array, *, top_k: int = TOP_K):
    """Summed label log-probabilities and the top next tokens, from full-vocabulary logits.

    ``log P(L_k) = sum_m valid[b, k, m] * log_softmax(logits[b, m])[targets[b, k, m]]``
    (the labels read as whole continuations, llm-comparative-assessment eq. 3
    with a continuation in place of one token).

    Args:
        logits: ``[B, K, V]`` logits at the ``K`` positions each row reads.
        targets: ``[B, 2, K]`` the label tokens read at those positions.
        valid: ``[B, 2, K]`` which of them belong to the label.
        top_k: how many top tokens to return at position 0 (the answer position).

    Returns:
        ``(logp [B, 2], top_ids [B, top_k], top_probs [B, top_k])``.
    """
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logp[:, None], targets[..., None], axis=-1)[..., 0]
    label_logp = jnp.sum(jnp.where(valid, picked, 0.0), axis=-1)
    top_lp, top_ids = jax.lax.top_k(logp[:, 0], top_k)
    return label_logp, top_ids, jnp.exp(top_lp)


@functools.partial(jax.jit, static_argnames=("top_k",))
def read_tokens(logits: jax.Array, token_ids: jax.Array, *, top_k: int = TOP_K):
    """Full-vocabulary log-probabilities of chosen tokens and the top next tokens (G-Eval's score tokens).

    Args:
        logits: ``[B, V]`` next-token logits.
        token_ids: ``[S]`` the tokens to read.
        top_k: how many top tokens to return.

    Returns:
        ``(logp [B, S], top_ids [B, top_k], top_probs [B, top_k])``.
    """
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    top_lp, top_ids = jax.lax.top_k(logp, top_k)
    return jnp.take(logp, token_ids, axis=-1), top_ids, jnp.exp(top_lp)


# ----------------------------------------------------------------------- the checks
def format_top_tokens(tokenizer, ids: Sequence[int], probs: Sequence[float]) -> str:
    """``'Summary' 0.874, 'To' 0.051, ...``: the model's top next tokens as text."""
    return ", ".join(f"{tokenizer.decode([int(t)])!r} {float(q):.3f}" for t, q in zip(ids, probs))


def check_label_mass(mass: np.ndarray, *, threshold: float, strict: bool, warn: bool, who: str,
                     labels: Sequence[str], top: str, remedy: str, stacklevel: int = 3) -> bool:
    """Warn (or, ``strict``, raise) when a comparison's label mass is below ``threshold``.

    Args:
        mass: ``[R]`` the labels' share of the model's answer per comparison.
        threshold: the judge's ``min_label_mass``.
        strict: raise :class:`LabelMassError` instead of warning.
        warn: whether a warning may still be given (once per judge).
        who: the judge and template, for the message.
        labels: the label continuations as text.
        top: the model's top tokens at the answer position of the lowest-mass comparison.
        remedy: what to do, appended to the message.
        stacklevel: of the warning, seen from the caller.

    Returns:
        Whether a warning was given.
    """
    mass = np.asarray(mass, np.float64)
    low = mass < threshold
    if not low.any():
        return False
    msg = (f"{who}: the labels {tuple(labels)!r} hold {np.median(mass):.1%} of the model's answer (median over "
           f"{mass.size} comparisons; {int(low.sum())} below min_label_mass={threshold:g}); the model's top next "
           f"tokens there: {top}. {remedy}")
    if strict:
        raise LabelMassError(msg)
    if warn:
        warnings.warn(msg, LabelMassWarning, stacklevel=stacklevel + 1)
        return True
    return False


# ---------------------------------------------------------------------- answer prefix
def _label_pattern(labels: Sequence[str]) -> re.Pattern:
    words = "|".join(re.escape(w.strip()) for w in sorted(labels, key=len, reverse=True))
    return re.compile(rf"(?<![0-9A-Za-z])(?:{words})(?![0-9A-Za-z])")


def naming_word(text: str, labels: Sequence[str]) -> str | None:
    """The word a prompt puts before its labels to name the candidates (``"Summary"`` in ``"Summary A:
    ... Summary B: ..."``): the most common word right before a stand-alone label, among the words found
    before both labels; ``None`` when there is none."""
    pat = _label_pattern(labels)
    before: dict[str, collections.Counter] = {}
    for m in pat.finditer(text):
        w = re.search(r"([A-Za-z][\w-]*)[ \t]+$", text[:m.start()])
        if w is not None:
            before.setdefault(m.group(0), collections.Counter())[w.group(1)] += 1
    if len(before) < 2:
        return None
    common = set.intersection(*(set(c) for c in before.values()))
    if not common:
        return None
    total = sum(before.values(), collections.Counter())
    return max(common, key=lambda w: (total[w], -text.find(w)))


def answer_prefix_of(answers: Sequence[str], labels: Sequence[str], *, max_words: int = 8) -> str | None:
    """The words a model writes before the label, from its greedy answers (the most common one).

    For each answer, the text before the first stand-alone label word
    (``"Summary A is more coherent"`` -> ``"Summary"``; ``"A"`` -> ``""``),
    whitespace stripped; answers with no label, or more than ``max_words``
    words before it, give nothing. The most common prefix wins (ties: the
    first seen). ``None`` when no answer names a label.
    """
    pat = _label_pattern(labels)
    found = []
    for text in answers:
        m = pat.search(text)
        if m is None:
            continue
        before = text[:m.start()].strip()
        if len(before.split()) <= max_words:
            found.append(before)
    if not found:
        return None
    return collections.Counter(found).most_common(1)[0][0]
