"""A config.json or GGUF lacking a size ends in a ValueError naming the file and the missing keys, and the
CLI in one line (exit status 1), not in ``KeyError`` / ``TypeError`` tracebacks from deep in the loader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxrank
from jaxrank.models import llama
from jaxrank.models.bert import BertConfig
from jaxrank.models.gguf import gguf_config
from jaxrank.models.loading import load_model
from jaxrank.models.t5_config import T5Config
from test_loading import MERGES, _hf_weights, _tokens

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("JAXRANK_DATA", ROOT.parent / "shared" / "data"))
LLAMA = dict(model_type="llama", vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
             num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
LLAMA_SIZES = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"]


def tiny_llama_folder(d: Path, cfg=None, weights_cfg=None) -> Path:
    """A Llama checkpoint folder: ``cfg`` written as config.json, random weights of ``weights_cfg``."""
    from safetensors.numpy import save_file

    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(LLAMA if cfg is None else cfg))
    save_file(_hf_weights(llama.LlamaConfig.from_hf(weights_cfg or LLAMA)), str(d / "model.safetensors"))
    return d


def write_tiny_gguf(path: Path, *, rows: int | None = None, skip=()) -> int:
    """A 2-layer llama GGUF with the 267-token byte-level BPE vocabulary of tests/test_loading.py and an
    embedding table of ``rows`` rows (default: one per token; ``llama.vocab_size`` says ``rows``); the
    ``add_*`` metadata calls named in ``skip`` are left out. Returns the number of tokens."""
    import gguf

    toks = _tokens()
    rows = len(toks) if rows is None else rows
    cfg = llama.LlamaConfig.from_hf(dict(model_type="llama", vocab_size=rows, hidden_size=32,
                                         intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, tie_word_embeddings=True))
    w = gguf.GGUFWriter(str(path), "llama")
    for call, arg in (("add_block_count", 2), ("add_context_length", 128), ("add_embedding_length", 32),
                      ("add_feed_forward_length", 48), ("add_head_count", 4), ("add_head_count_kv", 2),
                      ("add_layer_norm_rms_eps", 1e-5), ("add_vocab_size", rows), ("add_tokenizer_model", "gpt2"),
                      ("add_tokenizer_pre", "smollm"), ("add_token_list", toks),
                      ("add_token_types", [1] * (len(toks) - 3) + [3, 3, 3]), ("add_token_merges", MERGES)):
        if call not in skip:
            getattr(w, call)(arg)
    blk = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
           "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for k, a in _hf_weights(cfg).items():
        if k == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif k == "model.norm.weight":
            name = "output_norm.weight"
        else:
            _, _, i, *rest = k.split(".")
            name = f"blk.{i}.{blk['.'.join(rest[:-1])]}.{rest[-1]}"
        w.add_tensor(name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(toks)


def test_llama_config_json_of_only_a_model_type(tmp_path):
    """The review's repro: {"model_type": "llama"} was ``KeyError: 'num_attention_heads'``."""
    d = tiny_llama_folder(tmp_path / "bare", cfg={"model_type": "llama"})
    with pytest.raises(ValueError) as e:
        load_model(d)
    msg = str(e.value)
    assert str(d / "config.json") in msg
    assert all(repr(k) in msg for k in LLAMA_SIZES)
    assert "num_key_value_heads" not in msg                 # it has a default (the number of heads)


@pytest.mark.parametrize("key", LLAMA_SIZES)
def test_each_llama_size_missing_or_null_is_named(tmp_path, key):
    for how, cfg in (("missing", {k: v for k, v in LLAMA.items() if k != key}), ("null", {**LLAMA, key: None})):
        d = tiny_llama_folder(tmp_path / how, cfg=cfg)
        with pytest.raises(ValueError, match=rf"{d / 'config.json'}: config lacks '{key}'$"):
            load_model(d, tokenizer=False)
    with pytest.raises(ValueError, match=f"'{key}'"):
        llama.LlamaConfig.from_hf({k: v for k, v in LLAMA.items() if k != key})
    assert llama.LlamaConfig.from_hf(LLAMA).vocab_size == 40       # the complete config still parses


