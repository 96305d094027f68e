"""How the server judges read a reply (private): the reading version, the chat template rendered as Hugging Face
renders it, the returned log-probabilities in either shape, the labels' probabilities and an absent label's bound,
the check that a reply is a completion; :mod:`jaxrank.judges.server` documents the reading."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Sequence

import numpy as np

SERVER_READING_VERSION = "server-top-logprobs-2"
"""How a server judge reads the answer; part of its ``template_key``. Version 2 (11-27): both log-probability
shapes on both endpoints, and an absent label bounded by ``1 -`` the returned mass (version 1 read llama-server's
completions as ``p = 1/2`` and gave an absent label the smallest returned probability)."""

ABSENT_FLOOR = 1e-12
"""The least probability an absent label is given, so that its log-probability stays finite."""

@dataclasses.dataclass(frozen=True)
class ServerReading:
    """How a :class:`ServerJudge` reads ``p`` (its :attr:`~ServerJudge.reading`, which a report reads).

    Attributes:
        kind: ``"logprobs"`` (the labels' log-probabilities among the returned alternatives) or
            ``"sampled"`` (the share of sampled answers naming A, LCA eq. 4-5).
        texts: the label words as read (stripped of whitespace).
        note: one sentence saying so.
    """

    kind: str
    texts: tuple[str, str]
    note: str


class TopLogprobsWarning(UserWarning):
    """A server returned a single alternative for an answer token (it ignores ``top_logprobs``, or
    ``top_logprobs=1``): a label absent from it is only bounded by ``1 -`` that alternative's probability."""


def render_chat_template(template: str, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                         **special) -> str:
    """A Jinja chat template rendered as Hugging Face's ``apply_chat_template`` renders it.

    The environment is Hugging Face's: sandboxed, ``trim_blocks`` and
    ``lstrip_blocks``, the ``loopcontrols`` extension, ``raise_exception`` and a
    ``tojson`` filter; ``special`` gives the special tokens the template may
    name (``bos_token=...``; empty strings by default).
    """
    import jinja2   # deferred: only the completions endpoint with a chat template needs it
    import jinja2.ext   # not imported by jinja2 itself: loopcontrols below
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    values = {"bos_token": "", "eos_token": "", "unk_token": "", "pad_token": "", **special}
    return env.from_string(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                            **values)


def _alternatives(choice: dict, endpoint: str | None = None) -> list[tuple[str, float]] | None:
    """The ``(token, logprob)`` alternatives of the first answer token, best first; ``None`` when the server
    returns no log-probabilities, ``[]`` when it returns them for no token (the answer ended at once: a
    server such as llama.cpp's gives none for an end-of-text token).

    Both shapes are read on either endpoint (``endpoint`` is not needed to tell them apart): the chat shape
    ``{"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}]}``, which OpenAI's chat
    API and llama.cpp's ``llama-server`` on ``/v1/completions`` too return, and the legacy completions shape
    ``{"tokens", "token_logprobs", "top_logprobs": [{token: logprob, ...}]}`` (OpenAI, vLLM, llama-cpp-python).
    """
    lp = choice.get("logprobs")
    if lp is None:
        return None
    if not lp:
        return []
    if "content" in lp:                         # {"content": [{"token", "logprob", "top_logprobs": [...]}]}
        content = lp.get("content") or []
        if not content:
            return []
        first = content[0]
        top = first.get("top_logprobs") or [{"token": first.get("token"), "logprob": first.get("logprob")}]
        out = [(str(t.get("token")), float(t.get("logprob"))) for t in top if t.get("logprob") is not None]
    else:                                       # legacy: {"tokens", "token_logprobs", "top_logprobs": [{tok: lp}]}
        tops = lp.get("top_logprobs") or []
        if tops and tops[0]:
            out = [(str(t), float(v)) for t, v in tops[0].items() if v is not None]
        elif lp.get("tokens") and lp.get("token_logprobs") and lp["token_logprobs"][0] is not None:
            out = [(str(lp["tokens"][0]), float(lp["token_logprobs"][0]))]
        else:
            return []
    out = [(t, v) for t, v in out if math.isfinite(v)]
    return sorted(out, key=lambda x: -x[1])


def _text(choice: dict, endpoint: str) -> str:
    if endpoint == "chat":
        return str((choice.get("message") or {}).get("content") or "")
    return str(choice.get("text") or "")


def read_words(alternatives, words: Sequence[str]) -> tuple[np.ndarray, float | None]:
    """``(P(word) for each word, bound)`` from one answer's alternatives (``[(text, logprob)]``, best first): a
    word's probability sums the alternatives whose text, stripped of whitespace, is the word; ``bound`` is the
    most an absent word can hold, ``min(smallest returned probability, max(0, 1 - sum of the returned ones))``
    (it is not returned, so it is at most the smallest one returned, and at most what they leave); ``None``
    without alternatives."""
    probs = np.zeros(len(words))
    for tok, lp in alternatives:
        w = tok.strip()
        for k, word in enumerate(words):
            if w == word:
                probs[k] += math.exp(lp)
    if not alternatives:
        return probs, None
    returned = [math.exp(v) for _, v in alternatives]
    return probs, min(returned[-1], max(0.0, 1.0 - math.fsum(returned)))


def format_alternatives(alternatives) -> str:
    """The first five alternatives as ``'A' 0.600, 'B' 0.300`` (for a warning)."""
    return ", ".join(f"{t!r} {math.exp(v):.3f}" for t, v in (alternatives or [])[:5]) or "none returned"


def reply_problem(data) -> str | None:
    """What makes ``data`` (a 200 reply's JSON) no completion reply, or ``None``: it must be an object whose
    ``choices`` is a non-empty list of objects, each with ``logprobs`` and ``message`` absent, null or objects."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no list of choices"
    if not all(isinstance(c, dict) for c in choices):
        return "choices that are not objects"
    if any(not isinstance(c.get("logprobs"), (dict, type(None))) for c in choices):
        return "logprobs that are not an object"
    if any(not isinstance(c.get("message"), (dict, type(None))) for c in choices):
        return "a message that is not an object"
    return None
