"""A tiny random-weight Llama judge with a byte-level tokenizer, for fast logic tests of the judges."""


from flax import nnx

from jaxrank.models.loading import LoadedModel
from jaxrank.models.llama import LlamaConfig, LlamaModel

PAD, BOS, EOS, OFFSET = 0, 1, 2, 3
CHAT_TEMPLATE = "fake: <user>...</user><assistant>"


class ByteTokenizer:
    """Bytes shifted by 3 (0 pad, 1 bos, 2 eos); a minimal chat template."""

    eos_token_id, pad_token_id, bos_token_id = EOS, PAD, BOS

    def __call__(self, text, add_special_tokens=True, **_):
        if isinstance(text, (list, tuple)):          # a batch, as transformers' tokenizers take
            return {"input_ids": [self(t, add_special_tokens)["input_ids"] for t in text]}
        ids = [b + OFFSET for b in text.encode("utf-8")]
        return {"input_ids": ([BOS] if add_special_tokens else []) + ids}

    def encode(self, text, add_special_tokens=False):
        return self(text, add_special_tokens)["input_ids"]

    def decode(self, ids, skip_special_tokens=False):
        return bytes(int(i) - OFFSET for i in ids if int(i) >= OFFSET).decode("utf-8", errors="replace")

    def apply_chat_template(self, msgs, chat_template=None, add_generation_prompt=True, tokenize=False):
        text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>\n" for m in msgs)
        return text + ("<assistant>" if add_generation_prompt else "")


def tiny_lm(*, chat=False, seed=0, layers=2, hidden=32, max_len=4096) -> LoadedModel:
    cfg = LlamaConfig(vocab_size=256 + OFFSET, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=hidden // 4, rope_theta=1000.0, tie_word_embeddings=False,
                      max_position_embeddings=max_len)
    model = LlamaModel(cfg, rngs=nnx.Rngs(seed))
    return LoadedModel(model, cfg, ByteTokenizer(), CHAT_TEMPLATE if chat else None, "tiny", "llama",
                       None, (EOS,), PAD)


def sharpen(lm: LoadedModel, factor: float = 4.0) -> LoadedModel:
    """Scale every weight matrix (not the norms) so the tiny model's next-token distribution is far from uniform."""
    for n, w in lm.model.weights().items():
        if not n.endswith("norm"):
            getattr(lm.model, n).set_value(factor * w)
    return lm


def tiny_llama_like(lm: LoadedModel, *, seed: int) -> LoadedModel:
    """``lm``'s tokenizer and chat template on a tiny random-weight Llama of its vocabulary (fast, exact checks)."""
    import dataclasses
    cfg = LlamaConfig.from_hf(dict(vocab_size=lm.config.vocab_size, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=4096, rope_theta=1e4, tie_word_embeddings=True,
                                   model_type="llama"))
    return dataclasses.replace(lm, model=LlamaModel(cfg, rngs=nnx.Rngs(seed)), config=cfg, name="tiny")


def torch_random_checkpoint(cfg, folder):
    """A ``transformers`` causal LM of ``cfg`` (eager attention) with seeded random weights (norm gains near 1,
    the rest ``N(0, 0.2^2)``), saved to ``folder``: the independent reference of a parity test. Returns the model."""
    import torch            # deferred: the test extra's, and only the parity tests need it
    import transformers

    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_((1.0 if n.endswith("norm.weight") else 0.0) + 0.2 * torch.randn_like(p))
    m.save_pretrained(folder)
    return m
