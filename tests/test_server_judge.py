"""The server judges against a real OpenAI-compatible server: llama.cpp's, serving the SmolLM2 GGUF.

No mock of the judge or of the server: ``llama_cpp.server`` (llama-cpp-python's
OpenAI-compatible server, built on llama.cpp) serves the same Q4_1 GGUF that
the in-process Flax judge loads, on 127.0.0.1 and a free port, started by a
fixture and stopped after. The two are independent implementations (llama.cpp's
quantised kernels and tokenizer; jaxrank's dequantised Flax network and the
Hugging Face tokenizer), so their ``p`` agree within a tolerance (:data:`P_TOL`).

Faults come from :class:`FaultProxy`, a fault injector between the judge and
the real server: it forwards every request unchanged and, when told to, answers
one request with 429 or drops its connection, or kills the server after the
n-th answer; it counts what the server answered. Skipped where llama_cpp is not
installed (``pip install -e ".[server-test]"``), unless ``JAXRANK_REQUIRE_SERVER_TESTS=1`` (as ``.ci/run`` sets
it after installing the server): then a missing server is an error, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("JAXRANK_REQUIRE_SERVER_TESTS") == "1":
    import llama_cpp.server  # noqa: F401   (required: an ImportError fails the run instead of skipping)
    import uvicorn  # noqa: F401
else:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llama_cpp.server")
    pytest.importorskip("uvicorn")

from jaxrank.assessment.run import ContextSet, judge_contexts, plan_pairs   # noqa: E402
from jaxrank.assessment.store import JudgementStore   # noqa: E402
from jaxrank.judges.prompts import pairwise_template, pointwise_template   # noqa: E402
from jaxrank.judges.reading import LabelMassError, LabelMassWarning   # noqa: E402
from jaxrank.judges.server import ServerError, ServerGEvalJudge, ServerJudge   # noqa: E402

from _fixtures_server import KEY, KEY_ENV, MODEL, FaultProxy, _free_port   # noqa: E402
from _fixtures_server import api_key, server   # noqa: E402,F401  (fixtures)


P_TOL = 0.06
"""Largest |p_server - p_flax| allowed per prompt: llama.cpp runs the Q4_1 weights with 8-bit quantised
activations, the Flax judge the dequantised float32 weights. Measured on SummEval coherence prompts (answer
prefix "Summary", ~780 tokens each): max 0.049, median 0.010 over 24 prompts; label mass max 0.013 apart. With CI's
build (LLAVA_BUILD=OFF, native CPU flags), on the 18 prompts below: max 0.032, median 0.009."""
P_TOL_MEDIAN = 0.02


@pytest.fixture(scope="module")
def texts():
    """Two SummEval articles and four of the first one's summaries, three of the second's (18 ordered pairs)."""
    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts="0:2", max_candidates=4)
    cs.candidates[1], cs.candidate_ids[1] = cs.candidates[1][:3], cs.candidate_ids[1][:3]
    return cs


SHORT = ContextSet(["c0", "c1"], ["The cat sat on the mat all afternoon, then went out to hunt mice.",
                                  "Rain fell over the city for three days and the river rose."],
                   [["x", "y", "z"], ["u", "v", "w"]],
                   [["A cat sat on a mat.", "The dog barked.", "A cat rested, then hunted."],
                    ["It rained and the river rose.", "The sun shone.", "Three days of rain."]])
"""Short texts for the fault tests: every prompt is quick for llama.cpp on two cores."""


@pytest.fixture(scope="module")
def lm():
    from jaxrank.models import load_model
    return load_model(MODEL)


TEMPLATE = pairwise_template("summeval", "coherence")


def _judge(url, **kw):
    kw.setdefault("api_key_env", KEY_ENV)
    return ServerJudge(url, MODEL, TEMPLATE, **kw)


# ----------------------------------------------------------------------------- agreement
def test_flax_and_server_agree(server, texts, lm):
    """The same prompts through llama.cpp and the in-process Flax judge give the same p within P_TOL.

    Completions endpoint with the model's chat template rendered by the client and the answer prefix
    "Summary" (labels " A"/" B"), against PromptJudge with the same prefix: 18 SummEval prompts.
    """
    from jaxrank.judges.pairwise import PromptJudge
    flax = PromptJudge(lm, TEMPLATE, answer_prefix="Summary", batch_size=12)
    srv = _judge(server.url, answer_prefix="Summary", chat_template=lm.chat_template, max_concurrency=2)
    assert srv.endpoint == "completions"
    diffs, mass_d = [], []
    for k in range(len(texts.ids)):
        ctx, cands = texts.texts[k], texts.candidates[k]
        i, j = plan_pairs(len(cands))
        # the client renders exactly the text the Flax judge reads
        assert srv.request_prompt(ctx, cands[0], cands[1])["prompt"] == flax.prompt_text(ctx, cands[0], cands[1])
        a = flax.compare(ctx, cands, i, j)
        b = srv.compare(ctx, cands, i, j)
        diffs.append(np.abs(a.p - b.p))
        mass_d.append(np.abs(a.label_mass - b.label_mass))
    d = np.concatenate(diffs)
    print(f"\n|p_server - p_flax| over {d.size} prompts: max {d.max():.4f}, median {np.median(d):.4f}; "
          f"label mass: max {np.concatenate(mass_d).max():.4f}")
    assert d.max() < P_TOL and np.median(d) < P_TOL_MEDIAN
    assert srv.usage.requests == d.size and srv.usage.prompt_tokens > 0


def test_chat_endpoint_and_geval(server, lm):
    """The chat endpoint (the server applies the GGUF's chat template) reads the labels; G-Eval through the
    server (completions endpoint, a raw prompt ending in the form field, where the score tokens hold most of
    the answer) gives scores on the 1-5 scale close to the Flax G-Eval judge's."""
    from jaxrank.judges.pointwise import GEvalJudge
    ctx, cands = SHORT.texts[0], SHORT.candidates[0]
    srv = _judge(server.url, min_label_mass=0.0)
    assert srv.endpoint == "chat"
    res = srv.compare(ctx, cands, [0, 1], [1, 0])
    assert res.p.shape == (2,) and np.all((res.p > 0) & (res.p < 1)) and np.all(res.label_mass <= 1.0 + 1e-6)
    assert srv.reading.kind == "logprobs" and "top-20" in srv.reading.note

    steps = "1. Read the source text.\n2. Read the summary.\n3. Rate its coherence from 1 to 5."
    t = pointwise_template("coherence")
    g_srv = ServerGEvalJudge(server.url, MODEL, t, steps=steps, api_key_env=KEY_ENV, min_label_mass=0.0,
                             endpoint="completions", answer_prefix=" ")
    g_flax = GEvalJudge(lm, t, steps=steps, min_label_mass=0.0, chat=False)
    assert g_srv.request_prompt(ctx, cands[0])["prompt"] == g_flax.prompt_text(ctx, cands[0])
    a, b = g_flax.score(ctx, cands), g_srv.score(ctx, cands)
    assert np.all((b.scores >= 1) & (b.scores <= 5))
    print(f"\nG-Eval scores: server {np.round(b.scores, 3)}, flax {np.round(a.scores, 3)}; label mass: server "
          f"{np.round(b.label_mass, 3)}, flax {np.round(a.label_mass, 3)}")
    assert np.abs(a.scores - b.scores).max() < 0.35        # measured: 0.23 apart at most (3 candidates)
    c = g_srv.compare(ctx, cands, [0], [1])
    assert c.p[0] == pytest.approx(1 / (1 + np.exp(b.scores[1] - b.scores[0])), abs=1e-5)


def test_sampled_reading_without_logprobs(server):
    """logprobs=False: p is the share of n sampled answers naming A (LCA eq. 4-5), and the judge says so
    (llama.cpp's server ignores n: the judge asks again, one answer per request, until it has n)."""
    ctx, cands = SHORT.texts[0], SHORT.candidates[0]
    srv = _judge(server.url, logprobs=False, num_samples=3, temperature=1.0, max_new_tokens=3, min_label_mass=0.0)
    res = srv.compare(ctx, cands, [0], [1])
    assert srv.reading.kind == "sampled" and "eq. 4-5" in srv.reading.note
    assert np.round(res.p[0] * 6) == res.p[0] * 6 and res.logits.sum() <= 3    # multiples of 1/6
    assert srv.usage.requests == 3       # no key taken: no request naming the answering model


# ------------------------------------------------------------------------------- faults
def test_429_and_dropped_connection_are_retried(server):
    """A 429 and a dropped connection (from the fault injector) are retried; the answers are the clean ones."""
    ctx, cands = SHORT.texts[0], SHORT.candidates[0]
    i, j = [0, 1, 2], [1, 2, 0]
    clean = _judge(server.url, answer_prefix="Summary", min_label_mass=0.0).compare(ctx, cands, i, j)
    proxy = FaultProxy(server)
    try:
        proxy.faults = ["429", "drop", "429"]
        srv = _judge(proxy.url, answer_prefix="Summary", backoff=0.05, max_backoff=0.2, max_concurrency=1,
                     min_label_mass=0.0)
        res = srv.compare(ctx, cands, i, j)
    finally:
        proxy.close()
    assert srv.usage.retries == 3 and srv.usage.requests == 3 and proxy.answered == 3 and not proxy.faults
    np.testing.assert_allclose(res.p, clean.p, atol=1e-4)


def test_server_killed_mid_run_loses_and_repeats_nothing(server, tmp_path):
    """judge_contexts into a store while the server is killed after its 4th answer and restarted: every planned
    comparison is in the store once, the server answered each exactly once, and a rerun asks for nothing but the
    one-token request naming the answering model (its key)."""
    proxy = FaultProxy(server)
    restarted = threading.Event()

    def kill_then_restart(n):
        if n == 4:
            server.kill()
            threading.Thread(target=lambda: (time.sleep(0.5), server.start(), restarted.set()), daemon=True).start()

    proxy.on_answer = kill_then_restart
    path = tmp_path / "store.jsonl"
    try:
        srv = _judge(proxy.url, answer_prefix="Summary", backoff=0.2, max_backoff=2.0, max_retries=60,
                     max_concurrency=2, min_label_mass=0.0)
        sel = judge_contexts(srv, SHORT, JudgementStore(path), progress=False)
        assert restarted.is_set()
        planned = sum(len(c) * (len(c) - 1) for c in SHORT.candidates)
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        keys = [(r["context"], r["a"], r["b"]) for r in lines if "p" in r]
        assert len(keys) == len(set(keys)) == planned == len(JudgementStore(path))   # nothing lost or doubled
        assert proxy.answered == planned == srv.usage.requests       # nothing paid twice
        assert srv.usage.retries >= 1
        assert int(np.sum(np.asarray(sel.comparisons.weight) > 0)) == planned
        again = _judge(proxy.url, answer_prefix="Summary", logprobs=True)     # "auto" would probe once
        judge_contexts(again, SHORT, JudgementStore(path), progress=False)
        assert proxy.answered == planned + 1 and again.usage.requests == 1
        assert proxy.bodies[-1]["max_tokens"] == 1
        assert KEY not in path.read_text()
    finally:
        proxy.close()


def test_wrong_url_or_key_names_the_server(server, monkeypatch):
    ctx, cands = SHORT.texts[0], SHORT.candidates[0]
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(ServerError, match=f"server {dead} failed"):
        _judge(dead, max_retries=1, backoff=0.05).compare(ctx, cands, [0], [1])
    bad_path = server.url[:-3] + "/nope"
    with pytest.raises(ServerError, match=f"server {bad_path} has no"):
        _judge(bad_path, max_retries=0).compare(ctx, cands, [0], [1])
    monkeypatch.setenv(KEY_ENV, "wrong-key")
    judge = _judge(server.url, max_retries=0)
    with pytest.raises(ServerError, match=f"server {server.url} refused the API key .*\\${KEY_ENV}") as e:
        judge.compare(ctx, cands, [0], [1])
    assert "wrong-key" not in str(e.value) and "wrong-key" not in repr(judge)


def test_label_mass_warning_and_strict(server):
    """Labels the model never answers: a LabelMassWarning naming the server's alternatives; strict refuses."""
    ctx, cands = SHORT.texts[0], SHORT.candidates[0]
    t = pairwise_template("summeval", "coherence", labels=("Zebra", "Yak"))
    srv = ServerJudge(server.url, MODEL, t, api_key_env=KEY_ENV)
    with pytest.warns(LabelMassWarning, match="top-20 alternatives"):
        res = srv.compare(ctx, cands, [0], [1])
    assert res.label_mass[0] < 0.5 and res.p[0] == 0.5
    strict = ServerJudge(server.url, MODEL, t, api_key_env=KEY_ENV, strict=True)
    with pytest.raises(LabelMassError):
        strict.compare(ctx, cands, [0], [1])


def test_options_and_fingerprint(server):
    j = _judge(server.url, price_per_token=(1e-6, 2e-6))
    assert j.name == f"server:{MODEL}" and j.fingerprint == f"{server.url}|{MODEL}|{MODEL}"
    assert KEY not in repr(j) and KEY not in j.fingerprint
    j.compare(SHORT.texts[0], SHORT.candidates[0], [0], [1])
    u = j.usage        # the key was taken first: one one-token request naming the answering model, then the pair
    assert u.requests == 2 and u.cost == pytest.approx(u.prompt_tokens * 1e-6 + u.completion_tokens * 2e-6)
    with pytest.raises(ValueError, match="prefill"):
        _judge(server.url, endpoint="chat", answer_prefix="Summary")
    with pytest.raises(ValueError, match="one word"):
        ServerJudge(server.url, MODEL, pairwise_template("summeval", "coherence", labels=("Summary A", "Summary B")))
    with pytest.raises(ValueError, match="base_url"):
        ServerJudge("127.0.0.1:8000", MODEL, TEMPLATE)


def test_command_line(server, tmp_path, monkeypatch, capsys):
    """`jaxrank judge --judge server:MODEL --base-url URL --api-key-env NAME`: judged into the store through the
    server; a wrong key ends in one line naming the server; no --base-url is a usage error."""
    from jaxrank.cli import main
    monkeypatch.setenv("JAXRANK_DATA", os.environ.get("JAXRANK_DATA", str(Path(__file__).parents[2] / "shared/data")))
    store = tmp_path / "s.jsonl"
    args = ["judge", "--judge", f"server:{MODEL}", "--base-url", server.url, "--api-key-env", KEY_ENV,
            "--answer-prefix", "Summary", "--aspect", "coherence", "--contexts", "0:1", "--candidates", "2",
            "--max-concurrency", "2", "--no-progress", "--store", str(store)]
    main(args)
    recs = [json.loads(x) for x in store.read_text().splitlines() if x.strip()]
    assert len([r for r in recs if "p" in r]) == 2 and all(r["judge"] == f"server:{MODEL}" for r in recs if "p" in r)
    assert KEY not in store.read_text()
    monkeypatch.setenv(KEY_ENV, "wrong-key")
    with pytest.raises(SystemExit, match=f"jaxrank: server {server.url} refused the API key") as e:
        main(args[:-1] + [str(tmp_path / "s2.jsonl")])
    assert "wrong-key" not in str(e.value)
    with pytest.raises(SystemExit) as e:
        main(["judge", "--judge", f"server:{MODEL}", "--contexts", "0:1"])
    assert e.value.code == 2


def test_diagnose_through_the_server(server, texts, monkeypatch, capsys):
    """diagnose_judge on a server judge: its top answers are the alternatives the server returned, its p and label
    mass those of the same prompts asked directly; `jaxrank judge --judge server:MODEL --diagnose` prints both
    readings (without and with the answer prefix) with a verdict."""
    from jaxrank.assessment.diagnose import diagnose_judge, sample_pairs
    from jaxrank.cli import main
    judge = _judge(server.url, answer_prefix="Summary", min_label_mass=0.0)
    d = diagnose_judge(judge, texts, num_pairs=2, seed=0)
    k, a, b = sample_pairs(texts, 2, seed=0)[0]
    direct = _judge(server.url, answer_prefix="Summary", min_label_mass=0.0)
    res = direct.compare(texts.texts[k], texts.candidates[k], [a, b], [b, a])
    np.testing.assert_allclose(d.p[0], res.p, atol=1e-4)
    np.testing.assert_allclose(d.label_mass[0], res.label_mass, atol=1e-4)
    alts = direct.last_alternatives[0]
    assert [t for t, _ in d.top_tokens[0][0]] == [t for t, _ in alts[:5]]
    assert d.top_tokens[0][0][0][1] == pytest.approx(np.exp(alts[0][1]), rel=1e-4)
    assert sum(q for _, q in d.top_tokens[0][0]) <= 1 + 1e-6 and d.labels == ("A", "B")

    monkeypatch.setenv("JAXRANK_DATA", os.environ.get("JAXRANK_DATA", str(Path(__file__).parents[2] / "shared/data")))
    main(["judge", "--judge", f"server:{MODEL}", "--base-url", server.url, "--api-key-env", KEY_ENV,
          "--answer-prefix", "Summary", "--aspect", "coherence", "--contexts", "0:2", "--candidates", "3",
          "--diagnose", "1"])
    out = capsys.readouterr().out
    assert out.count(f"## Diagnosis: judge server:{MODEL}") == 2 and out.count("**Verdict:**") == 2
    assert "without an answer prefix" in out and "with --answer-prefix Summary" in out
    assert "top next tokens at the answer position (first prompt): '" in out


def test_zepo_paraphraser_through_the_server(server, tmp_path, monkeypatch):
    """ZEPO's optimiser behind the server: ServerParaphraser sends the local Paraphraser's request, one request per
    proposal with its own seed (seen by a recording proxy in front of the real server); `jaxrank zepo
    --paraphraser server:MODEL --base-url URL` logs the server's proposals and scores them with the local judge.
    (llama.cpp's server does not sample reproducibly across runs when it reuses its cache, so the proposals
    themselves are not compared between runs.)"""
    from jaxrank.assessment.zepo import PARAPHRASE_INSTRUCTION
    from jaxrank.cli import main
    from jaxrank.judges.server import ServerParaphraser

    proxy = FaultProxy(server)
    try:
        para = ServerParaphraser(proxy.url, MODEL, "coherence", request=PARAPHRASE_INSTRUCTION, max_new_tokens=48,
                                 api_key_env=KEY_ENV, seed=3)
        instr = "Which summary is more coherent, A or B? Judge the coherence of the summaries."
        first = para.propose(instr, 3, 1)
        assert len(first) == 3 and all(first) and para.usage.requests == 3 and para.usage.completion_tokens > 0
        assert len(set(first)) > 1                                # one seed per proposal: not one answer thrice
        assert sorted(b["seed"] for b in proxy.bodies) == [3 * 1_000_003 + 1_000 + k for k in range(3)]
        msg = PARAPHRASE_INSTRUCTION.replace("[ASPECT]", "coherence") + "\n\nInstruction: " + instr
        assert all(b["messages"] == [{"role": "user", "content": msg}] and b["temperature"] == 0.9
                   for b in proxy.bodies)
        with pytest.raises(ValueError, match="ASPECT"):
            ServerParaphraser(server.url, MODEL, "coherence", request="Paraphrase this.")

        monkeypatch.setenv("JAXRANK_DATA",
                           os.environ.get("JAXRANK_DATA", str(Path(__file__).parents[2] / "shared/data")))
        log = tmp_path / "log.jsonl"
        proxy.bodies.clear()
        main(["zepo", "--judge", MODEL, "--paraphraser", f"server:{MODEL}", "--base-url", proxy.url,
              "--api-key-env", KEY_ENV, "--aspect", "coherence", "--contexts", "0:1", "--candidates", "2",
              "--sample-contexts", "1", "--budget", "1", "--epochs", "1", "--population", "2", "--seed", "5",
              "--no-progress", "--store", str(tmp_path / "s.jsonl"), "--log", str(log),
              "--output", str(tmp_path / "t.json")])
    finally:
        proxy.close()
    events = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    config = next(e for e in events if e["event"] == "config")
    assert config["paraphraser"] == f"server:{MODEL}" and KEY not in log.read_text()
    prop = next(e for e in events if e["event"] == "proposals" and e["epoch"] == 1)
    bodies = [b for b in proxy.bodies if b.get("max_tokens") != 1]     # not the request naming the model
    assert len(prop["instructions"]) == 2 and len(bodies) == 2            # the server proposed them
    assert sorted(b["seed"] for b in bodies) == [5 * 1_000_003 + 1_000 + k for k in range(2)]
    assert prop["from"] in bodies[0]["messages"][0]["content"]
    epoch = next(e for e in events if e["event"] == "epoch" and e["epoch"] == 1)
    assert epoch["accepted"] + epoch["rejected"] == 2             # each proposal scored by the judge or refused
    with pytest.raises(SystemExit) as e:
        main(["zepo", "--paraphraser", f"server:{MODEL}", "--contexts", "0:1"])
    assert e.value.code == 2
