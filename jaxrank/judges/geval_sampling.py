"""G-Eval with sampling: the mean of ``n`` sampled scores (METHODS.md §1; g-eval §3.1).

For a model that gives no token probabilities, G-Eval estimates eq. 1 by
sampling: "For GPT-4, as it does not support the output of token
probabilities, we set 'n = 20, temperature = 1, top_p = 1' to sample 20
times to estimate the token probabilities" (g-eval §3.1, Implementation Details).
:class:`SampledGEvalJudge` reads :class:`~jaxrank.judges.GEvalJudge`'s prompt
(the evaluation steps, the form, the context cut as G-Eval cuts it), samples
``num_samples`` short answers per candidate, parses each into a score and
averages them. With ``temperature=1``, ``top_p=1`` and a one-token answer on a
scale of single tokens, a sample is a score ``s`` with probability ``P(s)`` (or
an unparsable token), so the mean of the parsed samples is an unbiased
estimate of eq. 1's ``sum_s P(s) s``, ``P`` renormalised over the score tokens.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Sequence

import numpy as np

from jaxrank.judges._pointwise_checks import check_texts, fixed
from jaxrank.judges.pointwise import DEFAULT_STEP_TOKENS, GEvalJudge, PointwiseResult
from jaxrank.judges.prompt_scoring import check_sampled, parse_score, sample_scores
from jaxrank.judges.prompts import PointwiseTemplate
from jaxrank.judges.reading import MIN_LABEL_MASS, check_label_mass
from jaxrank.judges.sampling import parser_key
from jaxrank.judges.textgen import SAMPLING_SCHEME, check_seed

__all__ = ["SampledGEvalJudge"]


class SampledGEvalJudge(GEvalJudge):
    """G-Eval's sampled score (g-eval §3.1: ``n = 20, temperature = 1, top_p = 1`` for GPT-4): the mean of
    ``num_samples`` sampled, parsed scores per candidate.

    The prompt is :class:`~jaxrank.judges.GEvalJudge`'s (template, evaluation
    steps, chat, the score tokens' shared lead, the context cut to fit) with
    room for ``max_new_tokens`` answer tokens kept free in the window. Each
    answer is parsed with ``parser`` (default :func:`~jaxrank.judges.parse_score`
    over ``[min(template.scores), max(template.scores)]``, the first number in
    that range). An unparsable answer is a ``failure``: with ``fallback=None`` it
    is left out of the mean (a candidate with no parsable answer gets the
    middle of the scale, ``(min + max) / 2``, and all its answers count as
    failures); with a number it counts as that score. Sample ``s`` of a
    candidate uses its own key, ``row_keys(seed, (context, candidate, s))``
    (:func:`~jaxrank.judges.textgen.row_keys`), so its answer does not depend on
    the batching or on the other candidates.

    The store key (:attr:`template_key`) is G-Eval's key plus a hash of the
    sampling settings, so sampled and probability-read scores are stored apart.
    The settings are read-only (assigning one raises ``AttributeError``):
    build a new judge to change one; :attr:`steps` may be set, as for G-Eval.

    Args:
        model, template, chat, system, batch_size, steps, max_step_tokens, max_length: as for
            :class:`~jaxrank.judges.GEvalJudge` (``batch_size`` candidates, times ``num_samples`` rows,
            per generation call).
        num_samples: answers per candidate (the paper: 20).
        temperature: the sampling temperature (the paper: 1; 0 decodes greedily, t5's only mode).
        top_p: the nucleus mass (the paper: 1).
        max_new_tokens: the answer length limit (1 reads one token, as eq. 1 does).
        seed: the PRNG seed.
        fallback: the score of an unparsable answer, or ``None`` to leave it out of the mean.
        parser: ``str -> float | None``, an answer's score (default: :func:`~jaxrank.judges.parse_score` on
            the template's range).
        min_label_mass: the share of parsable answers below which the judge warns once
            (:class:`~jaxrank.judges.reading.LabelMassWarning`).
        strict: raise :class:`~jaxrank.judges.reading.LabelMassError` instead.

    Scores that are not single tokens (a 1-10 scale) are allowed: the prompt then ends at the form field.

    Raises:
        ValueError: as for :class:`~jaxrank.judges.GEvalJudge`, or naming the argument: ``num_samples < 1``,
            a negative or infinite ``temperature``, ``top_p`` outside ``(0, 1]``, ``max_new_tokens < 1``, a
            ``seed`` that is not an int in ``[0, 2**32)``, a ``fallback`` that is neither ``None`` nor a finite number, or a
            ``parser`` that is not callable.
        NotImplementedError: a t5 model with ``temperature > 0``.
    """

    num_samples = fixed("num_samples", "Answers per candidate.")
    temperature = fixed("temperature", "The sampling temperature (0: greedy).")
    top_p = fixed("top_p", "The nucleus mass.")
    max_new_tokens = fixed("max_new_tokens", "The answer length limit.")
    seed = fixed("seed", "The PRNG seed.")
    fallback = fixed("fallback", "The score of an unparsable answer (``None``: left out of the mean).")
    parser = fixed("parser", "``str -> float | None``, an answer's score.")

    def __init__(self, model, template: PointwiseTemplate, *, num_samples: int = 20, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 5, seed: int = 0, fallback: float | None = None,
                 parser: Callable[[str], float | None] | None = None, chat: bool | None = None,
                 system: str | None = None, batch_size: int = 8, steps: str | None = None,
                 max_step_tokens: int = DEFAULT_STEP_TOKENS, max_length: int | None = None,
                 min_label_mass: float = MIN_LABEL_MASS, strict: bool = False):
        super().__init__(model, template, chat=chat, system=system, batch_size=batch_size, steps=steps,
                         max_step_tokens=max_step_tokens, max_length=max_length, min_label_mass=min_label_mass,
                         strict=strict)
        check_sampled(self, num_samples=num_samples, temperature=temperature, top_p=top_p,
                      max_new_tokens=max_new_tokens, fallback=fallback, fallback_none=True)
        seed = check_seed(seed)
        if parser is not None and not callable(parser):
            raise ValueError(f"parser must be a callable str -> float | None, got {type(parser).__name__}")
        self._num_samples, self._temperature, self._top_p = int(num_samples), float(temperature), float(top_p)
        self._max_new_tokens, self._seed = int(max_new_tokens), seed
        self._fallback = None if fallback is None else float(fallback)
        low, high = float(min(template.scores)), float(max(template.scores))
        self._parser = parser or _range_parser(low, high)
        self.middle = (low + high) / 2
        self._extra_tokens = self.max_new_tokens        # the window keeps room for the answer

    def _score_tokens(self):
        try:
            return super()._score_tokens()
        except ValueError:       # scores of several tokens: answers are parsed, no token is read
            return [], None

    @property
    def template_key(self) -> str:
        """The store's template key: :class:`~jaxrank.judges.GEvalJudge`'s, then ``-sampled-HASH``, the hash
        over ``num_samples``, temperature, ``top_p``, ``max_new_tokens``, seed, the sampling scheme
        (:data:`~jaxrank.judges.textgen.SAMPLING_SCHEME`), fallback and the parser's
        :func:`~jaxrank.judges.sampling.parser_key`; ``batch_size`` does not change the scores."""
        how = {"num_samples": self.num_samples, "temperature": self.temperature, "top_p": self.top_p,
               "max_new_tokens": self.max_new_tokens, "seed": self.seed, "sampling": SAMPLING_SCHEME,
               "fallback": self.fallback, "parser": parser_key(self.parser)}
        h = hashlib.sha1(repr(sorted(how.items())).encode()).hexdigest()[:10]
        return f"{super().template_key}-sampled-{h}"

    def score(self, context: str, candidates: Sequence[str]) -> PointwiseResult:
        """The mean sampled score of every candidate of one context.

        Returns:
            :class:`~jaxrank.judges.PointwiseResult`: ``scores [N]``; ``probs [N, S]`` the share of a
            candidate's parsed answers equal to each of ``template.scores`` (rows sum to 1 when every parsed
            score is on the scale; zeros where none parsed); ``label_mass [N]`` the share of answers
            parsed; ``texts [N][K]`` the answers; ``failures`` the unparsable answers.

        Raises:
            ValueError: an empty candidate, a ``context`` or candidate that is not a string (or
                ``candidates`` a string), or a prompt that cannot fit even without the context.
        """
        check_texts(context, candidates)
        s = len(self.score_values)
        if len(candidates) == 0:
            return PointwiseResult(np.zeros(0, np.float64), np.zeros((0, s), np.float64), False, 0, (),
                                   label_mass=np.zeros(0, np.float32))
        pairs, truncated = self._pairs(context, candidates)
        texts, values, parsed = sample_scores(self, context, candidates, pairs)
        n_ok = parsed.sum(1)
        if self.fallback is None:
            mean = np.where(parsed, values, 0.0).sum(1) / np.maximum(n_ok, 1)
            scores = np.where(n_ok > 0, mean, self.middle)
        else:
            scores = np.where(parsed, values, self.fallback).mean(1)
        hits = (np.where(parsed, values, np.nan)[:, :, None] == self.score_values[None, None, :]).sum(1)
        probs = hits / np.maximum(n_ok, 1)[:, None]
        share = parsed.astype(np.float32).mean(1)
        self._check_share(share, texts)
        return PointwiseResult(scores, probs, truncated, int((~parsed).sum()), texts, label_mass=share)

    def _check_share(self, share, texts) -> None:
        if share.size and (share < self.min_label_mass).any():
            worst = int(np.argmin(share))
            given = check_label_mass(
                share, threshold=self.min_label_mass, strict=self.strict, warn=not self._mass_warned,
                who=f"judge {self.name}, template {self.template.name} (sampled)",
                labels=[str(x) for x in self.template.scores],
                top=f"(sampled answers, not tokens) {list(texts[worst][:5])!r}",
                remedy="Unparsable answers are left out of the score (or count the fallback): give more "
                       "max_new_tokens, a parser that reads these answers, or another model.", stacklevel=4)
            self._mass_warned = self._mass_warned or given


def _range_parser(low: float, high: float) -> Callable[[str], float | None]:
    """:func:`~jaxrank.judges.parse_score` over ``[low, high]``, with a ``key`` for the store."""
    def parse(text: str) -> float | None:
        return parse_score(text, low, high)

    parse.key = f"parse_score({low!r}, {high!r}) {parser_key(parse_score)}"
    return parse
