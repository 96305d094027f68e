"""Soft prompts know the judge they were trained for (jaxrank/judges/soft_prompt.py), and train and judge
alike: an "auto" answer prefix is chosen before training, and the judge's key/value cache dtype is used.

Independent checks: the identity read back by the safetensors library itself; errors by field and file; a
file saved by an older jaxrank (committed under experiments/results) still loads, its vectors equal to the
safetensors reader's; the training loss at learning rate 0 against a NumPy loss of the judge's own logits
on the same pairs; the prefix cache's dtype seen by a spy on ``prefill``.
"""

import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from jaxrank.judges.soft_prompt import IDENTITY, SoftPrompt, train_soft_prompt
from tiny_lm import sharpen, tiny_lm

CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday.", "Rain is expected."]
COHERENCE = pairwise_template("summeval", "coherence")
LEGACY = Path(__file__).resolve().parents[1] / "experiments/results/soft_prompt_summeval_coherence_smollm2-135m.safetensors"


def _numpy_loss(logits):
    logits = np.asarray(logits, np.float64)
    p = 1.0 / (1.0 + np.exp(logits[:, 1] - logits[:, 0]))
    return (p.mean() - 0.5) ** 2 + np.mean(logits[:, 0] - logits[:, 1]) ** 2


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1, chat=True), 3.0)


@pytest.fixture(scope="module")
def saved(lm, tmp_path_factory):
    judge = PromptJudge(lm, COHERENCE)
    res = train_soft_prompt(judge, [(CTX, CANDS)], SoftPrompt.from_text(lm, "Be fair."), steps=2, pairs_per_step=1)
    path = tmp_path_factory.mktemp("sp") / "trained.safetensors"
    res.soft_prompt.save(path, note="n")
    return judge, res.soft_prompt, path


def test_save_records_the_judge(saved):
    judge, soft, path = saved
    with safe_open(str(path), "np") as f:
        meta = f.metadata()
    assert meta["model_fingerprint"] == judge.lm.fingerprint and meta["template_key"] == judge.template_key
    assert meta["chat"] == "True" and meta["answer_prefix"] == COHERENCE.answer_prefix and meta["note"] == "n"
    np.testing.assert_array_equal(load_file(str(path))["vectors"], np.asarray(soft.vectors))
    with pytest.raises(ValueError, match="judge"):
        SoftPrompt(np.zeros((1, 32), np.float32)).save(path.parent / "x.safetensors")      # nothing to record
    with pytest.raises(ValueError, match="metadata"):
        soft.save(path.parent / "y.safetensors", chat="no")


def test_the_same_judge_accepts_it(lm, saved):
    judge, soft, path = saved
    with warnings.catch_warnings():
        warnings.simplefilter("error")                        # a file with its identity: no warning
        back = SoftPrompt.load(path)
    got = PromptJudge(lm, COHERENCE, soft_prompt=back).compare(CTX, CANDS, np.array([0]), np.array([1]))
    want = PromptJudge(lm, COHERENCE, soft_prompt=soft).compare(CTX, CANDS, np.array([0]), np.array([1]))
    np.testing.assert_array_equal(got.logits, want.logits)


@pytest.mark.parametrize("field", IDENTITY)
def test_another_judge_is_refused_naming_file_and_field(lm, saved, field):
    _, _, path = saved
    other = {"model_fingerprint": lambda: PromptJudge(sharpen(tiny_lm(seed=2, chat=True), 3.0), COHERENCE),
             "chat": lambda: PromptJudge(lm, COHERENCE, chat=False),
             "answer_prefix": lambda: PromptJudge(lm, COHERENCE, answer_prefix="Summary"),
             "template_key": lambda: PromptJudge(lm, pairwise_template("summeval", "consistency"))}[field]()
    with pytest.raises(ValueError, match=f"trained.safetensors: trained for {field}"):
        PromptJudge(other.lm, other.template, chat=other.chat, soft_prompt=SoftPrompt.load(path))
    unchecked = SoftPrompt.load(path, check=False)                # the documented opt-out
    PromptJudge(other.lm, other.template, chat=other.chat, soft_prompt=unchecked)


