"""The transport under the server judges (private): requests, retries, timeouts, usage, the key, the fingerprint;
:mod:`jaxrank.judges._server_reply` reads the replies, :mod:`jaxrank.judges.server` holds the judges built on both
and documents the behaviour (production behaviour: concurrency, retries with backoff, timeouts, the API key never
kept)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import random
import warnings
from typing import Sequence

import httpx
import numpy as np

from jaxrank.judges._server_reply import (
    TopLogprobsWarning, format_alternatives, read_words, render_chat_template, reply_problem)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses retried with backoff (others are errors at once)."""


class ServerError(OSError):
    """The server could not be reached, refused the request, or answered something the judge cannot read.

    An ``OSError`` (an input/output failure, which the command line prints as one line). The message names
    the server (its base URL) and never holds the API key.
    """


@dataclasses.dataclass
class ServerUsage:
    """What a server judge has spent.

    Attributes:
        requests: answered requests.
        retries: requests sent again after a retriable failure.
        prompt_tokens, completion_tokens: the tokens the server reported (``usage``).
        cost: ``prompt_tokens * price_in + completion_tokens * price_out`` (``None`` without a price).
        reused: answers taken from the judge's memory instead of a request.
    """

    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    reused: int = 0

    def line(self) -> str:
        """One line for a report: requests, retries, tokens and cost."""
        cost = "" if self.cost is None else f", cost {self.cost:.4f}"
        return (f"{self.requests} requests ({self.retries} retried, {self.reused} reused), "
                f"{self.prompt_tokens} prompt + {self.completion_tokens} completion tokens{cost}")


