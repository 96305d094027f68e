"""Judges behind an OpenAI-compatible server: ``p(A)`` from the returned log-probabilities (METHODS.md §1).

:class:`ServerJudge` (pairwise) and :class:`ServerGEvalJudge` (pointwise,
G-Eval) send the same prompts as the local judges
(:meth:`~jaxrank.judges.prompts.PairwiseTemplate.render`, the answer prefix)
to any server that speaks the OpenAI HTTP API (vLLM, llama.cpp's server, TGI,
SGLang, hosted APIs) and read the answer from the log-probabilities it returns.

**Reading ``p``.** Each comparison is one request for one answer token
(``max_tokens=1``, ``temperature=0``) with its ``top_logprobs`` alternatives.
The label ``L_k`` counts every returned alternative whose text, stripped of
whitespace, is the label word (``"A"`` and ``" A"`` alike), so
``P(L_k) = sum of their probabilities`` and ``p = P(L_A) / (P(L_A) + P(L_B))``
(llm-comparative-assessment eq. 3). The **label mass** ``P(L_A) + P(L_B)`` is
their share of the answer *among the returned alternatives*: a lower bound
of the mass over the whole vocabulary when ``top_logprobs`` is truncated (a
spelling of a label outside the top alternatives is not seen). A label that is
not among the alternatives at all is given an upper bound of its probability,
``min(smallest returned probability, max(0, 1 - sum of the returned ones))``
(at least ``1e-12``), so ``p`` leans towards 1/2 rather than to 0 or 1 (A 0.6
and "The" 0.3 returned: ``P(B) <= 0.1``, ``p >= 0.6 / 0.7``); with neither
label returned ``p = 1/2``. A server that returns a single alternative (one
that ignores ``top_logprobs``) leaves only that bound: the judge warns once
(:class:`TopLogprobsWarning`). Both shapes of returned log-probabilities are
read on both endpoints (the chat shape ``logprobs.content``, which
llama.cpp's ``llama-server`` gives on ``/v1/completions`` too, and the legacy
completions shape). Below ``min_label_mass`` the judge
warns once with the alternatives it saw
(:class:`~jaxrank.judges.reading.LabelMassWarning`; ``strict=True`` raises
:class:`~jaxrank.judges.reading.LabelMassError`), as the local judges do.
Labels are read on the first answer token: labels of several words (``"Summary
A"``) need their shared words in the answer prefix (``answer_prefix="Summary"``,
labels ``"A"``/``"B"``).

**Without log-probabilities.** A server that returns none (``logprobs="auto"``
finds out on the first request, :meth:`ServerJudge.prepare`; ``logprobs=False``
asks for none) is read as a sampling judge: ``p`` is the share of ``n`` sampled
answers that name A (llm-comparative-assessment eq. 4-5: ``p = (1/K) sum_k
f(text_k)``, ``f = 1`` for A, ``0`` for B, ``1/2`` for neither), and the judge
says so in :attr:`ServerJudge.reading` (a :class:`ServerReading`: its ``kind``
is ``"logprobs"`` or ``"sampled"``, its ``note`` one sentence a report can print).

**Endpoints and the answer prefix.** The OpenAI chat API cannot prefill the
assistant turn (a trailing assistant message is answered, not continued, by
most servers, llama.cpp's included), so:

* ``endpoint="chat"`` (``/chat/completions``): the server applies its own chat
  template to ``[system, user]``; the answer prefix must be empty.
* ``endpoint="completions"`` (``/completions``): the client renders the whole
  text, prefix included: the model's chat template when ``chat_template=`` is
  given (a Jinja string, rendered here as Hugging Face renders it, so the text
  is the one :class:`~jaxrank.judges.PromptJudge` reads), else the raw prompt
  (``system``, the message, a blank line, the prefix) as a local judge with
  ``chat=False`` writes it.
* ``endpoint="auto"`` (default): ``"completions"`` when the template has an
  answer prefix, else ``"chat"``.

**Production behaviour.** Requests run concurrently (asyncio, at most
``max_concurrency`` in flight, one :mod:`httpx` client per call); a 408, 409,
429 or 5xx answer, a timeout or a dropped or refused connection is retried up
to ``max_retries`` times with exponential backoff and jitter (``Retry-After``
honoured); every request has a ``timeout``, time queued at the server included, and each timeout
halves the requests in flight (down to one) for the rest of the judge's life (its ``in_flight_limit``: a
server too slow for ``max_concurrency`` once stays so, and later calls do not time out again to find out). The API key is read from the
environment variable ``api_key_env`` (default ``OPENAI_API_KEY``) at each
call and is never kept on the judge, so never in its ``repr``, a store, a log or
a report. Every answer is kept in memory by its request, so a ``compare``
repeated after a failure (or after the probe of :meth:`~ServerJudge.prepare`)
pays nothing twice; :func:`~jaxrank.assessment.judge_contexts` writes each
chunk to the store as it is done. Tokens (and the cost, given
``price_per_token``) are counted in :attr:`~ServerJudge.usage`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import warnings
from typing import Sequence

import numpy as np

from jaxrank.judges.pairwise import Judgement, check_pairs
from jaxrank.judges._pointwise_base import PointwiseResult, _fill, scores_judgement
from jaxrank.judges.prompts import PairwiseTemplate, PointwiseTemplate
from jaxrank.judges.reading import MIN_LABEL_MASS, LabelMassWarning, check_label_mass
from jaxrank.judges.sampling import _decide, label_parser
from jaxrank.judges._server_client import (  # noqa: F401  (re-exported)
    RETRY_STATUSES, ServerError, ServerUsage, _ServerBase)
from jaxrank.judges._server_reply import (  # noqa: F401  (re-exported)
    ABSENT_FLOOR, SERVER_READING_VERSION, ServerReading, TopLogprobsWarning, _alternatives, _text,
    render_chat_template)
from jaxrank.judges._server_paraphraser import ServerParaphraser  # noqa: F401  (re-exported)

__all__ = ["ServerJudge", "ServerGEvalJudge", "ServerParaphraser", "ServerError", "ServerUsage", "ServerReading",
           "TopLogprobsWarning", "render_chat_template", "RETRY_STATUSES", "SERVER_READING_VERSION"]

DEFAULT_TOP_LOGPROBS = 20
"""The alternatives a server judge asks for by default (``top_logprobs``)."""


def _reading_extras(judge) -> tuple:
    """What else changes a server judge's reading, for its template key: the alternatives asked for and the chat
    template's tokens, each only where it is not the default (so default keys are those stored before)."""
    out = ()
    if judge.top_logprobs != DEFAULT_TOP_LOGPROBS:
        out += (("top_logprobs", judge.top_logprobs),)
    if judge.chat_template_tokens:
        out += (("chat_template_tokens", tuple(sorted((k, str(v)) for k, v in judge.chat_template_tokens.items()))),)
    return out


