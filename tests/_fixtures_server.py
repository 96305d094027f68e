"""A real llama.cpp server for the server judges' tests, and a fault injector in front of it.

:class:`LlamaServer` runs llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) on the
SmolLM2 GGUF, on 127.0.0.1 and a free port. :class:`FaultProxy` forwards every request unchanged to it and, when
told to, answers one request with 429, drops its connection, renames the model the answers name
(``answer_model``: a hosted alias answering as a dated snapshot), or calls back after the n-th answer (to kill the
server mid-run). Neither is a mock: every answer is the real server's.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jaxrank.models.registry import resolve

KEY_ENV = "JAXRANK_TEST_SERVER_KEY"
KEY = "test-key-4f1c9e"
MODEL = "smollm2-135m"

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on 127.0.0.1:port."""

    def __init__(self, port: int, log: Path):
        self.port, self.log, self.proc = port, log, None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> None:
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(resolve(MODEL)), "--model_alias", MODEL,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048", "--n_threads", "2",
               "--api_key", KEY, "--logits_all", "true", "--verbose", "false"]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                req = urllib.request.Request(self.url + "/models", headers={"Authorization": f"Bearer {KEY}"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"llama_cpp.server did not answer within {timeout} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class FaultProxy:
    """A fault injector in front of the real server (not a mock of the judge or the server).

    Every request is forwarded unchanged to the llama.cpp server and its answer
    returned; a request the server cannot take (it is down) gets 502, as a
    gateway answers. ``faults`` (a list) is consumed one per POST: ``"429"``
    answers that POST with 429 Too Many Requests (``Retry-After: 0``) without
    forwarding it, ``"drop"`` closes its connection without any answer.
    ``answered`` counts the POSTs the server answered with 200; ``on_answer``
    (called with that count) lets a test kill the server mid-run.
    """

    def __init__(self, upstream: LlamaServer):
        self.upstream, self.faults, self.answered, self.on_answer = upstream, [], 0, None
        self.answer_model = None    # a name put in the "model" field of every answer (None: the server's own)
        self.bodies = []            # the JSON bodies of the POSTs, as sent
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._forward("GET")

            def do_POST(self):
                self._forward("POST")

            def _reply(self, status, data, extra=()):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _forward(self, method):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if method == "POST":
                    proxy.bodies.append(json.loads(body))
                with proxy.lock:
                    fault = proxy.faults.pop(0) if method == "POST" and proxy.faults else None
                if fault == "429":
                    return self._reply(429, b'{"error": "rate limited (fault injector)"}', [("Retry-After", "0")])
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream.port, timeout=300)
                    conn.request(method, self.path, body=body or None, headers=headers)
                    r = conn.getresponse()
                    data, status = r.read(), r.status
                    conn.close()
                except OSError:
                    return self._reply(502, b'{"error": "upstream down (fault injector)"}')
                if method == "POST" and status == 200:
                    with proxy.lock:
                        proxy.answered += 1
                        n = proxy.answered
                    if proxy.on_answer is not None:
                        proxy.on_answer(n)
                    if proxy.answer_model is not None:
                        data = json.dumps({**json.loads(data), "model": proxy.answer_model}).encode()
                self._reply(status, data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real llama.cpp server for one test module, stopped after it."""
    s = LlamaServer(_free_port(), tmp_path_factory.mktemp("llama") / "server.log")
    s.start()
    yield s
    s.kill()


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    """The test key in the environment variable the judges read."""
    monkeypatch.setenv(KEY_ENV, KEY)
