"""The prompt-scoring baseline: ask for a 1-10 score, sample answers, parse them (METHODS.md §1).

:class:`PromptScoringJudge` (llm-comparative-assessment §4.3.2): ask for a
1-10 score, generate up to 5 tokens (temperature 1.0 in the paper; greedy with
``temperature=0``) and parse the first number in 1..10 (:func:`parse_score`);
the score is the mean over ``num_samples`` answers. Its prompts are built and
cut to the model window as :class:`~jaxrank.judges.GEvalJudge`'s are
(:mod:`jaxrank.judges.pointwise`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, Sequence

import numpy as np

from jaxrank.judges._pointwise_checks import check_prompt_text, check_texts, fixed
from jaxrank.judges._pointwise_base import _CAND, _CTX, PointwiseResult, _PointwiseBase
from jaxrank.judges.sampling import parser_key
from jaxrank.judges.textgen import SAMPLING_SCHEME, check_sampling, check_seed, generate_texts, row_keys

__all__ = ["PromptScoringJudge", "parse_score", "scoring_prompt", "FALLBACK_SCORE"]

FALLBACK_SCORE = 5.5
"""Score given to an answer with no number in 1..10: the middle of the scale."""

# ----------------------------------------------------------------------------- parsing
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10}
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?|\b(?:" + "|".join(_WORDS) + r")\b", re.IGNORECASE)


def parse_score(text: str, low: float = 1, high: float = 10) -> float | None:
    """The first number in ``[low, high]`` of a generated answer, else ``None``.

    Numbers are written digits (``"7"``, ``"7.5"``, ``"-3"``) or the English
    words one..ten; numbers outside the range are skipped, so
    ``"Score: 8/10"`` gives 8, ``"10"`` gives 10, ``"ten"`` gives 10, ``"11"``,
    ``"0"`` and ``""`` give ``None`` (the judge then uses its fallback, counted
    as a failure), ``"11, I mean 9"`` gives 9.
    """
    for m in _NUMBER.finditer(text or ""):
        tok = m.group(0).lower()
        v = float(_WORDS[tok]) if tok in _WORDS else float(tok)
        if low <= v <= high:
            return v
    return None


# ------------------------------------------------------------------ sampling, shared with SampledGEvalJudge
def check_sampled(judge, *, num_samples, temperature, top_p, max_new_tokens, fallback, fallback_none: bool = False):
    """Check the sampling settings of a judge that samples and parses answers (``judge.decoder`` known).

    Raises:
        ValueError: naming the argument: ``num_samples < 1``, a bad ``temperature``, ``top_p`` or
            ``max_new_tokens`` (:func:`~jaxrank.judges.textgen.check_sampling`), a ``fallback`` that is not a
            finite number (or ``None`` where ``fallback_none``).
        NotImplementedError: a t5 model with ``temperature > 0`` (t5 decodes greedily only).
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    check_sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    if not (fallback_none and fallback is None) and (
            isinstance(fallback, bool) or not isinstance(fallback, (int, float, np.number))
            or not np.isfinite(fallback)):
        raise ValueError(f"fallback must be a finite number{' or None' if fallback_none else ''}, "
                         f"got {fallback!r}")
    if not judge.decoder and temperature > 0:
        raise NotImplementedError(f"t5 generation is greedy only: {type(judge).__name__} with a t5 model "
                                  "needs temperature=0")