class ServerJudge(_ServerBase):
    """A pairwise judge behind an OpenAI-compatible server (chat-completions or completions endpoint).

    ``p = P(L_A) / (P(L_A) + P(L_B))`` from the ``top_logprobs`` of the first
    answer token (llm-comparative-assessment eq. 3; the label mass and its lower
    bound: the module docstring); without log-probabilities, the share of
    ``num_samples`` sampled answers that name A (eq. 4-5).

    Args:
        base_url: the API's base URL, e.g. ``"http://127.0.0.1:8000/v1"`` or ``"https://api.openai.com/v1"``.
        model: the served model's name (sent as ``model``).
        template: the comparative prompt (:func:`~jaxrank.judges.pairwise_template`); its labels are
            single words read on the first answer token.
        endpoint: ``"chat"``, ``"completions"`` or ``"auto"`` (completions when there is an answer prefix).
        answer_prefix: text the answer begins with (overrides the template's); needs the completions endpoint.
        chat_template: the model's Jinja chat template, rendered here for the completions endpoint
            (:func:`render_chat_template`); ``None``: a raw prompt.
        chat_template_tokens: special tokens the chat template names (``{"bos_token": "<s>"}``).
        system: optional system message.
        logprobs: ``"auto"`` (read log-probabilities; sample when the server returns none: found out by one
            request on the first pair in :meth:`prepare`, so a run pays one request even when its store holds
            every judgement), ``True`` (log-probabilities or an error), ``False`` (sample).
        top_logprobs: alternatives asked for per answer token (OpenAI allows at most 20).
        num_samples, temperature, max_new_tokens: the sampled reading (eq. 4-5).
        api_key_env: the environment variable holding the API key (none sent when it is unset).
        max_concurrency: requests in flight at most.
        max_retries: retries of a request after a 408/409/429/5xx answer, a timeout or a lost connection.
        timeout: seconds per request, all of it (connecting, time queued at the server, reading the answer).
        backoff, max_backoff: the first and the largest retry delay (seconds), doubled per retry, with jitter.
        price_per_token: a price per token, or ``(prompt price, completion price)``: :attr:`usage` adds the cost.
        min_label_mass: the labels' share of the answer (among the returned alternatives) below which the judge
            warns once (:class:`~jaxrank.judges.reading.LabelMassWarning`).
        strict: raise :class:`~jaxrank.judges.reading.LabelMassError` instead.

    After each :meth:`compare`, ``last_alternatives`` holds the alternatives the server returned for each of its
    prompts (``[(text, logprob), ...]``, most likely first; ``None`` for sampled answers): the top answers that
    :func:`~jaxrank.assessment.diagnose_judge` (``jaxrank judge --diagnose``) prints.

    Raises:
        ValueError: a bad URL (no host, a port outside 1..65535, spaces, a password, a query), option or
            label, or an answer prefix with ``endpoint="chat"``.
        ServerError: (on use) the server unreachable after the retries, a refused key (401/403), an unknown
            path or model (404), another error answer; the message names the server.
    """

    def __init__(self, base_url: str, model: str, template: PairwiseTemplate, *, endpoint: str = "auto",
                 answer_prefix: str | None = None, chat_template: str | None = None,
                 chat_template_tokens: dict | None = None, system: str | None = None, logprobs="auto",
                 top_logprobs: int = DEFAULT_TOP_LOGPROBS, num_samples: int = 10, temperature: float = 1.0,
                 max_new_tokens: int = 8,
                 api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 8, max_retries: int = 5,
                 timeout: float = 60.0, backoff: float = 0.5, max_backoff: float = 8.0, price_per_token=None,
                 min_label_mass: float = MIN_LABEL_MASS, strict: bool = False):
        super().__init__(base_url, model, endpoint=endpoint, chat_template=chat_template, system=system,
                         api_key_env=api_key_env, max_concurrency=max_concurrency, max_retries=max_retries,
                         timeout=timeout, backoff=backoff, max_backoff=max_backoff, top_logprobs=top_logprobs,
                         price_per_token=price_per_token, min_label_mass=min_label_mass, strict=strict,
                         chat_template_tokens=chat_template_tokens)
        if answer_prefix is not None:
            if not isinstance(answer_prefix, str) or answer_prefix == "auto":
                raise ValueError(f"answer_prefix must be a string (a server judge has no 'auto'), got "
                                 f"{answer_prefix!r}")
            template = dataclasses.replace(template, answer_prefix=answer_prefix)
        if any(len(w.split()) != 1 for w in template.labels):
            raise ValueError(f"labels {template.labels!r}: a server judge reads one word on the first answer token; "
                             "put shared words in the answer prefix (answer_prefix='Summary', labels 'A', 'B')")
        if endpoint == "chat" and template.answer_prefix:
            raise ValueError(f"answer prefix {template.answer_prefix!r} with endpoint='chat': the chat API cannot "
                             "prefill the answer; use endpoint='completions' (with chat_template=)")
        if logprobs not in ("auto", True, False):
            raise ValueError(f"logprobs must be 'auto', True or False, got {logprobs!r}")
        if num_samples < 1 or max_new_tokens < 1 or not temperature >= 0:
            raise ValueError("num_samples and max_new_tokens must be >= 1 and temperature >= 0")
        self.template = template
        self._logprobs = logprobs
        self.num_samples, self.temperature = int(num_samples), float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.parser = label_parser(template.labels)
        self.undecided = 0
        self.last_alternatives: list[list[tuple[str, float]]] | None = None
        self.reading: ServerReading | None = None          # "auto": settled by prepare()
        self._absent_warned = False
        if logprobs in (True, False):
            self._set_reading("logprobs" if logprobs else "sampled")

    @property
    def endpoint(self) -> str:
        """The endpoint used: ``"chat"`` or ``"completions"``."""
        if self._endpoint == "auto":
            return "completions" if self.template.answer_prefix else "chat"
        return self._endpoint

    def _set_reading(self, kind: str) -> None:
        self.reading = ServerReading(kind, tuple(self.template.labels), self._note(kind))

    def _note(self, kind: str) -> str:
        """How ``p`` is read, in one sentence for a report."""
        if kind == "sampled":
            return (f"{self.name}: the server gives no log-probabilities; p is the share of {self.num_samples} "
                    f"sampled answers (temperature {self.temperature:g}) that name A (LCA eq. 4-5)")
        return (f"{self.name}: p from the top-{self.top_logprobs} log-probabilities of the first answer token "
                f"({self.endpoint} endpoint); the label mass is a lower bound where they are truncated")

    @property
    def template_key(self) -> str:
        """The store's template key: the template's key and a hash of how the answer is read (endpoint, system
        message, chat template and its tokens, log-probabilities (how many alternatives) or ``n`` samples).

        Raises:
            RuntimeError: ``logprobs="auto"`` and the server not yet asked (call :meth:`prepare`).
        """
        if self.reading is None:
            raise RuntimeError("logprobs='auto' and the server not asked yet: call judge.prepare(context, "
                               "candidates) (judge_contexts does) before asking for the template key")
        how = (SERVER_READING_VERSION, self.endpoint, self.system, self.chat_template, self.reading.kind,
               (self.num_samples, self.temperature, self.max_new_tokens) if self.reading.kind == "sampled" else None)
        how += _reading_extras(self)
        h = hashlib.sha1(repr(how).encode()).hexdigest()[:6]
        return f"{self.template.key}-{h}"

    def request_prompt(self, context: str, a: str, b: str) -> dict:
        """The prompt part of one comparison's request: ``{"messages": ...}`` or ``{"prompt": text}``."""
        return self._wrap(self.template.render(context, a, b), self.template.answer_prefix)

    def prepare(self, context: str, candidates: Sequence[str]) -> ServerReading:
        """Settle what the judge reads before its keys are taken: (``logprobs="auto"``) whether the server returns
        log-probabilities, from one request on the first pair (kept: not paid twice). That answer also names the
        answering model, so the :attr:`fingerprint` taken after it needs no request of its own.

        Returns:
            :attr:`reading` (a :class:`ServerReading`).
        """
        if self.reading is None:
            if len(candidates) < 2:
                raise ValueError("prepare needs at least two candidates")
            body = self._logprob_request(self.request_prompt(context, candidates[0], candidates[1]))
            data = self.answers([body])[0]
            self._set_reading("sampled" if _alternatives(data["choices"][0], self.endpoint) is None else "logprobs")
            if self.reading.kind == "sampled":
                warnings.warn(self.reading.note, UserWarning, stacklevel=2)
        return self.reading

    def compare(self, context: str, candidates: Sequence[str], i, j, *, progress=None) -> Judgement:
        """``p = P(candidates[i] better than candidates[j])`` for every pair of one context, from the server.

        Args:
            context, candidates: the texts.
            i, j: ``[R]`` indices into ``candidates`` for positions A and B.
            progress: optional callable, called with 1 after every answered request (a progress bar's ``update``).

        Returns:
            :class:`~jaxrank.judges.Judgement`: ``p``, ``logits`` = the labels' log-probabilities (sampled: the
            answer counts), ``label_mass`` (sampled: the share of answers naming a label), ``top_probs`` the
            probabilities of the first five alternatives (``top_ids`` is ``None``: servers return token texts).

        Raises:
            ValueError: bad indices or an empty candidate.
            ServerError: the server failed (see the class).
            LabelMassError: ``strict=True`` and the labels hold less than ``min_label_mass``.
        """
        i, j = check_pairs(candidates, i, j)
        if i.size == 0:
            return Judgement(np.zeros(0, np.float32), False, np.zeros((0, 2), np.float32), np.zeros(0, np.float32))
        self.prepare(context, candidates)
        prompts = [self.request_prompt(context, candidates[a], candidates[b]) for a, b in zip(i, j)]
        if self.reading.kind == "sampled":
            return self._sampled(prompts, progress)
        datas = self.answers([self._logprob_request(p) for p in prompts], progress)
        logp = np.zeros((len(prompts), 2))
        mass = np.zeros(len(prompts))
        top = np.zeros((len(prompts), 5), np.float32)
        alts, ever = [], np.zeros(2, bool)
        for r, data in enumerate(datas):
            alt = _alternatives(data["choices"][0], self.endpoint)
            if alt is None:
                raise ServerError(f"server {self.base_url} returned no log-probabilities for model {self.model!r}; "
                                  "use logprobs='auto' or False to read sampled answers (LCA eq. 4-5)")
            alts.append(alt)
            probs, bound = self._read_words(alt, self.template.labels)
            mass[r] = probs.sum()
            seen = probs > 0
            ever |= seen
            if seen.any() and not seen.all():           # an absent label: at most its upper bound (module docstring)
                probs[~seen] = max(bound, ABSENT_FLOOR)
            logp[r] = np.log(probs) if seen.any() else (0.0, 0.0)
            pr = [math.exp(v) for _, v in alt[:5]]
            top[r, :len(pr)] = pr
        p = (1.0 / (1.0 + np.exp(logp[:, 1] - logp[:, 0]))).astype(np.float32)
        self._warn_absent_labels(ever, len(datas))
        self._warn_few_alternatives(alts)
        if mass.size and (mass < self.min_label_mass).any():
            worst = int(np.argmin(mass))
            given = check_label_mass(
                mass, threshold=self.min_label_mass, strict=self.strict, warn=not self._mass_warned,
                who=f"judge {self.name} at {self.base_url}, template {self.template.name}",
                labels=self.template.labels, top=self._format_alternatives(alts[worst]),
                remedy=f"(Among the top-{self.top_logprobs} alternatives the server returned: a lower bound.) Its p "
                       "compares answers the model hardly gives: set an answer prefix (the words it writes first), "
                       "other labels, or another model.", stacklevel=3)
            self._mass_warned = self._mass_warned or given
        self.last_alternatives = alts
        return Judgement(p, False, logp.astype(np.float32), mass.astype(np.float32), None, top)

    def _warn_absent_labels(self, ever: np.ndarray, answers: int) -> None:
        """Warn once when a label was never among the returned alternatives of a whole call's answers: a label
        that is several tokens for the served model is never matched on the first answer token."""
        if ever.all() or self.top_logprobs < 5 or self._absent_warned:
            return
        self._absent_warned = True
        missing = [w for w, e in zip(self.template.labels, ever) if not e]
        warnings.warn(
            f"judge {self.name} at {self.base_url}: label(s) {missing} never among the top-{self.top_logprobs} "
            f"alternatives of the first answer token in {answers} answer(s). A label the served model writes as "
            "several tokens (' Nope' = ' N' + 'ope') is never matched there, and an absent label's probability is "
            "bounded by the smallest returned alternative (and 1 - their sum), so p sits near 0 or 1. Use labels "
            "that are one token each, with shared words in the answer prefix.", LabelMassWarning, stacklevel=3)

    def _sampled(self, prompts: list[dict], progress) -> Judgement:
        """Eq. 4-5: ``p`` = the share of ``num_samples`` answers naming A (neither counts 1/2)."""
        k = self.num_samples
        body = {"max_tokens": self.max_new_tokens, "temperature": self.temperature, "n": k}
        datas = self.answers([{**p, **body} for p in prompts], progress)
        texts = [[_text(c, self.endpoint) for c in d["choices"]][:k] for d in datas]
        short = [r for r, t in enumerate(texts) if len(t) < k]
        for rnd in range(1, k + 1):                  # a server that ignores n: further single answers
            if not short:
                break
            extra = self.answers([{**prompts[r], **body, "n": 1, "seed": rnd} for r in short])
            for r, d in zip(short, extra):
                texts[r].append(_text(d["choices"][0], self.endpoint))
            short = [r for r in short if len(texts[r]) < k]
        p, counts, und = _decide(texts, self.parser)
        self.undecided += und
        self.last_alternatives = None
        parsed = (counts.sum(1) / k).astype(np.float32)
        if (parsed < self.min_label_mass).any():
            worst = int(np.argmin(parsed))
            given = check_label_mass(
                parsed, threshold=self.min_label_mass, strict=self.strict, warn=not self._mass_warned,
                who=f"judge {self.name} at {self.base_url} (sampled), template {self.template.name}",
                labels=self.template.labels, top="answers " + "; ".join(repr(t[:40]) for t in texts[worst][:3]),
                remedy="Its p counts answers that name neither label as 1/2: ask for the label only, or another "
                       "model.", stacklevel=3)
            self._mass_warned = self._mass_warned or given
        return Judgement(p, False, counts, parsed)


