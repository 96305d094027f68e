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

The base they share, :class:`PointwiseResult` and the conversions to comparisons live in
:mod:`jaxrank.judges._pointwise_base` and are re-exported here.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._pointwise_base import (_CAND, _CTX, PointwiseResult, _PointwiseBase, _fill, pointwise_comparisons,
                                             scores_judgement)
from jaxrank.judges._pointwise_checks import check_steps, check_template, check_texts, fixed
from jaxrank.judges.prompts import PointwiseTemplate
from jaxrank.judges.reading import MIN_LABEL_MASS, check_label_mass, format_top_tokens, label_lead, read_tokens
from jaxrank.judges.textgen import generate_texts, pad_rows

__all__ = ["GEvalJudge", "PointwiseResult", "pointwise_comparisons", "scores_judgement"]

DEFAULT_STEP_TOKENS = 128
"""The length limit of generated evaluation steps (``max_step_tokens``) by default."""


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