def test_an_auto_prefix_judge_is_checked_once_prepared(lm, tmp_path):
    judge = PromptJudge(lm, COHERENCE, answer_prefix="Verdict:")
    SoftPrompt(np.zeros((1, 32), np.float32)).save(tmp_path / "v.safetensors", judge)
    auto = PromptJudge(lm, COHERENCE, soft_prompt=SoftPrompt.load(tmp_path / "v.safetensors"), answer_prefix="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto.prepare("Short one.", ["A park.", "The council met.", "Rain."])
    assert auto.template.answer_prefix != "Verdict:"                  # the tiny model writes another
    with pytest.raises(ValueError, match="v.safetensors: trained for answer_prefix 'Verdict:'"):
        auto.compare(CTX, CANDS, np.array([0]), np.array([1]))


def test_a_file_of_an_older_jaxrank_loads_with_a_warning():
    with pytest.warns(UserWarning, match="smollm2-135m.*unchecked"):
        back = SoftPrompt.load(LEGACY)
    np.testing.assert_array_equal(np.asarray(back.vectors), load_file(str(LEGACY))["vectors"])
    assert back.trained_for is None and back.position == "before_question"


# ---------------------------------------------------------------- bad vectors
def test_vectors_must_be_a_finite_float_matrix(tmp_path):
    with pytest.raises(ValueError, match="vectors must be finite"):
        SoftPrompt(jnp.full((2, 32), jnp.nan))
    with pytest.raises(ValueError, match="vectors must be a floating"):
        SoftPrompt(np.ones((2, 32), np.int32))
    v = [[0.5] * 4, [-1.0] * 4]
    soft = SoftPrompt(v)                                      # a list: converted
    assert soft.vectors.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(soft.vectors), np.array(v, np.float32))
    for name, vectors, meta, match in [("flat", np.zeros(4, np.float32), "before_question", r"\[k, D\]"),
                                       ("middle", np.zeros((1, 4), np.float32), "middle", "position"),
                                       ("nan", np.full((1, 4), np.nan, np.float32), "before_question", "finite")]:
        path = tmp_path / f"{name}.safetensors"
        save_file({"vectors": vectors}, str(path), metadata={"position": meta})
        with pytest.raises(ValueError, match=f"{name}.safetensors: .*{match}"):
            SoftPrompt.load(path, check=False)


# --------------------------------------------------------- training = judging
def test_auto_prefix_training_reads_the_judges_prompts(lm):
    """At learning rate 0 the first step's loss is that of the judge's own logits on the same two rows."""
    ctx, cands = "Short one.", ["A park.", "The council met.", "Rain."]
    init = SoftPrompt.from_text(lm, "Hi")
    judge = PromptJudge(lm, COHERENCE, answer_prefix="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = train_soft_prompt(judge, [(ctx, cands)], init, steps=1, pairs_per_step=1, learning_rate=0.0, seed=3)
        assert judge.answer_prefix_choice is not None and judge.template.answer_prefix   # prepared, a prefix
        x, y = np.random.default_rng(3).choice(3, 2, replace=False)                      # the trainer's pair
        soft = PromptJudge(lm, COHERENCE, answer_prefix=judge.template.answer_prefix, soft_prompt=init)
        logits = soft.compare(ctx, cands, np.array([x, y]), np.array([y, x])).logits
    assert res.history[0]["loss"] == pytest.approx(_numpy_loss(logits), rel=1e-4, abs=1e-8)
    assert dict(res.soft_prompt.trained_for)["answer_prefix"] == judge.template.answer_prefix


def test_the_soft_path_uses_the_judges_cache_dtype(lm, monkeypatch):
    model_type = type(lm.model)
    seen = []
    real = model_type.prefill

    def spy(self, *args, **kwargs):
        cache = real(self, *args, **kwargs)
        seen.append(cache.k.dtype)
        return cache

    i, j = np.array([0, 1, 2]), np.array([1, 2, 0])
    soft = SoftPrompt(np.zeros((0, lm.config.hidden_size), np.float32))
    f32 = PromptJudge(lm, COHERENCE, soft_prompt=soft, cache_dtype=None).compare(CTX, CANDS, i, j).logits
    monkeypatch.setattr(model_type, "prefill", spy)
    bf16 = PromptJudge(lm, COHERENCE, soft_prompt=soft, cache_dtype=jnp.bfloat16).compare(CTX, CANDS, i, j).logits
    assert seen and all(d == jnp.bfloat16 for d in seen)
    moved = np.abs(np.diff(bf16) - np.diff(f32)).max()         # a bfloat16 cache moves p in its 3rd-4th digit
    assert 1e-6 < moved < 1e-2