class ServerGEvalJudge(_ServerBase):
    """G-Eval (g-eval §2, eq. 1) behind an OpenAI-compatible server: ``score = sum_s P(s) s``.

    ``P(s)`` are the probabilities of the score words (``"1"`` .. ``"5"``)
    among the ``top_logprobs`` alternatives of the first answer token,
    renormalised over the scores seen; their sum is the label mass (a lower
    bound when the alternatives are truncated). A candidate with no score among
    them gets the middle of the scale and counts in the label-mass warning. The
    evaluation steps (auto chain-of-thought) are written once by the served model,
    greedily, unless ``steps=`` gives them. Prompts and endpoints as
    :class:`ServerJudge`.

    Args:
        base_url, model: the server and the served model.
        template: a :class:`~jaxrank.judges.prompts.PointwiseTemplate` (``pointwise_template(aspect)``).
        steps: evaluation steps to use instead of asking the model.
        max_step_tokens: length limit of the generated steps.
        answer_prefix: text appended to the prompt as it is (completions endpoint, which ``endpoint="auto"``
            then picks), e.g. ``" "`` where the tokenizer writes the space before a score as a token of its own
            (SmolLM2), so that the first answer token is the score.
        endpoint, chat_template, chat_template_tokens, system, top_logprobs, api_key_env, max_concurrency,
            max_retries, timeout, backoff, max_backoff, price_per_token, min_label_mass, strict: as
            :class:`ServerJudge`.
    """

    def __init__(self, base_url: str, model: str, template: PointwiseTemplate, *, steps: str | None = None,
                 max_step_tokens: int = 128, endpoint: str = "auto", answer_prefix: str = "",
                 chat_template: str | None = None,
                 chat_template_tokens: dict | None = None, system: str | None = None, top_logprobs: int = DEFAULT_TOP_LOGPROBS,
                 api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 8, max_retries: int = 5,
                 timeout: float = 60.0, backoff: float = 0.5, max_backoff: float = 8.0, price_per_token=None,
                 min_label_mass: float = MIN_LABEL_MASS, strict: bool = False):
        super().__init__(base_url, model, endpoint=endpoint, chat_template=chat_template, system=system,
                         api_key_env=api_key_env, max_concurrency=max_concurrency, max_retries=max_retries,
                         timeout=timeout, backoff=backoff, max_backoff=max_backoff, top_logprobs=top_logprobs,
                         price_per_token=price_per_token, min_label_mass=min_label_mass, strict=strict,
                         chat_template_tokens=chat_template_tokens)
        if not isinstance(answer_prefix, str):
            raise ValueError(f"answer_prefix must be a string, got {answer_prefix!r}")
        self.answer_prefix = answer_prefix
        if answer_prefix and self.endpoint == "chat":
            raise ValueError(f"answer prefix {answer_prefix!r} with endpoint='chat': the chat API cannot prefill "
                             "the answer; use endpoint='completions' or 'auto'")
        self.template = template
        self._steps = self._given_steps = steps
        self.max_step_tokens = int(max_step_tokens)
        self.score_values = np.asarray(template.scores, np.float64)
        self._cache_key = self._cache_val = None

    @property
    def endpoint(self) -> str:
        """The endpoint used: ``"chat"`` or ``"completions"`` (``"auto"``: completions when there is an answer
        prefix, as :class:`ServerJudge`)."""
        if self._endpoint == "auto":
            return "completions" if self.answer_prefix else "chat"
        return self._endpoint

    @property
    def template_key(self) -> str:
        """The template's key and a hash of how the score is read: endpoint, system message, chat template and its
        tokens, the alternatives asked for, the answer prefix, and the steps given (``steps=``) or, when the
        served model writes them, ``max_step_tokens`` (the same before and after they are written)."""
        steps = self._given_steps if self._given_steps is not None else ("auto", self.max_step_tokens)
        how = (SERVER_READING_VERSION, self.endpoint, self.system, self.chat_template, steps,
               self.answer_prefix) + _reading_extras(self)
        return f"{self.template.key}-{hashlib.sha1(repr(how).encode()).hexdigest()[:6]}"

    @property
    def steps(self) -> str:
        """The evaluation steps (written by the served model, greedily, on first use; then reused)."""
        if self._steps is None:
            body = {**self._wrap(self.template.steps_request, blank=False), "max_tokens": self.max_step_tokens,
                    "temperature": 0.0}
            self._steps = _text(self.answers([body])[0]["choices"][0], self.endpoint).strip()
        return self._steps

    def request_prompt(self, context: str, candidate: str) -> dict:
        """The prompt part of one candidate's request."""
        t = self.template
        values = {"criteria": t.criteria, "context": context, "candidate": candidate}
        if "{steps}" in t.text:       # a template without chain of thought never asks for the steps
            values["steps"] = self.steps
        # one pass over the template: a context, candidate, criteria or steps holding a placeholder is kept as written
        return self._wrap(_fill(t.text, values), self.answer_prefix, blank=False)

    def score(self, context: str, candidates: Sequence[str], *, progress=None) -> PointwiseResult:
        """G-Eval scores of every candidate of one context (g-eval eq. 1), from the server's log-probabilities."""
        s = len(self.score_values)
        if len(candidates) == 0:
            return PointwiseResult(np.zeros(0, np.float64), np.zeros((0, s), np.float64), False)
        empty = [k for k, c in enumerate(candidates) if not str(c).strip()]
        if empty:
            raise ValueError(f"candidates {empty} are empty; an empty text cannot be judged")
        datas = self.answers([self._logprob_request(self.request_prompt(context, c)) for c in candidates], progress)
        probs = np.zeros((len(candidates), s))
        mass = np.zeros(len(candidates))
        alts = []
        for r, data in enumerate(datas):
            alt = _alternatives(data["choices"][0], self.endpoint)
            if alt is None:
                raise ServerError(f"server {self.base_url} returned no log-probabilities for model {self.model!r}: "
                                  "G-Eval's weighted score needs them")
            alts.append(alt)
            q, _ = self._read_words(alt, [str(x) for x in self.template.scores])
            mass[r] = q.sum()
            probs[r] = q / q.sum() if q.sum() > 0 else np.full(s, 1.0 / s)
        self._warn_few_alternatives(alts)
        if mass.size and (mass < self.min_label_mass).any():
            worst = int(np.argmin(mass))
            given = check_label_mass(
                mass, threshold=self.min_label_mass, strict=self.strict, warn=not self._mass_warned,
                who=f"judge {self.name} at {self.base_url}, template {self.template.name}",
                labels=[str(x) for x in self.template.scores], top=self._format_alternatives(alts[worst]),
                remedy="Its score renormalises over answers the model hardly gives (a lower bound among the "
                       "returned alternatives): end the prompt where the model writes the score, or another model.",
                stacklevel=3)
            self._mass_warned = self._mass_warned or given
        return PointwiseResult(probs @ self.score_values, probs, False, label_mass=mass.astype(np.float32))

    def compare(self, context: str, candidates: Sequence[str], i, j, *, scale: float = 1.0,
                progress=None) -> Judgement:
        """Pairwise view of the scores: ``p = sigmoid(scale * (s_i - s_j))``
        (:func:`~jaxrank.judges.pointwise_comparisons`); each candidate is scored once per context."""
        i, j = check_pairs(candidates, i, j)
        key = (context, tuple(candidates))
        if self._cache_key != key:
            self._cache_val, self._cache_key = self.score(context, candidates), key
        if progress is not None:
            progress(len(i))
        return scores_judgement(self._cache_val, i, j, scale=scale)