def test_t5_and_bert_configs_name_their_missing_sizes(tmp_path):
    t5 = dict(model_type="t5", vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_heads=4, num_layers=1)
    bert = dict(model_type="bert", vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=4,
                intermediate_size=32)
    assert T5Config.from_hf(t5).d_kv == 4 and BertConfig.from_hf(bert).intermediate_size == 32
    for cfg, drop in ((t5, ("d_kv", "num_heads")), (bert, ("num_attention_heads",)), (bert, ("vocab_size",))):
        d = tmp_path / f"{cfg['model_type']}-{'-'.join(drop)}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k not in drop}))
        with pytest.raises(ValueError) as e:                # before any weight is looked for (there are none)
            load_model(d)
        assert str(d / "config.json") in str(e.value) and all(repr(k) in str(e.value) for k in drop)


def test_a_config_json_that_is_not_an_object(tmp_path):
    d = tmp_path / "list"
    d.mkdir()
    (d / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"corrupt {d / 'config.json'}: not a JSON object"):
        load_model(d)


def test_gguf_without_head_count(tmp_path):
    """The review's repro: a GGUF without ``head_count`` was ``TypeError: int() argument must be ...``."""
    ok = tmp_path / "ok.gguf"
    n = write_tiny_gguf(ok)
    assert load_model(ok).config.num_attention_heads == 4 and load_model(ok).config.vocab_size == n
    bad = tmp_path / "no-heads.gguf"
    write_tiny_gguf(bad, skip=("add_head_count",))
    with pytest.raises(ValueError, match=rf"{bad}: GGUF metadata lacks llama\.attention\.head_count$"):
        load_model(bad)
    worse = tmp_path / "no-sizes.gguf"
    write_tiny_gguf(worse, skip=("add_block_count", "add_feed_forward_length", "add_vocab_size", "add_token_list",
                                 "add_token_types", "add_token_merges", "add_tokenizer_model"))
    with pytest.raises(ValueError) as e:
        load_model(worse, tokenizer=False)
    assert all(k in str(e.value) for k in ("llama.feed_forward_length", "llama.block_count", "llama.vocab_size"))
    with pytest.raises(ValueError, match="lacks llama.embedding_length"):
        gguf_config({"general.architecture": "llama", "llama.attention.head_count": 4, "llama.block_count": 1,
                     "llama.feed_forward_length": 8, "llama.vocab_size": 10}, [])


def test_cli_judge_ends_in_one_line_naming_the_missing_key(tmp_path):
    """``jaxrank judge --judge FOLDER`` on a config without ``num_attention_heads``: exit status 1, and
    stderr one line naming the file and the key (before: a KeyError traceback)."""
    if not (DATA / "summeval").is_dir():
        pytest.skip(f"no SummEval data under {DATA}")
    d = tiny_llama_folder(tmp_path / "judge", cfg={k: v for k, v in LLAMA.items() if k != "num_attention_heads"})
    env = {**os.environ, "JAXRANK_DATA": str(DATA), "JAXRANK_CACHE": str(tmp_path / "cache"),
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(Path(jaxrank.__file__).parents[1])}   # this jaxrank
    r = subprocess.run([sys.executable, "-m", "jaxrank.cli", "judge", "--data", "summeval", "--aspect",
                        "coherence", "--contexts", "0:1", "--candidates", "2", "--no-progress",
                        "--no-compilation-cache", "--judge", str(d), "--store", str(tmp_path / "s.jsonl")],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1, r.stderr
    assert lines == [f"jaxrank: {d / 'config.json'}: config lacks 'num_attention_heads'"], r.stderr
    assert not (tmp_path / "s.jsonl").exists()