def sample_scores(judge, context: str, candidates: Sequence[str], pairs):
    """Sample ``judge.num_samples`` answers per candidate and parse them with ``judge.parser``.

    Candidate ``c``'s sample ``s`` is generated from its prompt ``pairs[c]`` (``(prefix_ids, suffix_ids)``)
    with its own key ``row_keys(judge.seed, (context, c, s))``, so it does not depend on the batching or on the
    other candidates; ``judge.batch_size`` candidates (times ``num_samples`` rows) go to each
    :func:`~jaxrank.judges.textgen.generate_texts` call.

    Returns:
        ``(texts, values, parsed)``: the answers ``[N][K]`` (tuples), the parsed scores ``[N, K]`` float64
        (``nan`` where ``parsed`` is false) and ``parsed`` ``[N, K]`` bool (the parser gave a number).
    """
    k, n = judge.num_samples, len(candidates)
    rows = [p + s for p, s in pairs for _ in range(k)]
    keys = row_keys(judge.seed, [(context, c, s) for c in candidates for s in range(k)])
    texts = generate_texts(judge.lm, rows, batch_rows=judge.batch_size * k, max_new_tokens=judge.max_new_tokens,
                           temperature=judge.temperature, top_p=judge.top_p, keys=keys)
    values, parsed = np.full(len(texts), np.nan), np.zeros(len(texts), bool)
    for r, t in enumerate(texts):
        v = judge.parser(t)
        if v is not None:
            values[r], parsed[r] = float(v), True
    grouped = tuple(tuple(texts[r * k:(r + 1) * k]) for r in range(n))
    return grouped, values.reshape(n, k), parsed.reshape(n, k)


# ------------------------------------------------------------------------ prompt scoring
def scoring_prompt(aspect: str, *, kind: str = "summary", source: str = "article") -> str:
    """A simple 1-10 scoring prompt (llm-comparative-assessment §4.3.2 style): ``{context}``, ``{candidate}``."""
    return (f"{source.capitalize()}: {{context}}\n\n{kind.capitalize()}: {{candidate}}\n\n"
            f"Score the {aspect} of the {kind} on a scale from 1 to 10, where 1 is the worst and 10 is "
            "the best. Answer with the score only.")


