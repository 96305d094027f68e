"""The base of the pointwise judges and what they return (METHODS.md §1; g-eval eq. 1).

:class:`PointwiseResult` (per-candidate scores, the distribution over the score tokens, the label mass),
:func:`pointwise_comparisons` and :func:`scores_judgement` (``p = sigmoid(scale * (s_i - s_j))``: pointwise
scores as comparisons), and ``_PointwiseBase``: the prompt frame, tokenisation and the per-candidate cut of the
context shared by :class:`~jaxrank.judges.pointwise.GEvalJudge`,
:class:`~jaxrank.judges.geval_sampling.SampledGEvalJudge` and
:class:`~jaxrank.judges.prompt_scoring.PromptScoringJudge`. Public names are re-exported by
:mod:`jaxrank.judges.pointwise`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from jaxrank.judges._pointwise_checks import check_pairs_scale, check_texts, fixed
from jaxrank.judges._truncation import fit_each
from jaxrank.judges.pairwise import Judgement, check_pairs
from jaxrank.judges.reading import _common_prefix, cut_text, whole_text_ids
from jaxrank.judges.textgen import as_loaded
from jaxrank.models.llama_config import judge_max_length
from jaxrank.models.loading import GENERATIVE

__all__ = ["PointwiseResult", "pointwise_comparisons", "scores_judgement"]

_CTX, _CAND = "\ue010", "\ue011"


def _fill(text: str, values: dict[str, str]) -> str:
    """``text`` with each ``{name}`` of ``values`` replaced by ``values[name]`` in one pass over ``text`` only.

    A value that itself holds ``{context}``, ``{candidate}``, ``{criteria}`` or ``{steps}`` (criteria, model-written
    steps, a context or a candidate) is kept as written, as
    :meth:`~jaxrank.judges.prompts.PairwiseTemplate.render` keeps its texts; placeholders not in ``values`` stay.
    """
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in values))
    return pattern.sub(lambda m: values[m.group(0)[1:-1]], text) if values else text


_GENERATIVE = GENERATIVE      # every decoder family and T5


@dataclasses.dataclass(frozen=True)
class PointwiseResult:
    """Per-candidate scores of one context.

    Attributes:
        scores: ``[N]`` the scores (G-Eval: in ``[min score, max score]``).
        probs: ``[N, S]`` G-Eval's renormalised score-token probabilities
            (``None`` for prompt scoring).
        truncated: whether the context was shortened to fit the model.
        failures: prompt scoring: samples with no parsable score (given the fallback).
        texts: prompt scoring: the generated answers, ``[N][K]``.
        label_mass: ``[N]`` G-Eval: the score tokens' share of the model's answer
            (``sum_s P(s)`` over the whole vocabulary, before renormalising);
            prompt scoring: the share of answers with a parsable score.
        top_ids, top_probs: G-Eval: the model's top next tokens ``[N, k]`` at the
            answer position and their probabilities.
    """

    scores: np.ndarray
    probs: np.ndarray | None
    truncated: bool
    failures: int = 0
    texts: tuple[tuple[str, ...], ...] | None = None
    label_mass: np.ndarray | None = None
    top_ids: np.ndarray | None = None
    top_probs: np.ndarray | None = None


def pointwise_comparisons(scores, i, j, *, scale: float = 1.0) -> np.ndarray:
    """Pairwise probabilities from pointwise scores: ``p_k = sigmoid(scale * (s_{i_k} - s_{j_k}))``.

    This is the Bradley-Terry reading of a score (PoE eq. 1), so pointwise
    judges can feed every aggregator of the comparison core; ``p`` is
    antisymmetric (``p(i, j) = 1 - p(j, i)``) up to the float32 rounding of the
    result (``|p(i, j) + p(j, i) - 1| <= 2**-24``) and, over all pairs, the average
    probability ranks candidates as the scores do. ``scale`` sets how sure a
    score gap makes the judge: on G-Eval's 1-5 scale, ``scale=1`` maps a
    one-point gap to ``p = 0.73``.

    Args:
        scores: ``[N]`` scores (or a :class:`PointwiseResult`).
        i, j: ``[R]`` integer indices of the candidates in positions A and B.
        scale: the inverse temperature (finite, > 0).

    Returns:
        ``[R]`` float32 ``P(A better)``.

    Raises:
        ValueError: ``i`` or ``j`` not integers or out of range, of different lengths, or a ``scale`` that is
            not a finite number > 0.
    """
    s = np.asarray(scores.scores if isinstance(scores, PointwiseResult) else scores, np.float64).reshape(-1)
    i, j, scale = check_pairs_scale(s.size, i, j, scale)
    d = scale * (s[i] - s[j])
    return (0.5 * (1.0 + np.tanh(0.5 * d))).astype(np.float32)     # stable sigmoid


def scores_judgement(res: PointwiseResult, i, j, *, scale: float = 1.0) -> Judgement:
    """The pairwise view of per-candidate scores ``res``: ``p = sigmoid(scale * (s_i - s_j))``
    (:func:`~jaxrank.judges.pointwise_comparisons`), ``logits`` ``scale * (s_i, s_j)`` (whose softmax is
    ``p``), ``label_mass`` the smaller of the two candidates' label masses."""
    p = pointwise_comparisons(res.scores, i, j, scale=scale)
    i, j, scale = check_pairs_scale(len(res.scores), i, j, scale)
    logits = (scale * np.stack([res.scores[i], res.scores[j]], -1)).astype(np.float32).reshape(-1, 2)
    mass = None if res.label_mass is None else np.minimum(res.label_mass[i], res.label_mass[j])
    return Judgement(p, res.truncated, logits, mass)


