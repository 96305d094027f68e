"""How the server judges read replies, and their request plumbing, against a fake OpenAI-compatible server.

The server here (:class:`Fake`, ``http.server`` in a thread) answers with hand-written replies in both shapes the
judges meet: the chat shape ``logprobs.content[0].top_logprobs`` (OpenAI's chat API; llama.cpp's ``llama-server``
on ``/v1/completions`` as well) and the legacy completions shape (``top_logprobs`` as a list of dicts). It verifies
the reply parsing and the retry, timeout and validation plumbing, not a real llama.cpp server: the real-server
tests are tests/test_server_judge.py and tests/test_server_keys.py, which CI runs with llama-cpp-python. It needs
no llama_cpp, so it runs everywhere. Every expected value is computed by hand from the probabilities served.
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from jaxrank.judges.prompts import pairwise_template, pointwise_template
from jaxrank.judges.server import ServerGEvalJudge, ServerJudge

TEMPLATE = pairwise_template("summeval", "coherence")        # labels "A", "B"; no answer prefix
POINTWISE = pointwise_template("coherence")                    # scores "1" .. "5"


class Fake:
    """An OpenAI-compatible server on 127.0.0.1 answering what its attributes say.

    Attributes:
        alts: the ``(token, probability)`` alternatives of the one answer token, most likely first.
        shape: ``"chat"`` (``logprobs.content``) or ``"legacy"`` (``top_logprobs`` list of dicts) for the replies.
        models: the ``/models`` entries (a string: the raw ``/models`` body).
        statuses: statuses answered (in order, one per request) before a normal answer.
        body: a raw 200 body answered instead of a normal answer (``None``: normal answers).
        delay: seconds slept before each normal answer; ``trickle``: seconds between the bytes of a body.
        serial: answer one request at a time, as llama.cpp's server does (the rest wait, ``delay`` each).
        posts: the POST requests' JSON bodies, in arrival order.
        active, peak: requests being answered now, and the most at once since ``peak`` was set to 0.
    """

    def __init__(self):
        self.alts = [("A", 0.6), ("B", 0.3), ("The", 0.1)]
        self.shape = "chat"
        self.models = [{"id": "m", "object": "model"}]
        self.statuses: list[int] = []
        self.body: str | None = None
        self.delay = self.trickle = 0.0
        self.serial = False
        self.active = self.peak = 0
        self.one_at_a_time = threading.Lock()
        self.posts: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: str):
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if fake.trickle:
                        for k in range(len(data)):
                            self.wfile.write(data[k:k + 1])
                            self.wfile.flush()
                            time.sleep(fake.trickle)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):     # the client gave up (a timeout test)
                    pass

            def do_GET(self):
                if self.path.endswith("/models") and isinstance(fake.models, str):
                    return self._send(200, fake.models)
                if self.path.endswith("/models"):
                    return self._send(200, json.dumps({"object": "list", "data": fake.models}))
                self._send(404, "{}")

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with fake.lock:
                    fake.posts.append(req)
                    status = fake.statuses.pop(0) if fake.statuses else None
                if status is not None:
                    return self._send(status, json.dumps({"error": {"message": f"status {status}"}}))
                if fake.body is not None:
                    return self._send(200, fake.body)
                with fake.lock:
                    fake.active += 1
                    fake.peak = max(fake.peak, fake.active)
                try:
                    if fake.serial:
                        with fake.one_at_a_time:
                            time.sleep(fake.delay)
                    elif fake.delay:
                        time.sleep(fake.delay)
                    self._send(200, json.dumps(fake.reply(self.path.endswith("/chat/completions"))))
                finally:
                    with fake.lock:
                        fake.active -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reply(self, chat: bool) -> dict:
        alts = [(t, math.log(p)) for t, p in self.alts]
        first = alts[0][0] if alts else ""
        if self.shape == "chat":
            lp = {"content": [{"token": first, "logprob": alts[0][1] if alts else 0.0,
                               "top_logprobs": [{"token": t, "logprob": v} for t, v in alts]}]}
        else:
            lp = {"tokens": [first], "token_logprobs": [alts[0][1] if alts else 0.0],
                  "top_logprobs": [dict(alts)], "text_offset": [0]}
        choice = {"index": 0, "logprobs": lp, "finish_reason": "length"}
        choice.update({"message": {"role": "assistant", "content": first}} if chat else {"text": first})
        return {"model": "m", "choices": [choice], "usage": {"prompt_tokens": 10, "completion_tokens": 1}}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    f = Fake()
    yield f
    f.close()


def _judge(url, **kw):
    kw.setdefault("logprobs", True)
    kw.setdefault("min_label_mass", 0.0)
    return ServerJudge(url, "m", TEMPLATE, **kw)


# ----------------------------------------------------------------------------------------------- reply shapes
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("shape", ["chat", "legacy"])
def test_both_logprob_shapes_are_read_on_both_endpoints(fake, endpoint, shape):
    """A 0.6, B 0.3, "The" 0.1: p = 0.6 / 0.9 = 2/3 and the label mass 0.9, whichever shape the reply has
    (llama-server answers /v1/completions in the chat shape)."""
    fake.shape = shape
    res = _judge(fake.url, endpoint=endpoint).compare("ctx", ["x", "y"], [0, 1], [1, 0])
    np.testing.assert_allclose(res.p, [2 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(res.label_mass, [0.9, 0.9], rtol=1e-6)


@pytest.mark.parametrize("shape", ["chat", "legacy"])
def test_geval_reads_both_shapes_on_completions(fake, shape):
    """Scores 4 (0.6), 3 (0.3), 5 (0.05), "x" (0.05): score = (4 .6 + 3 .3 + 5 .05) / .95 (g-eval eq. 1)."""
    fake.shape = shape
    fake.alts = [("4", 0.6), ("3", 0.3), ("5", 0.05), ("x", 0.05)]
    res = ServerGEvalJudge(fake.url, "m", POINTWISE, endpoint="completions", steps="s",
                           min_label_mass=0.0).score("ctx", ["a"])
    np.testing.assert_allclose(res.scores, [(4 * .6 + 3 * .3 + 5 * .05) / .95], rtol=1e-6)


# ------------------------------------------------------------------------------------------------ absent labels
def test_an_absent_label_is_bounded_by_what_the_returned_leave(fake):
    """A 0.6 and "The" 0.3 returned: P(B) <= min(0.3, 1 - 0.9) = 0.1, so p = 0.6 / 0.7; the label mass 0.6.
    (The smallest returned probability alone, 0.3, gave p = 2/3.)"""
    fake.alts = [("A", 0.6), ("The", 0.3)]
    with pytest.warns(Warning) as record:
        res = _judge(fake.url, endpoint="chat").compare("ctx", ["x", "y"], [0], [1])
    np.testing.assert_allclose(res.p, [0.6 / 0.7], rtol=1e-6)
    np.testing.assert_allclose(res.label_mass, [0.6], rtol=1e-6)
    np.testing.assert_allclose(res.logits[0], np.log([0.6, 0.1]), rtol=1e-5)
    from jaxrank.judges.server import TopLogprobsWarning
    assert not any(issubclass(w.category, TopLogprobsWarning) for w in record)   # two alternatives: no warning


@pytest.mark.parametrize("shape", ["chat", "legacy"])
def test_a_single_returned_alternative_is_bounded_and_warned(fake, shape):
    """Only the chosen token comes back (the server ignores top_logprobs): A 0.9 gives P(B) <= 0.1 and p = 0.9
    (was 1/2: the absent label took the smallest returned probability, A's own); B 0.8 alone gives p = 0.2 / 1.
    A TopLogprobsWarning says so, once."""
    from jaxrank.judges.server import TopLogprobsWarning
    fake.shape = shape
    judge = _judge(fake.url, endpoint="chat")
    fake.alts = [("A", 0.9)]
    with pytest.warns(TopLogprobsWarning, match="single alternative"):
        res = judge.compare("ctx", ["x", "y"], [0], [1])
    np.testing.assert_allclose(res.p, [0.9], rtol=1e-6)
    fake.alts = [("B", 0.8)]
    import warnings
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        res = judge.compare("ctx2", ["x", "y"], [0], [1])
    np.testing.assert_allclose(res.p, [0.2 / (0.2 + 0.8)], rtol=1e-6)
    assert not any(issubclass(w.category, TopLogprobsWarning) for w in record)   # warned once per judge


def test_a_certain_label_leaves_nothing_for_the_other(fake):
    """A returned with probability 1: the other label's bound is 0, floored at 1e-12 so its log stays finite;
    p = 1 / (1 + 1e-12)."""
    fake.alts = [("A", 1.0)]
    with pytest.warns(Warning):
        res = _judge(fake.url, endpoint="chat").compare("ctx", ["x", "y"], [0], [1])
    assert np.isfinite(res.logits).all()
    np.testing.assert_allclose(res.logits[0], [0.0, math.log(1e-12)], rtol=1e-5)
    np.testing.assert_allclose(res.p, [1.0], atol=1e-7)


# ------------------------------------------------------------------------------------------------- store keys
def _meta_hash(entry: dict) -> str:
    import hashlib
    what = json.dumps({"meta": entry["meta"], "owned_by": entry.get("owned_by")}, sort_keys=True)
    return hashlib.sha1(what.encode()).hexdigest()[:8]


def test_two_models_behind_one_alias_get_two_keys(fake):
    """llama-server lists each GGUF's ``meta`` under ``/models``: two models served as "m" at one URL differ in
    the fingerprint by a hash of it; an entry without ``meta`` keeps the plain ``url|m|m`` key."""
    small = {"id": "m", "object": "model", "owned_by": "llamacpp",
             "meta": {"n_params": 134515008, "size": 100000000, "n_vocab": 49152}}
    large = {**small, "meta": {"n_params": 1543714304, "size": 986046464, "n_vocab": 151936}}
    fake.models = [small]
    a = _judge(fake.url, endpoint="chat").fingerprint
    fake.models = [large]
    b = _judge(fake.url, endpoint="chat").fingerprint
    assert a == f"{fake.url}|m|m#{_meta_hash(small)}" and b == f"{fake.url}|m|m#{_meta_hash(large)}" and a != b
    fake.models = [{"id": "m", "object": "model", "owned_by": "me"}]           # llama-cpp-python, hosted APIs
    assert _judge(fake.url, endpoint="chat").fingerprint == f"{fake.url}|m|m"


# ------------------------------------------------------------------------------------------- requests in flight
def test_the_halved_in_flight_limit_holds_across_calls(fake):
    """A server answering one request at a time (0.3 s each) makes eight requests in flight time out at 1 s (the
    eighth waits at least 7 x 0.3 s): the judge halves its limit, and its next call starts from that limit,
    never sending more at once (it used to start again from max_concurrency and time out again)."""
    fake.serial, fake.delay = True, 0.3
    judge = _judge(fake.url, endpoint="chat", max_concurrency=8, timeout=1.0, backoff=0.05, max_backoff=0.1,
                   max_retries=8)
    i, j = [0, 1, 2, 3, 4, 0, 1, 2], [1, 2, 3, 4, 0, 2, 3, 4]
    judge.compare("ctx0", ["a", "b", "c", "d", "e"], i, j)
    assert judge.usage.retries > 0                      # timeouts: the limit was halved at least once (<= 4)
    time.sleep(1.5)                              # the timed-out requests the server still holds are answered
    fake.peak = 0
    retries = judge.usage.retries
    res = judge.compare("ctx1", ["a", "b", "c", "d", "e"], i, j)
    np.testing.assert_allclose(res.p, np.full(8, 2 / 3), rtol=1e-6)
    assert fake.peak <= 4 and judge.usage.retries - retries <= 1
    assert fake.peak <= judge.in_flight_limit < 8


# ------------------------------------------------------------------------------------------ URLs and bad replies
@pytest.mark.parametrize("url, match", [("http://127.0.0.1:99999/v1", "port must be in 1..65535"),
                                        ("http://", "has no host"), ("http:///v1", "has no host"),
                                        ("http://bad host/v1", "no spaces"), ("ftp://h/v1", "http"),
                                        ("http://u:secret@h/v1", "user name or password"),
                                        ("http://h/v1?x=1", "without \\?query")])
def test_a_bad_base_url_is_refused_at_once(url, match):
    with pytest.raises(ValueError, match=match) as e:
        _judge(url)
    assert "base_url" in str(e.value) and "secret" not in str(e.value)


def test_an_unsendable_url_is_not_retried(fake):
    """An URL httpx cannot send (no host, set after the checks) fails at once: a ServerError, no retries."""
    from jaxrank.judges.server import ServerError
    judge = _judge(fake.url, endpoint="chat", backoff=0.05, max_backoff=0.1, max_retries=3)
    judge.base_url = "http://"
    with pytest.raises(ServerError, match="cannot send"):
        judge.compare("ctx", ["x", "y"], [0], [1])
    assert judge.usage.retries == 0


@pytest.mark.parametrize("body, what", [("[1, 2]", "a JSON list"), ('"hello"', "a JSON str"),
                                        ('{"choices": {"a": 1}}', "no list of choices"),
                                        ('{"choices": []}', "no list of choices"),
                                        ('{"model": "m"}', "no list of choices"),
                                        ('{"choices": ["A"]}', "choices that are not objects"),
                                        ('{"choices": [{"logprobs": [1]}]}', "logprobs that are not an object")])
def test_a_reply_that_is_not_a_completion_is_a_server_error(fake, body, what):
    """A 200 answer whose JSON is not an object with a non-empty list of choice objects: a ServerError naming the
    server and the path (it was an AttributeError or KeyError), not retried."""
    from jaxrank.judges.server import ServerError
    fake.body = body
    judge = _judge(fake.url, endpoint="chat", max_retries=2, backoff=0.05)
    with pytest.raises(ServerError, match=what) as e:
        judge.compare("ctx", ["x", "y"], [0], [1])
    assert fake.url in str(e.value) and "/chat/completions" in str(e.value) and len(fake.posts) == 1


def test_a_models_list_that_is_not_an_object_is_a_server_error(fake):
    from jaxrank.judges.server import ServerError
    fake.models = '[{"id": "m"}]'
    with pytest.raises(ServerError, match="/models with a JSON list"):
        _judge(fake.url, endpoint="chat").fingerprint


# ----------------------------------------------------------------------------------------------------- retries
def test_retriable_statuses_are_retried_and_others_are_not(fake):
    """Two 503s then an answer: three requests, two retries, p = 0.6 / 0.9; a 400 fails at once (one request)."""
    from jaxrank.judges.server import ServerError
    fake.statuses = [503, 503]
    judge = _judge(fake.url, endpoint="chat", backoff=0.01, max_backoff=0.02)
    np.testing.assert_allclose(judge.compare("ctx", ["x", "y"], [0], [1]).p, [2 / 3], rtol=1e-6)
    assert len(fake.posts) == 3 and judge.usage.retries == 2 and judge.usage.requests == 1
    fake.statuses = [400]
    with pytest.raises(ServerError, match="answered 400"):
        _judge(fake.url, endpoint="chat", backoff=0.01).compare("ctx2", ["x", "y"], [0], [1])
    assert len(fake.posts) == 4


# ---------------------------------------------------------------------------------------------------- timeouts
def test_the_timeout_bounds_the_whole_request(fake):
    """An answer whose bytes trickle in 0.01 s apart (each read well within the timeout) takes over 3 s in all:
    with timeout=1 and no retries the request fails after about 1 s (it used to wait for the whole body)."""
    from jaxrank.judges.server import ServerError
    fake.trickle = 0.01                          # the reply is > 300 bytes
    judge = _judge(fake.url, endpoint="chat", timeout=1.0, max_retries=0)
    t0 = time.perf_counter()
    with pytest.raises(ServerError, match="no answer within 1 s"):
        judge.compare("ctx", ["x", "y"], [0], [1])
    assert time.perf_counter() - t0 < 2.5
    assert len(json.dumps(fake.reply(True))) > 300


# ----------------------------------------------------------------------------------------------------- endpoints
def test_geval_auto_endpoint_takes_completions_for_an_answer_prefix(fake):
    """endpoint="auto" with an answer prefix is the completions endpoint, as for ServerJudge (it raised): the prompt
    sent ends with the prefix; scores 2 (0.5), 3 (0.25), "x" (0.25): score = (2 .5 + 3 .25) / .75."""
    fake.alts = [("2", 0.5), ("3", 0.25), ("x", 0.25)]
    judge = ServerGEvalJudge(fake.url, "m", POINTWISE, answer_prefix=" ", steps="s", min_label_mass=0.0)
    assert judge.endpoint == "completions"
    res = judge.score("ctx", ["a"])
    np.testing.assert_allclose(res.scores, [(2 * .5 + 3 * .25) / .75], rtol=1e-6)
    plain = ServerGEvalJudge(fake.url, "m", POINTWISE, endpoint="completions", steps="s")
    assert fake.posts[-1]["prompt"] == plain.request_prompt("ctx", "a")["prompt"] + " "
    assert ServerGEvalJudge(fake.url, "m", POINTWISE, steps="s").endpoint == "chat"
    with pytest.raises(ValueError, match="endpoint='chat'"):
        ServerGEvalJudge(fake.url, "m", POINTWISE, endpoint="chat", answer_prefix=" ", steps="s")