class PromptScoringJudge(_PointwiseBase):
    """The prompt-scoring baseline: ask for a 1-10 score, generate, parse (llm-comparative-assessment §4.3.2).

    Each candidate gets ``num_samples`` answers of at most ``max_new_tokens``
    tokens (the paper: 5 tokens, temperature 1.0); each is parsed with
    ``parser`` (default :func:`parse_score`, the first number in 1..10), an
    unparsable answer counting ``fallback`` (default 5.5, the middle of the
    scale) and one ``failure``; the score is the mean over the samples. Sample
    ``s`` of a candidate samples with its own key, ``fold_in(PRNGKey(seed),
    hash(context, candidate, s))`` (:func:`~jaxrank.judges.textgen.row_keys`), so
    a candidate's answers do not depend on the batching or on the other candidates.

    The store key (:attr:`template_key`) covers every setting that changes the
    scores: the prompt (aspect, text, answer prefix, system message, chat),
    the sampling (temperature, ``top_p``, ``max_new_tokens``, ``num_samples``,
    seed, scheme) and the reading (parser, fallback); the model and window are
    in :attr:`fingerprint`. These settings are read-only (assigning one raises
    ``AttributeError``): build a new judge to change one.

    Args:
        model: a :class:`~jaxrank.models.loading.LoadedModel` or a name / path.
        aspect: the quality asked about (``"coherence"``).
        text: the user message with ``{context}`` and ``{candidate}`` (default :func:`scoring_prompt`).
        kind, source: words used by the default prompt ("summary", "article").
        chat, system: chat template use and system message.
        temperature: 0 for greedy decoding (T5 supports only 0).
        top_p: nucleus mass.
        max_new_tokens: answer length limit.
        num_samples: answers per candidate.
        batch_size: prompts per :func:`generate` call.
        seed: PRNG seed, an int in ``[0, 2**32)``.
        fallback: the score of an unparsable answer.
        parser: ``str -> float | None``.
        answer_prefix: text after the prompt (default ``"Score:"`` without a chat template, else none).
        max_length: context window.

    Raises:
        ValueError: ``num_samples < 1``, ``max_new_tokens < 1``, a negative or infinite
            ``temperature``, ``top_p`` outside ``(0, 1]``, a non-finite ``fallback``, a ``seed`` that is not
            an int in ``[0, 2**32)``, or a
            ``text`` without ``{candidate}`` or with ``{context}`` twice or after ``{candidate}``.
        NotImplementedError: a T5 model with ``temperature > 0``.
    """

    aspect = fixed("aspect", "The quality asked about.")
    text = fixed("text", "The user message, with ``{context}`` and ``{candidate}``.")
    answer_prefix = fixed("answer_prefix", "The text after the prompt, where the answer starts.")
    temperature = fixed("temperature", "The sampling temperature (0: greedy).")
    top_p = fixed("top_p", "The nucleus mass.")
    max_new_tokens = fixed("max_new_tokens", "The answer length limit.")
    num_samples = fixed("num_samples", "Answers per candidate.")
    seed = fixed("seed", "The PRNG seed.")
    fallback = fixed("fallback", "The score of an unparsable answer.")
    parser = fixed("parser", "``str -> float | None``, the answer's score.")

    def __init__(self, model, *, aspect: str, text: str | None = None, kind: str = "summary",
                 source: str = "article", chat: bool | None = None, system: str | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 5, num_samples: int = 1,
                 batch_size: int = 8, seed: int = 0, fallback: float = FALLBACK_SCORE,
                 parser: Callable[[str], float | None] | None = None, answer_prefix: str | None = None,
                 max_length: int | None = None):
        super().__init__(model, chat=chat, system=system, batch_size=batch_size, max_length=max_length)
        check_sampled(self, num_samples=num_samples, temperature=temperature, top_p=top_p,
                      max_new_tokens=max_new_tokens, fallback=fallback)
        seed = check_seed(seed)
        self._aspect = aspect
        self._text = text or scoring_prompt(aspect, kind=kind, source=source)
        check_prompt_text(self.text, "text")
        self._temperature, self._top_p = float(temperature), float(top_p)
        self._max_new_tokens, self._num_samples = int(max_new_tokens), int(num_samples)
        self._seed, self._fallback = seed, float(fallback)
        self._parser = parser or parse_score
        prefix = ("" if self.chat else "Score:") if answer_prefix is None else answer_prefix
        if not isinstance(prefix, str):
            raise ValueError(f"answer_prefix must be a string or None, got {type(prefix).__name__}")
        self._answer_prefix = prefix
        self._full = self._wrap(self.text.replace("{context}", _CTX).replace("{candidate}", _CAND), prefix)
        self._frame = self._split(self._full)
        self._suffix_extra = []
        self._extra_tokens = self.max_new_tokens

    @property
    def template_key(self) -> str:
        """The store's template key: ``score-ASPECT-HASH``, the hash over every setting that changes the
        scores (the prompt text, answer prefix, system message, chat, temperature, ``top_p``,
        ``max_new_tokens``, ``num_samples``, seed, sampling scheme, fallback and the parser's
        :func:`~jaxrank.judges.sampling.parser_key`); ``batch_size`` does not change them."""
        how = {"aspect": self.aspect, "text": self.text, "answer_prefix": self.answer_prefix,
               "system": self.system, "chat": self.chat, "temperature": self.temperature, "top_p": self.top_p,
               "max_new_tokens": self.max_new_tokens, "num_samples": self.num_samples, "seed": self.seed,
               "sampling": SAMPLING_SCHEME, "fallback": self.fallback, "parser": parser_key(self.parser)}
        h = hashlib.sha1(repr(sorted(how.items())).encode()).hexdigest()[:10]
        aspect = re.sub(r"[^\w-]+", "_", str(self.aspect)).strip("_") or "aspect"
        return f"score-{aspect}-{h}"

    def score(self, context: str, candidates: Sequence[str]) -> PointwiseResult:
        """Mean parsed score of ``num_samples`` answers per candidate (``failures`` counts the fallbacks).

        Raises:
            ValueError: an empty candidate, a ``context`` or candidate that is not a string (or ``candidates``
                a string), or a prompt that cannot fit even without the context.
        """
        check_texts(context, candidates)
        if len(candidates) == 0:
            return PointwiseResult(np.zeros(0, np.float64), None, False, 0, ())
        pairs, truncated = self._pairs(context, candidates)
        grouped, values, parsed = sample_scores(self, context, candidates, pairs)
        scores = np.where(parsed, values, self.fallback).mean(1)
        share = parsed.astype(np.float32).mean(1)
        return PointwiseResult(scores, None, truncated, int((~parsed).sum()), grouped, label_mass=share)