class _PointwiseBase:
    """Model checks, prompt rendering, tokenisation and truncation shared by the pointwise judges; the settings
    that shape the prompt or the scores (here ``chat``, ``system``, ``max_length``) are read-only."""

    _extra_tokens = 1          # tokens the prompt must leave free (1: the scored next token)
    chat = fixed("chat", "Whether prompts are wrapped in the model's chat template.")
    system = fixed("system", "The system message (or ``None``).")
    max_length = fixed("max_length", "The context window, in tokens.")

    def __init__(self, model, *, chat, system, batch_size, max_length):
        lm = as_loaded(model)
        if lm.tokenizer is None:
            raise ValueError(f"model {lm.name} has no tokenizer; a prompt judge needs one")
        if lm.architecture not in _GENERATIVE:
            raise ValueError(f"{lm.architecture} models are not generative; use SimilarityJudge for encoders")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.lm = lm
        self.decoder = lm.architecture != "t5"
        self._chat = bool(lm.chat_template) if chat is None else bool(chat)
        if self.chat and not lm.chat_template:
            raise ValueError(f"model {lm.name} has no chat template; use chat=False")
        if system is not None and not isinstance(system, str):
            raise ValueError(f"system must be a string or None, got {type(system).__name__}")
        self._system = system
        self.batch_size = int(batch_size)
        self._max_length = judge_max_length(lm.config, max_length)
        self._warned = False
        self._cache_key = None
        self._cache_val = None

    @property
    def name(self) -> str:
        """Judge id: the model name (plus ``-nochat`` when a chat model is used raw)."""
        return self.lm.name + ("" if self.chat or not self.lm.chat_template else "-nochat")

    @property
    def fingerprint(self) -> str:
        """What the judge is, for stored scores: the model's fingerprint and the context window."""
        return f"{self.lm.fingerprint}-L{self.max_length}"

    def _wrap(self, message: str, answer_prefix: str = "") -> str:
        """The user message in the chat template (or raw, followed by a blank line), then ``answer_prefix``."""
        if self.chat:
            msgs = ([{"role": "system", "content": self.system}] if self.system else []) + \
                [{"role": "user", "content": message}]
            full = self.lm.tokenizer.apply_chat_template(msgs, chat_template=self.lm.chat_template,
                                                         add_generation_prompt=True, tokenize=False)
        else:
            full = (self.system + "\n\n" if self.system else "") + message + ("\n\n" if answer_prefix else "")
        return full + answer_prefix

    def _split(self, full: str) -> tuple[str, str, str]:
        """``(before_context, between_context_and_candidate, rest)``; ``rest`` starts at the candidate."""
        if _CTX in full:
            before, rest = full.split(_CTX)
        else:
            before, rest = "", full
        between, rest = rest.split(_CAND, 1)
        if _CTX not in full:
            before, between = between, ""
        return before, between, _CAND + rest

    def _encode(self, text: str, first: bool) -> list[int]:
        special = first and self.decoder and not self.chat
        return list(self.lm.tokenizer(text, add_special_tokens=special)["input_ids"]) if text else []

    def token_ids(self, context: str, candidate: str, *, max_context_tokens: int | None = None,
                  scored_with: Sequence[str] = ()):
        """``(prefix_ids, suffix_ids)`` of one candidate's prompt, tokenised whole.

        The ids are the tokenizer's ids of the whole text :meth:`prompt_text` (then the score tokens' shared
        lead, if any), the context cut as scoring cuts it for this candidate (or to its first
        ``max_context_tokens`` tokens); ``prefix_ids`` is the part the prompt shares with any other
        candidate's for the same context (up to the token where the candidate begins), ``suffix_ids`` the rest.
        ``scored_with`` (checked, kept for callers that pass it) changes nothing: each candidate's cut is its own.
        """
        check_texts(context, [candidate])
        check_texts(context, scored_with, "scored_with")
        if max_context_tokens is None:
            max_context_tokens = self._fit(context, [candidate], warn=False)[2][0]
        return self._rows(context, [candidate], max_context_tokens)[0]

    def _texts(self, context: str, candidates: Sequence[str]) -> list[str]:
        before, between, rest = self._frame
        ctx = context if _CTX in self._full else ""
        return [before + ctx + between + rest.replace(_CAND, c) for c in candidates]

    def _rows(self, context: str, candidates: Sequence[str], max_context_tokens: int | None = None):
        """Each candidate's whole prompt as the tokenizer's ids of the whole text, split at the context's cache.

        The split point is the longest token prefix shared by every prompt of
        the context (or, for one candidate, the tokens of the text before it),
        each suffix keeping at least one token.
        """
        tok = self.lm.tokenizer
        if max_context_tokens is not None and _CTX in self._full:
            context = cut_text(tok, context, max_context_tokens)
        texts = self._texts(context, candidates)
        rows = whole_text_ids(tok, texts, add_special_tokens=self.decoder and not self.chat)
        rows_p = rows
        if len(rows) == 1:           # one prompt: its prefix is what it shares with the text before the candidate
            before, between, _ = self._frame
            head = before + (context if _CTX in self._full else "") + between
            rows_p = rows + whole_text_ids(tok, [head], add_special_tokens=self.decoder and not self.chat)
        p = min(_common_prefix(rows_p), min(map(len, rows)) - 1)
        return [(r[:p], r[p:] + self._suffix_extra) for r in rows]

    def prompt_text(self, context: str, candidate: str, *, scored_with: Sequence[str] = ()) -> str:
        """The exact text the model reads for one candidate (for inspection).

        A context too long for the model window is cut as :meth:`score` cuts it for this candidate: by as much
        as this candidate's prompt needs, whatever it is scored with (``scored_with`` is checked and kept for
        callers that pass it; it changes nothing).

        Raises:
            ValueError: a prompt that cannot fit even without the context, or texts that are not strings.
        """
        check_texts(context, [candidate])
        check_texts(context, scored_with, "scored_with")
        k = self._fit(context, [candidate], warn=False)[2][0]
        if k is not None:
            context = cut_text(self.lm.tokenizer, context, k)
        return self._texts(context, [candidate])[0] + \
            (self.lm.tokenizer.decode(self._suffix_extra) if self._suffix_extra else "")

    def _fit(self, context: str, candidates: Sequence[str], *, warn: bool):
        """``(rows, truncated, cuts)``: every candidate's ``(prefix, suffix)`` rows and the context tokens each
        keeps (``cuts[c]``, ``None``: the whole context).

        A prompt too long for the window has its context cut to its first ``cuts[c]`` tokens, by as much as
        that prompt alone needs (:func:`~jaxrank.judges._truncation.fit_each`), so a candidate's prompt, and
        its score, never depend on the other candidates of the call; a warning (once per judge, when ``warn``)
        says by how many tokens. The rows cut alike are split again among themselves, so each group shares
        one prefix (its context cache). When every prompt fits, the rows are those of the whole context.
        """
        rows, cuts, truncated = fit_each(
            self._rows(context, candidates),
            need=lambda row: len(row[0]) + len(row[1]) + self._extra_tokens, max_length=self.max_length,
            context_len=lambda: len(self._encode(context, False)) if _CTX in self._full else 0,
            rebuild=lambda k, idx: self._rows(context, [candidates[r] for r in idx], k),
            warn=warn and not self._warned, kept="candidate and instructions",
            error_tail=": the candidate and instructions alone do not fit", stacklevel=4,
            name_row=lambda r: f"candidate {r}")
        by_cut: dict = {}
        for r, k in enumerate(cuts if truncated else ()):
            by_cut.setdefault(k, []).append(r)
        for k, idx in by_cut.items():
            for r, row in zip(idx, self._rows(context, [candidates[r] for r in idx], k)):
                rows[r] = row
        return rows, truncated, cuts

    def _pairs(self, context: str, candidates: Sequence[str]):
        """Token rows for every candidate, the context cut (with a warning) if a prompt is too long."""
        empty = [k for k, c in enumerate(candidates) if not str(c).strip()]
        if empty:
            raise ValueError(f"candidates {empty} are empty; an empty text cannot be judged")
        pairs, truncated, _ = self._fit(context, candidates, warn=True)
        self._warned = self._warned or truncated
        return pairs, truncated

    def score(self, context: str, candidates: Sequence[str]) -> PointwiseResult:  # pragma: no cover
        raise NotImplementedError

    def compare(self, context: str, candidates: Sequence[str], i, j, *, scale: float = 1.0) -> Judgement:
        """Pairwise view of the scores: ``p = sigmoid(scale * (s_i - s_j))`` (:func:`pointwise_comparisons`).

        Every candidate is scored once per context (the last context's scores are
        kept, so repeated calls for one context cost nothing; they are keyed by the
        judge's ``template_key`` too, so a changed setting such as G-Eval's
        ``steps`` scores again). ``logits`` holds
        ``scale * (s_i, s_j)``, whose softmax is ``p``; ``label_mass`` the smaller
        of the two candidates' label masses.
        """
        check_texts(context, candidates)
        i, j = check_pairs(candidates, i, j)
        key = (getattr(self, "template_key", None), context, tuple(candidates))
        if self._cache_key != key:
            self._cache_val, self._cache_key = self.score(context, candidates), key
        return scores_judgement(self._cache_val, i, j, scale=scale)

