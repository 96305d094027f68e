"""A judge's ``max_length`` against its model's window.

Phi-3's LongRoPE is run within its original window (the short factors); past it transformers turns every
position by the long factors, so jaxrank's logits there are not the model's (checked here against
transformers). The prompt judges therefore refuse a ``max_length`` above such a window; above a plain RoPE
model's window (computed as transformers computes it, but untrained) they only warn.
"""

import dataclasses
import warnings

import numpy as np
import pytest
from tiny_lm import OFFSET, ByteTokenizer, tiny_lm, torch_random_checkpoint

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.pointwise import GEvalJudge
from jaxrank.judges.prompts import pairwise_template, pointwise_template
from jaxrank.models.llama_config import WindowWarning, judge_max_length
from jaxrank.models.loading import load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, ORIG = 256 + OFFSET, 64


@pytest.fixture(scope="module")
def longrope(tmp_path_factory):
    rope = {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0 + 0.3 * i for i in range(8)],
            "long_factor": [4.0 + i for i in range(8)], "original_max_position_embeddings": ORIG}
    cfg = transformers.Phi3Config(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                  original_max_position_embeddings=ORIG, rope_parameters=rope,
                                  pad_token_id=0, bos_token_id=1, eos_token_id=2)
    d = tmp_path_factory.mktemp("phi3") / "longrope"
    m = torch_random_checkpoint(cfg, d)
    lm = load_model(d, tokenizer=False)
    return m, dataclasses.replace(lm, tokenizer=ByteTokenizer())


def test_past_the_original_window_the_logits_are_not_the_models(longrope):
    """Why the refusal: equal to transformers up to the window, far off one token past it."""
    m, lm = longrope
    assert lm.config.max_position_embeddings == ORIG and lm.config.hard_window
    rng = np.random.default_rng(0)
    for t, close in ((ORIG, True), (ORIG + 1, False)):
        ids = rng.integers(3, V, (1, t))
        with torch.no_grad():
            ref = m(torch.tensor(ids)).logits.numpy()
        assert (np.abs(np.asarray(lm.model(ids)) - ref).max() < 1e-3) == close, t


def test_judges_refuse_a_max_length_past_a_longrope_window(longrope):
    _, lm = longrope
    pair, point = pairwise_template("summeval", "coherence"), pointwise_template("coherence")
    for make in (lambda n: PromptJudge(lm, pair, chat=False, max_length=n),
                 lambda n: GEvalJudge(lm, point, chat=False, steps="Read.", max_length=n)):
        with pytest.raises(ValueError, match=rf"max_length {ORIG + 1} .*window of {ORIG} .*LongRoPE"):
            make(ORIG + 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", WindowWarning)
            assert make(ORIG).max_length == ORIG
            assert make(None).max_length == ORIG          # the default is the window


def test_past_a_plain_rope_window_warns_and_is_kept():
    lm = tiny_lm(max_len=32)
    with pytest.warns(WindowWarning, match="max_length 40 .*window of 32"):
        judge = PromptJudge(lm, pairwise_template("summeval", "coherence"), chat=False, max_length=40)
    assert judge.max_length == 40
    with pytest.warns(WindowWarning):
        assert GEvalJudge(lm, pointwise_template("coherence"), chat=False, steps="Read.",
                          max_length=40).max_length == 40


def test_default_and_bad_values():
    class T5Like:          # no max_position_embeddings: relative positions, 512 by default, never refused
        pass

    assert judge_max_length(T5Like(), None) == 512
    assert judge_max_length(T5Like(), 4096) == 4096
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_length"):
            judge_max_length(T5Like(), bad)
