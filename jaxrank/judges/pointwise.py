"""Pointwise LLM judges: G-Eval, and the base of the prompt-scoring baseline (METHODS.md §1).

* :class:`GEvalJudge` (g-eval §2, eq. 1): the prompt holds the task, the
  criteria, evaluation steps written once by the LLM itself (auto
  chain-of-thought), the source text and the candidate, and ends with the
  form field (``- Coherence:``). The score is the probability-weighted mean

  ``score = sum_s P(s) * s``,  ``P(s) = exp(l_s) / sum_s' exp(l_s')``

  over the score tokens ``"1" .. "5"`` (``l_s`` their next-token logits at the
  last real position, so the probabilities are renormalised over those tokens
  only). Decoders share the context: everything before the candidate
  (chat header, task, criteria, steps, source text) is encoded once per
  context into a key/value cache, and each candidate runs only its own tokens.
* :class:`~jaxrank.judges.prompt_scoring.PromptScoringJudge` (llm-comparative-assessment
  §4.3.2), the sampled 1-10 prompt-scoring baseline, is built on the same base
  in :mod:`jaxrank.judges.prompt_scoring`.
* :func:`pointwise_comparisons`: ``p = sigmoid(scale * (s_i - s_j))``, so
  pointwise scores feed the comparison / aggregation core.

Prompts longer than the model window keep the candidate and the instructions
whole and cut the context (the source text) from its end, with a warning
saying by how many tokens: each candidate's prompt by as much as it alone
needs (:func:`~jaxrank.judges._truncation.fit_each`), so a candidate's score
never depends on the other candidates scored with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._pointwise_checks import check_pairs_scale, check_steps, check_template, check_texts, fixed
from jaxrank.judges._truncation import fit_each
from jaxrank.judges.pairwise import Judgement, check_pairs
from jaxrank.judges.prompts import PointwiseTemplate
from jaxrank.judges.reading import (MIN_LABEL_MASS, _common_prefix, check_label_mass, cut_text, format_top_tokens,
                                    label_lead, read_tokens, whole_text_ids)
from jaxrank.judges.textgen import as_loaded, generate_texts, pad_rows
from jaxrank.models.llama_config import judge_max_length
from jaxrank.models.loading import GENERATIVE

__all__ = ["GEvalJudge", "PointwiseResult", "pointwise_comparisons", "scores_judgement"]

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
DEFAULT_STEP_TOKENS = 128
"""The length limit of generated evaluation steps (``max_step_tokens``) by default."""


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


# ------------------------------------------------------------------------------ G-Eval
class GEvalJudge(_PointwiseBase):
    """G-Eval (g-eval §2): probability-weighted form-filling score with auto chain-of-thought.

    ``score = sum_s P(s) s`` (g-eval eq. 1) over the template's score tokens,
    ``P`` the next-token probabilities renormalised over those tokens, read at
    the last real position from the full vocabulary, whose share
    ``sum_s P(s)`` is the judgement's label mass. The evaluation steps are generated once, greedily, from
    ``template.steps_request`` the first time they are needed, kept in
    :attr:`steps` and pasted into every scoring prompt. Small models may write
    poor steps (SmolLM2-135M repeats the criteria): read :attr:`steps`, and
    pass ``steps=`` (e.g. the G-Eval paper's) where they are useless.

    Args:
        model: a :class:`~jaxrank.models.loading.LoadedModel` or a name / path for ``load_model``.
        template: a :class:`~jaxrank.judges.prompts.PointwiseTemplate` (``pointwise_template(aspect)``).
        chat: wrap prompts in the model's chat template (default: when it has one).
        system: optional system message.
        batch_size: candidates per forward pass.
        steps: evaluation steps to use instead of generating them.
        max_step_tokens: length limit of the generated steps.
        max_length: context window (default: the model's ``max_position_embeddings``; 512 for T5); above
            the model's window it is refused for LongRoPE and warned about otherwise
            (:func:`~jaxrank.models.llama_config.judge_max_length`).
        min_label_mass: the score tokens' share of the model's answer (full
            vocabulary, :attr:`PointwiseResult.label_mass`) below which the judge
            warns once, naming the model's top next tokens
            (:class:`~jaxrank.judges.reading.LabelMassWarning`).
        strict: raise :class:`~jaxrank.judges.reading.LabelMassError` instead.

    The settings that shape the prompt or the scores (``template``, ``chat``,
    ``system``, ``max_step_tokens``, ``max_length``) are read-only: build a new
    judge to change one (assigning raises ``AttributeError``); :attr:`steps` may
    be set, which scores again.

    Raises:
        ValueError: no tokenizer, an encoder-only model, ``template`` not a
            :class:`~jaxrank.judges.prompts.PointwiseTemplate`, a ``template.text``
            without ``{candidate}`` or with ``{context}`` twice or after ``{candidate}``,
            an empty ``template.scores`` or score tokens that are not single distinct
            tokens, ``min_label_mass`` outside ``[0, 1]``, ``max_step_tokens < 1``,
            ``batch_size < 1``, or a ``max_length`` past a LongRoPE model's window.
    """

    template = fixed("template", "The :class:`~jaxrank.judges.prompts.PointwiseTemplate`.")
    max_step_tokens = fixed("max_step_tokens", "The length limit of generated evaluation steps.")

    def __init__(self, model, template: PointwiseTemplate, *, chat: bool | None = None, system: str | None = None,
                 batch_size: int = 8, steps: str | None = None, max_step_tokens: int = DEFAULT_STEP_TOKENS,
                 max_length: int | None = None, min_label_mass: float = MIN_LABEL_MASS, strict: bool = False):
        super().__init__(model, chat=chat, system=system, batch_size=batch_size, max_length=max_length)
        if not isinstance(min_label_mass, (int, float)) or not 0.0 <= float(min_label_mass) <= 1.0:
            raise ValueError(f"min_label_mass must be a number in [0, 1], got {min_label_mass!r}")
        self.min_label_mass, self.strict, self._mass_warned = float(min_label_mass), bool(strict), False
        self._template = check_template(template)
        check_steps(steps, max_step_tokens)
        self._max_step_tokens = int(max_step_tokens)
        self._steps = steps
        self._steps_given = steps is not None
        self.step_generations = 0
        self.score_values = np.asarray(template.scores, np.float64)
        self._score_common, self.score_token_ids = self._score_tokens()

    def _score_tokens(self):
        tok = self.lm.tokenizer
        last = self._wrap(self.template.text, "")[-1:]            # the character the answer follows
        lead = label_lead(last) if self.decoder else ""           # " 7" after ":", "7" after "(" or a newline
        eos = set(self.lm.eos_token_ids) | ({tok.eos_token_id} if tok.eos_token_id is not None else set())
        ids = [[t for t in tok(lead + str(s), add_special_tokens=False)["input_ids"] if t not in eos]
               for s in self.template.scores]
        d = 0
        while d < min(map(len, ids)) and len({x[d] for x in ids}) == 1:
            d += 1
        firsts = [x[d] if d < len(x) else None for x in ids]
        if None in firsts or len(set(firsts)) != len(firsts):
            raise ValueError(f"scores {self.template.scores} do not tokenise to distinct single tokens "
                             f"({ids}); G-Eval reads one token per score")
        if d and not self.decoder:
            raise ValueError("score tokens share leading tokens; a t5 judge reads only the first decoder token")
        return ids[0][:d], np.asarray(firsts, np.int32)

    @property
    def steps(self) -> str:
        """The evaluation steps (generated by the model on first use, then reused)."""
        if self._steps is None:
            self._steps = self.generate_steps()
        return self._steps

    @steps.setter
    def steps(self, value: str) -> None:
        check_steps(value, optional=False)
        self._steps, self._steps_given = value, True
        self.__dict__.pop("_frame_cache", None)
        self._cache_key = self._cache_val = None        # scores made with the former steps

    @property
    def template_key(self) -> str:
        """The store's template key: the template's key, then a hash of what else changes the scores where it is
        not the default: the steps when given (``steps=`` or set), the system message, ``max_step_tokens`` of
        generated steps. Generated steps are the model's greedy answer, fixed by the fingerprint, so the key is
        the same before and after they are written."""
        how = ((("steps", self._steps) if self._steps_given else ()) + (("system", self.system) if self.system else ())
               + (("max_step_tokens", self.max_step_tokens)
                  if not self._steps_given and self.max_step_tokens != DEFAULT_STEP_TOKENS else ()))
        return self.template.key + (f"-{hashlib.sha1(repr(how).encode()).hexdigest()[:6]}" if how else "")

    def generate_steps(self) -> str:
        """Ask the model for the evaluation steps (greedy, ``max_step_tokens``); does not cache them."""
        ids = self._encode(self._wrap(self.template.steps_request, ""), True)
        self.step_generations += 1
        text = generate_texts(self.lm, [ids], batch_rows=1, max_new_tokens=self.max_step_tokens,
                              temperature=0.0, top_p=1.0, key=jax.random.PRNGKey(0))[0].strip()
        if not text:
            warnings.warn("the model wrote empty evaluation steps", stacklevel=2)
        return text

    @property
    def _full(self) -> str:
        cached = self.__dict__.get("_frame_cache")
        if cached is None or cached[0] != self._steps:
            t = self.template
            values = {"context": _CTX, "candidate": _CAND, "criteria": t.criteria}
            if "{steps}" in t.text:   # a template without chain of thought never asks for the steps
                values["steps"] = self.steps
            msg = _fill(t.text, values)     # one pass: criteria or steps holding a placeholder are kept as written
            full = self._wrap(msg, "")
            cached = (self._steps, full, self._split(full))
            self.__dict__["_frame_cache"] = cached
        return cached[1]

    @property
    def _frame(self):
        self._full
        return self.__dict__["_frame_cache"][2]

    @property
    def _suffix_extra(self) -> list[int]:
        return list(self._score_common)

    def score(self, context: str, candidates: Sequence[str]) -> PointwiseResult:
        """G-Eval scores of every candidate of one context.

        Returns:
            :class:`PointwiseResult` with ``scores [N]`` in ``[min, max]`` of the
            score scale and ``probs [N, S]``.

        Raises:
            ValueError: an empty candidate, a ``context`` or candidate that is
                not a string (or ``candidates`` a string), or a prompt that
                cannot fit even without the context.
        """
        check_texts(context, candidates)
        if len(candidates) == 0:
            s = len(self.score_values)
            return PointwiseResult(np.zeros(0, np.float64), np.zeros((0, s), np.float64), False)
        pairs, truncated = self._pairs(context, candidates)
        logp, top_ids, top_probs = self._read_decoder(pairs) if self.decoder else self._read_t5(pairs)
        logp = logp.astype(np.float64)
        z = np.exp(logp - logp.max(-1, keepdims=True))
        probs = z / z.sum(-1, keepdims=True)
        mass = np.exp(logp).sum(-1)
        self._check_mass(mass, top_ids, top_probs)
        return PointwiseResult(probs @ self.score_values, probs, truncated, label_mass=mass.astype(np.float32),
                               top_ids=top_ids, top_probs=top_probs)

    def _check_mass(self, mass, top_ids, top_probs) -> None:
        if mass.size and (mass < self.min_label_mass).any():
            worst = int(np.argmin(mass))
            given = check_label_mass(
                mass, threshold=self.min_label_mass, strict=self.strict, warn=not self._mass_warned,
                who=f"judge {self.name}, template {self.template.name}",
                labels=[str(s) for s in self.template.scores],
                top=format_top_tokens(self.lm.tokenizer, top_ids[worst], top_probs[worst]),
                remedy="Its score renormalises over answers the model hardly gives: end the prompt where the "
                       "model writes the score, or use another model.", stacklevel=4)
            self._mass_warned = self._mass_warned or given

    def _read_decoder(self, pairs):
        """Score tokens' log-probabilities ``[N, S]`` (full vocabulary) and the top tokens, one row each; the
        rows sharing a prefix (a context cut alike) read one cache of it."""
        groups: dict[tuple, list[int]] = {}
        for r, (p, _) in enumerate(pairs):
            groups.setdefault(tuple(p), []).append(r)
        if len(groups) == 1:
            return self._read_prefix(pairs[0][0], [s for _, s in pairs])
        out = None
        for prefix, idx in groups.items():
            got = self._read_prefix(list(prefix), [pairs[r][1] for r in idx])
            if out is None:
                out = tuple(np.zeros((len(pairs),) + x.shape[1:], x.dtype) for x in got)
            for dst, x in zip(out, got):
                dst[idx] = x
        return out

    def _read_prefix(self, prefix, suffixes):
        """:meth:`_read_decoder` of rows sharing ``prefix``: the context once, then each row's suffix."""
        model = self.lm.model
        pid, pmask = pad_rows([prefix], 1, self.lm.pad_token_id, left=False)
        cache = model.prefill(pid, pmask)                      # the context, once
        tokens = jnp.asarray(self.score_token_ids)
        out, bs = [], self.batch_size
        for start in range(0, len(suffixes), bs):
            chunk = suffixes[start:start + bs]
            ids, mask = pad_rows(chunk, bs, self.lm.pad_token_id, left=False)
            last = model.extend(cache, ids, mask).last_hidden
            out.append([np.asarray(x)[:len(chunk)] for x in read_tokens(model.logits_at(last), tokens)])
        return tuple(np.concatenate(x) for x in zip(*out))

    def _read_t5(self, pairs):
        model = self.lm.model
        tokens = jnp.asarray(self.score_token_ids)
        eos = self.lm.tokenizer.eos_token_id
        rows = [p + s + ([eos] if eos is not None else []) for p, s in pairs]
        out, bs = [], self.batch_size
        for start in range(0, len(rows), bs):
            chunk = rows[start:start + bs]
            ids, mask = pad_rows(chunk, bs, self.lm.pad_token_id, left=False)
            enc = model.encode(jnp.asarray(ids), jnp.asarray(mask))
            logits = model.decoder_logits_first_step(enc, jnp.asarray(mask))
            out.append([np.asarray(x)[:len(chunk)] for x in read_tokens(logits, tokens)])
        return tuple(np.concatenate(x) for x in zip(*out))
