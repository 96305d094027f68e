"""A tokenizer whose ids reach past the embedding table is refused when the checkpoint is loaded (it used to
load and judge with NaN probabilities); an embedding table with padding rows beyond the tokenizer (Qwen's
151,936 rows for 151,665 tokens) still loads."""

import json

import numpy as np
import pytest

from jaxrank.models import gguf as jg
from jaxrank.models import llama, registry
from jaxrank.models.loading import load_model
from test_loading_checks_config import LLAMA, tiny_llama_folder, write_tiny_gguf


def _smollm2_tokenizer():
    try:
        path = registry.resolve("smollm2-135m")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    meta, _ = jg.read_gguf(path)
    return jg.tokenizer_from_gguf(meta, path)


def _word_tokenizer(n: int):
    """A word-level tokenizer of ``n`` ids: ``<unk>``, ``A``, ``B``, then ``w3`` ... ``w{n-1}``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "A": 1, "B": 2, **{f"w{i}": i for i in range(3, n)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<unk>")


def test_smollm2_tokenizer_on_a_32_row_model_is_refused(tmp_path):
    """The review's repro: a Llama folder of 32 embedding rows holding SmolLM2's 49,152-token tokenizer."""
    from transformers import AutoTokenizer

    cfg = {**LLAMA, "vocab_size": 32}
    d = tiny_llama_folder(tmp_path / "tiny-with-smollm2-tokenizer", cfg=cfg, weights_cfg=cfg)
    _smollm2_tokenizer().save_pretrained(str(d))
    n = len(AutoTokenizer.from_pretrained(str(d), local_files_only=True))        # as saved, read back
    assert n == 49152
    with pytest.raises(ValueError) as e:
        load_model(d)
    msg = str(e.value)
    assert str(d) in msg and f"has {n} token ids" in msg and "has 32 rows" in msg
    assert load_model(d, tokenizer=False).model.embed[...].shape == (32, 16)    # no tokenizer: nothing to check


@pytest.mark.parametrize("rows,n_tokens,ok", [(24, 20, True), (20, 20, True), (16, 20, False)])
def test_hf_folder_tokenizer_against_embedding_rows(tmp_path, rows, n_tokens, ok):
    """Padding rows (rows > tokens) and an exact fit load; one token id past the table does not."""
    cfg = {**LLAMA, "vocab_size": rows}
    d = tiny_llama_folder(tmp_path / "m", cfg=cfg, weights_cfg=cfg)
    _word_tokenizer(n_tokens).save_pretrained(str(d))
    if not ok:
        with pytest.raises(ValueError, match=f"{d}: the tokenizer has {n_tokens} token ids but the embedding "
                                             f"table has {rows} rows"):
            load_model(d)
        return
    lm = load_model(d)
    assert len(lm.tokenizer) == n_tokens and lm.model.embed[...].shape == (rows, 16)
    ids = np.asarray(lm.tokenizer("A B w3 zzz")["input_ids"])
    np.testing.assert_array_equal(ids, [1, 2, 3, 0])                 # the word-level vocabulary, by hand
    logits = np.asarray(lm.model(ids[None]))
    assert logits.shape[-1] == rows and np.isfinite(logits).all()


def test_hf_folder_tokenizer_with_an_added_token_past_the_table(tmp_path):
    """An added special token whose id is the first past the table is caught (len counts added tokens)."""
    cfg = {**LLAMA, "vocab_size": 20}
    d = tiny_llama_folder(tmp_path / "m", cfg=cfg, weights_cfg=cfg)
    tok = _word_tokenizer(20)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    assert tok.convert_tokens_to_ids("<|im_end|>") == 20
    tok.save_pretrained(str(d))
    with pytest.raises(ValueError, match="has 21 token ids but the embedding table has 20 rows"):
        load_model(d)


def test_gguf_with_fewer_embedding_rows_than_tokens(tmp_path):
    ok = tmp_path / "padded.gguf"
    n = write_tiny_gguf(ok, rows=272)                        # 267 tokens, 5 padding rows
    lm = load_model(ok)
    assert len(lm.tokenizer) == n == 267 and lm.config.vocab_size == 272
    bad = tmp_path / "short.gguf"
    write_tiny_gguf(bad, rows=200)
    with pytest.raises(ValueError, match=f"{bad}: the tokenizer has 267 token ids but the embedding table has "
                                         "200 rows"):
        load_model(bad)
    assert load_model(bad, tokenizer=False).config.vocab_size == 200


def test_registered_models_still_load(smollm2, minilm):
    """The shipped checkpoints pass the check: SmolLM2 (GGUF, 49,152 tokens and rows) and MiniLM (a folder,
    30,522 word pieces and rows); the Qwen and Gemma files' token lists were compared with their embedding
    rows by reading their metadata only (equal: 151,936 and 262,144)."""
    assert len(smollm2.tokenizer) == smollm2.config.vocab_size == 49152
    cfg = json.loads((registry.resolve("minilm-l6") / "config.json").read_text())
    assert len(minilm.tokenizer) == cfg["vocab_size"] == minilm.config.vocab_size
    assert isinstance(smollm2.config, llama.LlamaConfig)
