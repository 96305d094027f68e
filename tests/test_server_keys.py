"""What keys a server judge's stored results, against a real llama.cpp server (review of 11-27, defects 1-4, 9).

Every answer is the real server's (:class:`_fixtures_server.FaultProxy` only renames the model an answer names,
as a hosted alias answering as a dated snapshot does). Skipped without llama-cpp-python, unless
``JAXRANK_REQUIRE_SERVER_TESTS=1`` (``.ci/run`` runs this file with the server built).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("JAXRANK_REQUIRE_SERVER_TESTS") == "1":
    import llama_cpp.server  # noqa: F401   (required: an ImportError fails the run instead of skipping)
else:
    pytest.importorskip("llama_cpp.server")

from jaxrank.assessment.run import ContextSet, judge_contexts   # noqa: E402
from jaxrank.assessment.store import JudgementStore   # noqa: E402
from jaxrank.judges.prompts import pairwise_template, pointwise_template   # noqa: E402
from jaxrank.judges.reading import LabelMassWarning   # noqa: E402
from jaxrank.judges.server import ServerError, ServerGEvalJudge, ServerJudge   # noqa: E402

from _fixtures_server import KEY_ENV, MODEL, FaultProxy   # noqa: E402
from _fixtures_server import api_key, server   # noqa: E402,F401  (fixtures)

TEMPLATE = pairwise_template("summeval", "coherence")
TEXTS = ContextSet(["c0"], ["The cat sat on the mat all afternoon, then went out to hunt mice."], [["x", "y", "z"]],
                   [["A cat sat on a mat.", "The dog barked.", "A cat rested, then hunted."]])


def _judge(url, **kw):
    kw.setdefault("api_key_env", KEY_ENV)
    kw.setdefault("min_label_mass", 0.0)
    return ServerJudge(url, MODEL, TEMPLATE, answer_prefix="Summary", **kw)


def _records(path):
    import json
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip() and '"p"' in x]


def test_a_snapshot_behind_the_name_gets_its_own_key(server, tmp_path):
    """Answers naming the requested model keep the three-part key; answers naming a snapshot add it, so a second
    snapshot behind the same name judges again instead of reusing the first one's judgements."""
    plain = _judge(server.url)
    plain.prepare(TEXTS.texts[0], TEXTS.candidates[0])
    assert plain.fingerprint == f"{server.url}|{MODEL}|{MODEL}"          # llama.cpp names the alias: key unchanged
    proxy = FaultProxy(server)
    path = tmp_path / "store.jsonl"
    try:
        proxy.answer_model = "gpt-x-2024-05-13"
        first = _judge(proxy.url)
        judge_contexts(first, TEXTS, JudgementStore(path), progress=False)
        assert first.fingerprint == f"{proxy.url}|{MODEL}|{MODEL}|gpt-x-2024-05-13"
        answered = proxy.answered
        proxy.answer_model = "gpt-x-2024-08-06"
        second = _judge(proxy.url)
        judge_contexts(second, TEXTS, JudgementStore(path), progress=False)
    finally:
        proxy.close()
    assert second.fingerprint.endswith("|gpt-x-2024-08-06")
    recs = _records(path)
    by = {fp: [r for r in recs if r["fingerprint"] == fp] for fp in (first.fingerprint, second.fingerprint)}
    assert len(by[first.fingerprint]) == len(by[second.fingerprint]) == 6      # every ordered pair, once each
    assert proxy.answered - answered >= 6                                      # judged again, not reused


def test_a_model_changing_mid_run_is_refused(server, tmp_path):
    """When the answers start naming another model during a run, the run stops with an error naming both; what
    was stored before carries the first model's key only."""
    proxy = FaultProxy(server)
    path = tmp_path / "store.jsonl"
    proxy.answer_model = "gpt-x-2024-05-13"

    def switch(n):
        if n == 3:
            proxy.answer_model = "gpt-x-2024-08-06"

    proxy.on_answer = switch
    try:
        judge = _judge(proxy.url, max_concurrency=1)
        with pytest.raises(ServerError, match="'gpt-x-2024-08-06' where this run's answers came from "
                                              "'gpt-x-2024-05-13'.*changed during the run"):
            judge_contexts(judge, TEXTS, JudgementStore(path), progress=False)
    finally:
        proxy.close()
    stored = _records(path) if path.exists() else []
    assert all(r["fingerprint"].endswith("|gpt-x-2024-05-13") for r in stored)