def _run(coro):
    """Run a coroutine to its end from synchronous code (in a worker thread when a loop is running here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:     # a notebook's running loop
        return pool.submit(asyncio.run, coro).result()


def _check_base_url(base_url) -> str:
    """``base_url`` without its trailing ``/``, checked: an http(s) URL with a host, a port in 1..65535 if any,
    no spaces, no user name or password (the key goes in ``api_key_env``: a URL is kept in the store's keys),
    no query or fragment (the paths are appended to it).

    Raises:
        ValueError: naming ``base_url``.
    """
    example = "(e.g. http://127.0.0.1:8000/v1)"
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL {example}, got {base_url!r}")
    if any(c.isspace() for c in base_url):
        raise ValueError(f"base_url must hold no spaces {example}, got {base_url!r}")
    try:
        url = httpx.URL(base_url)
        port = url.port
    except (httpx.InvalidURL, ValueError) as e:
        raise ValueError(f"base_url is not a valid URL {example}: {e}") from None
    if url.userinfo:
        raise ValueError("base_url holds a user name or password: give the key in the environment variable "
                         "api_key_env instead (the URL is part of the store's keys)")
    if not url.host:
        raise ValueError(f"base_url has no host {example}, got {base_url!r}")
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"base_url's port must be in 1..65535 {example}, got {port} in {base_url!r}")
    if url.query or url.fragment:
        raise ValueError(f"base_url must end at the API's path, without ?query or #fragment {example} (the request "
                         f"paths are appended to it), got {base_url!r}")
    return base_url.rstrip("/")


class _InFlight:
    """At most ``limit`` requests in flight; a timed-out request halves the limit (down to 1). One gate serves
    one call (its asyncio condition belongs to that call's event loop); the judge keeps the limit it ends with
    (``in_flight_limit``) and starts the next call's gate from it.

    A server that answers one request at a time (llama.cpp's) queues the rest, and the time queued counts
    against each request's timeout: fewer requests in flight is what lets the later ones answer in time.
    """

    def __init__(self, limit: int):
        self.limit, self.active = int(limit), 0
        self._cond = asyncio.Condition()

    async def __aenter__(self):
        async with self._cond:
            await self._cond.wait_for(lambda: self.active < self.limit)
            self.active += 1

    async def __aexit__(self, *exc):
        async with self._cond:
            self.active -= 1
            self._cond.notify_all()

    def shrink(self) -> None:
        self.limit = max(1, self.limit // 2)


class _ServerBase:
    """The HTTP machinery both server judges share: requests, retries, the key, usage, the fingerprint."""

    def __init__(self, base_url: str, model: str, *, endpoint: str, chat_template: str | None, system: str | None,
                 api_key_env: str, max_concurrency: int, max_retries: int, timeout: float, backoff: float,
                 max_backoff: float, top_logprobs: int, price_per_token, min_label_mass: float, strict: bool,
                 chat_template_tokens: dict | None = None):
        base_url = _check_base_url(base_url)
        if not model or not isinstance(model, str):
            raise ValueError(f"model must be the served model's name, got {model!r}")
        if endpoint not in ("auto", "chat", "completions"):
            raise ValueError(f"endpoint must be 'auto', 'chat' or 'completions', got {endpoint!r}")
        for what, v, low in (("max_concurrency", max_concurrency, 1), ("max_retries", max_retries, 0),
                             ("top_logprobs", top_logprobs, 1)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{what} must be an int >= {low}, got {v!r}")
        for what, v in (("timeout", timeout), ("backoff", backoff), ("max_backoff", max_backoff)):
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{what} must be a number > 0 (seconds), got {v!r}")
        if not isinstance(min_label_mass, (int, float)) or not 0.0 <= float(min_label_mass) <= 1.0:
            raise ValueError(f"min_label_mass must be a number in [0, 1], got {min_label_mass!r}")
        if not api_key_env or not isinstance(api_key_env, str):
            raise ValueError(f"api_key_env must name an environment variable, got {api_key_env!r}")
        if price_per_token is not None:
            price = (price_per_token, price_per_token) if np.isscalar(price_per_token) else tuple(price_per_token)
            if len(price) != 2 or any(not isinstance(x, (int, float)) or x < 0 for x in price):
                raise ValueError("price_per_token must be a price >= 0 or (prompt price, completion price), got "
                                 f"{price_per_token!r}")
            self.price_per_token = (float(price[0]), float(price[1]))
        else:
            self.price_per_token = None
        self.base_url = base_url
        self.model = model
        self._endpoint = endpoint
        self.chat_template = chat_template
        self.chat_template_tokens = dict(chat_template_tokens or {})
        self.system = system
        self.api_key_env = api_key_env
        self.max_concurrency, self.max_retries = int(max_concurrency), int(max_retries)
        self.in_flight_limit = self.max_concurrency   # halved by each timeout, for the judge's life (_InFlight)
        self.timeout, self.backoff, self.max_backoff = float(timeout), float(backoff), float(max_backoff)
        self.top_logprobs = int(top_logprobs)
        self.min_label_mass, self.strict = float(min_label_mass), bool(strict)
        self.usage = ServerUsage(cost=0.0 if self.price_per_token else None)
        self.served_model: str | None = None
        self.answering_model: str | None = None      # the model the answers name ("" when they name none)
        self._answers: dict[str, dict] = {}
        self._mass_warned = False
        self._few_warned = False

    # ----------------------------------------------------------------- naming
    @property
    def name(self) -> str:
        """Judge id for the store: ``server:MODEL``."""
        return f"server:{self.model}"

    @property
    def batch_size(self) -> int:
        """Requests in flight at most (``judge_contexts`` judges ``4 x`` this per chunk)."""
        return self.max_concurrency

    @property
    def fingerprint(self) -> str:
        """What the judge is, for the store's keys: ``base_url|model|served id``, then ``|answering model`` when
        the answers name another model.

        The served id is what ``GET /models`` lists for :attr:`model` (with vLLM's ``root``, the weights behind a
        served name: ``id@root``), then, where the entry has a ``meta`` (llama.cpp's ``llama-server``: the GGUF's
        parameter count, size, vocabulary), ``#`` and 8 hex digits of a SHA-1 of that ``meta`` and the entry's
        ``owned_by``, so two models served under one alias at one URL never share a key; an entry without
        ``meta`` (vLLM, llama-cpp-python, hosted APIs) keeps the key it had before. The answering model is the
        ``model`` field of the server's answers: a hosted alias (``gpt-4o``) answers as a dated snapshot
        (``gpt-4o-2024-08-06``), so judgements of two snapshots never share a key. It is learnt from the first
        answer, or, when the key is taken before any request, from one request of one token (counted in
        :attr:`usage`); an answer naming another model later in the run raises :class:`ServerError`. A
        server whose answers repeat the name (llama.cpp, vLLM) keeps the three-part key. OpenAI's
        ``system_fingerprint`` (the backend's configuration) is not part of it.
        """
        if self.served_model is None:
            self.served_model = _run(self._served_model())
        if self.answering_model is None:
            self.answers([self._probe_request()])
        extra = "" if self.answering_model in ("", self.model, self.served_model) else f"|{self.answering_model}"
        return f"{self.base_url}|{self.model}|{self.served_model}{extra}"

    def _probe_request(self) -> dict:
        """The smallest request: one token, greedy (it tells which model answers)."""
        if self.endpoint == "chat":
            return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0.0}
        return {"prompt": "Hi", "max_tokens": 1, "temperature": 0.0}

    def __repr__(self) -> str:          # never the key
        return (f"{type(self).__name__}({self.base_url!r}, {self.model!r}, endpoint={self.endpoint!r}, "
                f"api_key_env={self.api_key_env!r})")

    # --------------------------------------------------------------- rendering
    def _wrap(self, message: str, answer_prefix: str = "", *, blank: bool = True) -> dict:
        """The request's prompt: chat messages, or the whole completion text (chat template or raw, then prefix).

        A raw prompt is written as the local judges write it: the message, a blank line (a pairwise judge,
        ``blank``), the prefix."""
        msgs = ([{"role": "system", "content": self.system}] if self.system else []) + \
            [{"role": "user", "content": message}]
        if self.endpoint == "chat":
            return {"messages": msgs}
        if self.chat_template is not None:
            return {"prompt": render_chat_template(self.chat_template, msgs, **self.chat_template_tokens)
                    + answer_prefix}
        gap = "\n\n" if blank else ""
        return {"prompt": (self.system + "\n\n" if self.system else "") + message + gap + answer_prefix}

    # ------------------------------------------------------------------- HTTP
    def _headers(self) -> dict:
        key = os.environ.get(self.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _answered_by(self, data: dict) -> None:
        """Check that an answer comes from the model this run's answers came from (its ``model`` field)."""
        named = data.get("model")
        named = named if isinstance(named, str) else ""
        if self.answering_model is None:
            self.answering_model = named
        elif named and named != self.answering_model:
            raise ServerError(f"server {self.base_url} answered with model {named!r} where this run's answers came "
                              f"from {self.answering_model!r} (asked for {self.model!r}): the model behind the name "
                              "changed during the run; what is stored so far is keyed by the earlier one, so run "
                              "again to judge the rest under the new model's key")

    def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency)
        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), limits=limits)

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """Exponential backoff with jitter: a uniform draw in ``[d/2, d]``, ``d = min(max_backoff, backoff 2^attempt)``;
        at least the server's ``Retry-After`` (seconds), at most 60 s more."""
        d = min(self.max_backoff, self.backoff * 2.0 ** attempt)
        d = random.uniform(d / 2, d)
        if retry_after:
            try:
                d = max(d, min(60.0, float(retry_after)))
            except ValueError:
                pass
        return d

    def _refused(self, status: int, path: str, body: str) -> ServerError:
        where = f"server {self.base_url}"
        if status in (401, 403):
            have = "set" if os.environ.get(self.api_key_env) else "not set"
            return ServerError(f"{where} refused the API key ({status}): the key is read from ${self.api_key_env} "
                               f"({have}); give the server's key there, or --api-key-env NAME")
        if status == 404:
            return ServerError(f"{where} has no {path} or no model {self.model!r} (404: {body[:200]!r}); check the "
                               f"base URL (it usually ends in /v1) and the model name")
        return ServerError(f"{where} answered {status} to {path} for model {self.model!r}: {body[:300]!r}")

    async def _request(self, client: httpx.AsyncClient, sem: _InFlight | None, method: str, path: str,
                       payload: dict | None = None) -> dict:
        url = self.base_url + path
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:                    # the timeout bounds the whole request (httpx's bounds each read)
                if sem is None:
                    r = await asyncio.wait_for(client.request(method, url, json=payload, headers=self._headers()),
                                               self.timeout)
                else:
                    async with sem:
                        r = await asyncio.wait_for(
                            client.request(method, url, json=payload, headers=self._headers()), self.timeout)
            except (httpx.TimeoutException, asyncio.TimeoutError) as e:
                last = (f"no answer within {self.timeout:g} s ({type(e).__name__}; time queued at the server counts: "
                        "raise the timeout (--timeout) or lower the requests in flight (--max-concurrency))")
                if sem is not None:
                    sem.shrink()
            except (httpx.InvalidURL, httpx.UnsupportedProtocol) as e:     # sending it again cannot help
                raise ServerError(f"server {self.base_url}: cannot send {method} {url}: {type(e).__name__}: "
                                  f"{e}") from None
            except httpx.TransportError as e:            # refused, reset or dropped connections
                last = f"{type(e).__name__}: {e}"
            else:
                if r.status_code == 200:
                    try:
                        return r.json()
                    except ValueError:
                        raise ServerError(f"server {self.base_url} answered {path} with something that is not "
                                          f"JSON: {r.text[:200]!r}") from None
                if r.status_code not in RETRY_STATUSES:
                    raise self._refused(r.status_code, path, r.text)
                last = f"{r.status_code} {r.reason_phrase}: {r.text[:200]!r}"
                retry_after = r.headers.get("retry-after")
            if attempt < self.max_retries:
                self.usage.retries += 1
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise ServerError(f"server {self.base_url} failed {path} {self.max_retries + 1} times (model "
                          f"{self.model!r}); last: {last}")

    async def _served_model(self) -> str:
        """The id the server lists for :attr:`model` (``GET /models``; ``@root`` and ``#meta hash`` as
        :attr:`fingerprint` says), or the name itself when it lists no match; a server without ``/models``
        gives ``"?"``."""
        async with self._client() as client:
            try:
                data = await self._request(client, None, "GET", "/models")
            except ServerError as e:
                if "has no /models" in str(e):
                    return "?"
                raise
        if not isinstance(data, dict):
            raise ServerError(f"server {self.base_url} answered /models with a JSON {type(data).__name__}, not an "
                              f"OpenAI-compatible list of models: {json.dumps(data)[:200]}")
        listed = data.get("data")
        models = [m for m in (listed if isinstance(listed, list) else []) if isinstance(m, dict)]
        ids = [str(m.get("id")) for m in models]
        if self.model in ids:
            entry = models[ids.index(self.model)]
        elif len(ids) == 1:
            entry = models[0]
        else:
            return self.model
        root = entry.get("root")                # vLLM: the weights behind a served name
        sid = str(entry.get("id"))
        sid = f"{sid}@{root}" if isinstance(root, str) and root and root != sid else sid
        if entry.get("meta") is not None:       # llama-server: which GGUF answers under the alias
            what = json.dumps({"meta": entry["meta"], "owned_by": entry.get("owned_by")}, sort_keys=True, default=str)
            sid += "#" + hashlib.sha1(what.encode()).hexdigest()[:8]
        return sid

    def _count(self, data: dict) -> None:
        self.usage.requests += 1
        u = data.get("usage") or {}
        pt, ct = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
        self.usage.prompt_tokens += pt
        self.usage.completion_tokens += ct
        if self.price_per_token is not None:
            self.usage.cost += pt * self.price_per_token[0] + ct * self.price_per_token[1]

    def _check_reply(self, data, path: str) -> None:
        """Raise :class:`ServerError` (naming the URL and path) when ``data`` is not a completion reply
        (:func:`~jaxrank.judges._server_reply.reply_problem`)."""
        what = reply_problem(data)
        if what is not None:
            raise ServerError(f"server {self.base_url} answered {path} with {what}, not an OpenAI-compatible "
                              f"reply: {json.dumps(data)[:200]}")

    async def _answer(self, client, sem, body: dict, progress=None) -> dict:
        """One request's JSON answer, from memory when this very request was answered before."""
        key = hashlib.sha1(json.dumps([self.endpoint, body], sort_keys=True).encode()).hexdigest()
        if key in self._answers:
            self.usage.reused += 1
            data = self._answers[key]
        else:
            path = "/chat/completions" if self.endpoint == "chat" else "/completions"
            data = await self._request(client, sem, "POST", path, {"model": self.model, **body})
            self._check_reply(data, path)
            self._answered_by(data)
            self._count(data)
            self._answers[key] = data
        if progress is not None:
            progress(1)
        return data

    async def _answers_of(self, bodies: Sequence[dict], progress=None) -> list[dict]:
        sem = _InFlight(self.in_flight_limit)     # each call starts from the limit the earlier timeouts left
        try:
            async with self._client() as client:
                return list(await asyncio.gather(*(self._answer(client, sem, b, progress) for b in bodies)))
        finally:
            self.in_flight_limit = sem.limit

    def answers(self, bodies: Sequence[dict], progress=None) -> list[dict]:
        """The server's JSON answers to request bodies (``model`` is added), concurrently, retried, remembered."""
        return _run(self._answers_of(bodies, progress)) if bodies else []

    def _logprob_request(self, prompt: dict) -> dict:
        if self.endpoint == "chat":
            return {**prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": True,
                    "top_logprobs": self.top_logprobs}
        return {**prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": self.top_logprobs}

    @staticmethod
    def _read_words(alternatives, words: Sequence[str]) -> tuple[np.ndarray, float | None]:
        """:func:`~jaxrank.judges._server_reply.read_words`."""
        return read_words(alternatives, words)

    def _warn_few_alternatives(self, alternatives: Sequence[list]) -> None:
        """Warn once when an answer came with a single alternative (:class:`TopLogprobsWarning`)."""
        few = sum(1 for a in alternatives if len(a) == 1)
        if not few or self._few_warned:
            return
        self._few_warned = True
        warnings.warn(
            f"judge {self.name} at {self.base_url}: {few} of {len(alternatives)} answer(s) came with a single "
            f"alternative for the first answer token (top_logprobs={self.top_logprobs} asked for): the server "
            "ignores top_logprobs or gives fewer. A label (or score) not returned is then only bounded by 1 - the "
            "returned probability, so the reading rests on that bound; use a server that returns the top "
            "alternatives (llama.cpp's, vLLM) for the labels' own probabilities.",
            TopLogprobsWarning, stacklevel=3)

    @staticmethod
    def _format_alternatives(alternatives) -> str:
        return format_alternatives(alternatives)
