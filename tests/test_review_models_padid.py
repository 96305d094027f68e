"""A padding slot cannot poison real positions whatever id it holds, and a pad id past the table is replaced.

The masked slots' ids used to be read as they were: an id past the embedding table gave a NaN row (``jnp.take``
fills), the masked key's zero attention weight times NaN is NaN, and the real positions of the row went NaN.
Checked against transformers (a tiny random Qwen3 built by it) on the unpadded rows.
"""

import json
import shutil
import types

import jax.numpy as jnp
import numpy as np
import pytest
from tiny_lm import torch_random_checkpoint

from jaxrank.judges._forward import padded
from jaxrank.models._llama_core import _embed
from jaxrank.models.loading import load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, EOS = 101, 2


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    cfg = transformers.Qwen3Config(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=EOS)
    d = tmp_path_factory.mktemp("qwen3") / "m"
    m = torch_random_checkpoint(cfg, d)
    return m, d


def _ref(m, ids):
    with torch.no_grad():
        return m(torch.tensor(np.asarray(ids, np.int64))[None]).logits[0].numpy()


@pytest.mark.parametrize("weights", ["float", "quantised"])
def test_masked_slots_with_out_of_range_ids_leave_real_positions_alone(qwen3, weights):
    m, d = qwen3
    lm = load_model(d, tokenizer=False, weights=weights)
    ids = np.random.default_rng(0).integers(3, V, (2, 12))
    mask = np.ones_like(ids, bool)
    mask[1, 8:] = False
    base = np.asarray(lm.model(ids, mask))
    for pad in (V, V + 5, -1, 10 ** 6):
        x = ids.copy()
        x[1, 8:] = pad
        out = np.asarray(lm.model(x, mask))
        assert np.isfinite(out[1, :8]).all(), pad
        np.testing.assert_array_equal(out[:, :8], base[:, :8])        # bit-identical to an in-range pad
    if weights == "float":
        np.testing.assert_allclose(base[1, :8], _ref(m, ids[1, :8]), atol=1e-4, rtol=1e-4)
    # the prefix cache as read_decoder builds it: a prefix right-padded with an id past the table
    pid = np.full((1, 16), V, np.int32)
    pm = np.zeros((1, 16), bool)
    pid[0, :9], pm[0, :9] = ids[0, :9], True
    cache = lm.model.prefill(pid, pm, capacity=20)
    ext = np.asarray(lm.model.logits_at(lm.model.extend(cache, ids[:1, 9:12]).hidden))
    assert np.isfinite(ext).all()
    if weights == "float":
        np.testing.assert_allclose(ext[0], _ref(m, ids[0, :12])[9:], atol=1e-4, rtol=1e-4)


def test_real_slots_read_their_ids_as_before():
    """In-range ids of real slots give exactly the table's rows; a learnt-vector slot's id is not read."""
    table = jnp.asarray(np.random.default_rng(1).standard_normal((7, 3)), jnp.float32)
    ids = jnp.asarray([[1, 6, 0, 9], [3, 2, -1, 5]])
    mask = jnp.asarray([[True, True, True, False], [True, True, False, True]])
    x = np.asarray(_embed({"embed": table}, ids, mask=mask))
    t = np.asarray(table)
    np.testing.assert_array_equal(x[0, :3], t[[1, 6, 0]])
    np.testing.assert_array_equal(x[1, [0, 1, 3]], t[[3, 2, 5]])
    np.testing.assert_array_equal(x[0, 3], t[0])                     # masked: row 0
    vec = jnp.ones((1, 3), jnp.float32)
    y = np.asarray(_embed({"embed": table}, jnp.asarray([[99, 1]]), vec, jnp.asarray([[0, -1]]),
                          mask=jnp.asarray([[True, True]])))
    np.testing.assert_array_equal(y, [[[1.0, 1.0, 1.0], t[1]]])


@pytest.mark.parametrize("bad", [V, V + 40, -1])
def test_config_pad_id_past_the_table_is_replaced_by_eos(qwen3, tmp_path, bad):
    m, d = qwen3
    shutil.copytree(d, tmp_path / "m")
    c = json.loads((tmp_path / "m" / "config.json").read_text())
    c["pad_token_id"] = bad
    (tmp_path / "m" / "config.json").write_text(json.dumps(c))
    with pytest.warns(UserWarning, match=rf"pad_token_id {bad} is outside the embedding table's {V} rows"):
        lm = load_model(tmp_path / "m", tokenizer=False)
    assert lm.pad_token_id == EOS
    rows = [list(np.random.default_rng(2).integers(3, V, 12)), list(np.random.default_rng(3).integers(3, V, 7))]
    x, mk = padded(types.SimpleNamespace(lm=lm), rows, 2)
    assert (x[1, 7:] == EOS).all()
    out = np.asarray(lm.model(x, mk))
    np.testing.assert_allclose(out[1, :7], _ref(m, rows[1]), atol=1e-4, rtol=1e-4)


def test_in_range_config_pad_id_is_kept(qwen3, recwarn):
    _, d = qwen3
    assert load_model(d, tokenizer=False).pad_token_id == 0
    assert not [w for w in recwarn if "pad_token_id" in str(w.message)]