def test_top_logprobs_and_chat_template_tokens_are_in_the_key(server):
    """Both change p (one alternative: an absent label is bounded by it and by 1 - its probability), so both change the key;
    their defaults leave the key as it was."""
    ctx, cands = TEXTS.texts[0], TEXTS.candidates[0]
    default, one = _judge(server.url), _judge(server.url, top_logprobs=1)
    p20, p1 = default.compare(ctx, cands, [0, 1], [1, 0]).p, one.compare(ctx, cands, [0, 1], [1, 0]).p
    assert np.abs(p20 - p1).max() > 0.05                        # the reading differs ...
    assert default.template_key != one.template_key            # ... so does the key
    assert _judge(server.url, top_logprobs=20, logprobs=True).template_key == default.template_key
    chat = "{% for m in messages %}{{ bos_token }}{{ m['content'] }}{% endfor %}"
    with_tok = _judge(server.url, chat_template=chat, chat_template_tokens={"bos_token": "<|im_start|>"})
    without = _judge(server.url, chat_template=chat)
    for j in (with_tok, without):
        j.prepare(ctx, cands)
    assert with_tok.request_prompt(ctx, cands[0], cands[1]) != without.request_prompt(ctx, cands[0], cands[1])
    assert with_tok.template_key != without.template_key


def test_geval_server_key_is_fixed_before_use_and_names_the_steps(server):
    """The G-Eval server judge's key is the same before and after the served model writes its steps, and differs
    with the steps given and with the length limit of written steps."""
    t = pointwise_template("coherence")

    def make(**kw):
        return ServerGEvalJudge(server.url, MODEL, t, api_key_env=KEY_ENV, min_label_mass=0.0, **kw)

    short = make(max_step_tokens=8)
    before = short.template_key
    short.score(TEXTS.texts[0], TEXTS.candidates[0][:1])
    assert short.steps and short.template_key == before
    assert make(max_step_tokens=16).template_key != before
    assert make(steps="1. Read the summary.").template_key != make(steps="1. Count the typos.").template_key
    assert make(steps="1. Read the summary.").template_key != before


def test_persistent_timeouts_name_the_settings(server):
    """A timeout no answer can meet fails after the retries with a message naming the queue and both settings."""
    judge = _judge(server.url, timeout=0.001, max_retries=1, backoff=0.01, max_backoff=0.02, logprobs=True)
    with pytest.raises(ServerError, match=r"time queued at the server counts.*--timeout.*--max-concurrency"):
        judge.compare(TEXTS.texts[0], TEXTS.candidates[0], [0], [1])


def test_a_label_of_several_tokens_is_reported(server):
    """'Nope' is two tokens for SmolLM2 (' N' 'ope'): never among the alternatives of the first answer token, so
    the judge warns that p is bounded, whatever the label mass."""
    from jaxrank.models import load_model
    tok = load_model(MODEL).tokenizer
    assert len(tok(" Nope", add_special_tokens=False)["input_ids"]) > 1 == len(tok(" Yes", add_special_tokens=False)["input_ids"])
    t = pairwise_template("summeval", "coherence", labels=("Yes", "Nope"))
    judge = ServerJudge(server.url, MODEL, t, api_key_env=KEY_ENV, min_label_mass=0.0)
    with pytest.warns(LabelMassWarning, match=r"\['Nope'\] never among the top-20 alternatives"):
        judge.compare(TEXTS.texts[0], TEXTS.candidates[0], [0, 1], [1, 0])


def test_diagnose_of_a_server_judge_without_a_prefix_says_so(server, monkeypatch, capsys):
    """`--diagnose` with the default `--answer-prefix auto`: a server judge finds no prefix, so one reading is
    printed (not the same one twice) with a line saying how to compare a prefix (review defect 5)."""
    from pathlib import Path

    from jaxrank.cli import main
    monkeypatch.setenv("JAXRANK_DATA", os.environ.get("JAXRANK_DATA", str(Path(__file__).parents[2] / "shared/data")))
    main(["judge", "--judge", f"server:{MODEL}", "--base-url", server.url, "--api-key-env", KEY_ENV,
          "--aspect", "coherence", "--contexts", "0:1", "--candidates", "2", "--diagnose", "1"])
    out = capsys.readouterr().out
    assert out.count(f"## Diagnosis: judge server:{MODEL}") == 1 and "give --answer-prefix TEXT" in out
