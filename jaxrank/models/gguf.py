"""GGUF files: metadata, dequantised weights under Hugging Face names, tokenizer.

A GGUF file (llama.cpp's format) carries the hyper-parameters
(``{arch}.block_count``, ``{arch}.rope.freq_base``...), the tokenizer
(``tokenizer.ggml.*``: tokens, token types, BPE merges, special ids), the chat
template (``tokenizer.chat_template``) and the weights, usually quantised.
This module reads them with the ``gguf`` package, dequantises to float32
(lazily, one tensor at a time) or, with ``keep_quantised=True``, repacks the
blocks of ``Q4_0``/``Q4_1``/``Q5_0``/``Q5_1``/``Q8_0``/``Q4_K``/``Q5_K``/``Q6_K``
matrices into quantised weights that stay so in memory (dequantised inside the
jitted matrix products; private ``_quant`` module), maps
tensor names to the Hugging Face layout (``blk.N.attn_q.weight`` ->
``model.layers.N.self_attn.q_proj.weight``) and undoes llama.cpp's q/k row
permutation for the ``llama`` architecture (``qwen2`` and ``gemma3`` files
are not permuted; ``gemma3``'s norm gains lose the ``+ 1`` llama.cpp added),
so :func:`jaxrank.models.llama.load_state_dict` loads them like a
safetensors checkpoint.

The tokenizer is rebuilt from the metadata as a ``tokenizers`` byte-level BPE
(pre-tokenizer chosen by ``tokenizer.ggml.pre`` as llama.cpp does) wrapped in
a transformers ``PreTrainedTokenizerFast``; other tokenizer models fall back to
transformers' own GGUF tokenizer conversion. :func:`special_tokens` only
trusts declared special ids that name control tokens, and takes the
end-of-turn token the chat template writes as EOS.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import struct
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxrank._notices import quiet_torch_notice

from ._quant import GGUF_QTYPES
from ._quant_layers import decode_gguf
from ._weights import release_pages

__all__ = ["GGUF_ARCHITECTURES", "GGUFTensor", "read_gguf", "gguf_config", "gguf_tensors", "special_tokens",
           "tokenizer_from_gguf", "unpermute_qk"]

log = logging.getLogger(__name__)

GGUF_ARCHITECTURES = ("llama", "qwen2", "gemma3")
"""``general.architecture`` values we load (Llama 2/3, Mistral and SmolLM2 use ``llama``)."""
_MODEL_TYPE = {"gemma3": "gemma3_text"}
"""GGUF architecture -> Hugging Face ``model_type`` where they differ."""

_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}
_BLK = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj"}
_BLK_GEMMA = {**_BLK, "ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
              "post_ffw_norm": "post_feedforward_layernorm", "attn_q_norm": "self_attn.q_norm",
              "attn_k_norm": "self_attn.k_norm"}
"""Gemma 3's block tensors: four norms a layer (``ffn_norm`` is the MLP's input norm) and q/k norms."""
_BLK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")

# End-of-turn tokens, by preference, when the declared EOS is missing or wrong.
_EOT = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<eos>")
_CONTROL, _USER = 3, 4

# Pre-tokenizer split patterns, as llama.cpp's llama-vocab.cpp / the HF tokenizer.json files.
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLIT_PRE = {"qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "llama-bpe": _LLAMA3, "llama3": _LLAMA3,
              "smaug-bpe": _LLAMA3}
_DIGITS_PRE = ("smollm", "starcoder", "refact", "codeshell")
_GPT2_PRE = ("gpt-2", "gpt2", "default", "")


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file.

    Attributes:
        name: GGUF name (``blk.0.attn_q.weight``).
        shape: NumPy / PyTorch order (``[out, in]``; GGUF stores the reverse).
        qtype: ``gguf.GGMLQuantizationType`` value.
        data: raw bytes, memory-mapped, ``[..., row bytes]`` as ``gguf.quants.dequantize`` takes.
    """

    name: str
    shape: tuple[int, ...]
    qtype: int
    data: np.ndarray


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}


class _Cursor:
    def __init__(self, buf):
        self.buf, self.at = buf, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.buf, self.at)
        self.at += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        if self.at + n > len(self.buf):
            raise ValueError("string runs past the end of the file")
        v = bytes(self.buf[self.at:self.at + n]).decode("utf-8", errors="replace")
        self.at += n
        return v

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, n = self.take("<I"), self.take("<Q")
            if etype in _SCALARS and etype != 7:
                dt = np.dtype(_SCALARS[etype])
                arr = np.frombuffer(self.buf, dt, n, self.at)
                self.at += n * dt.itemsize
                return arr.tolist()
            return [self.value(etype) for _ in range(n)]
        if vtype not in _SCALARS:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.take(_SCALARS[vtype])


def read_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], list[GGUFTensor]]:
    """Open a GGUF file (v2/v3): metadata and memory-mapped tensors.

    A small parser of our own: ``gguf.GGUFReader`` takes ~15 s on the 150k
    token vocabulary of Qwen2.5, this one well under a second.

    Returns:
        ``(metadata, tensors)``: metadata as plain Python values by key, and
        :class:`GGUFTensor` list in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a readable GGUF file (bad magic, truncated...).
    """
    # deliberately lazy (also below): the gguf package takes ~0.1 s to import and only .gguf files need it
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        size = path.stat().st_size
        if size < 24:
            raise ValueError("file too short")
        buf = np.memmap(path, np.uint8, mode="r")
        cur = _Cursor(buf)
        if bytes(buf[:4]) != b"GGUF":
            raise ValueError("bad magic (not a GGUF file)")
        cur.at = 4
        version = cur.take("<I")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            meta[key] = cur.value(cur.take("<I"))
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            dims = [cur.take("<Q") for _ in range(cur.take("<I"))]
            infos.append((name, dims, cur.take("<I"), cur.take("<Q")))
        align = int(meta.get("general.alignment", 32))
        base = -(-cur.at // align) * align
        tensors = []
        for name, dims, qtype, offset in infos:
            qtype = GGMLQuantizationType(qtype)
            block, nbytes = GGML_QUANT_SIZES[qtype]
            shape = tuple(int(d) for d in reversed(dims))
            row = shape[-1] // block * nbytes
            start = base + offset
            n = math.prod(shape[:-1]) * row
            if start + n > size:
                raise ValueError(f"tensor {name} is truncated ({start + n} > {size} bytes)")
            tensors.append(GGUFTensor(name, shape, qtype, buf[start:start + n].reshape(*shape[:-1], row)))
    except (ValueError, KeyError, struct.error, IndexError, OverflowError) as e:
        raise ValueError(f"{path} is not a readable GGUF file: {e}") from e
    return meta, tensors


_REQUIRED = ("attention.head_count", "embedding_length", "feed_forward_length", "block_count")
"""The ``<arch>.`` metadata keys :func:`gguf_config` has no default for."""


def gguf_config(meta: Mapping[str, Any], tensor_names) -> dict[str, Any]:
    """A Hugging Face style ``config.json`` dict from GGUF metadata.

    Raises:
        ValueError: unsupported ``general.architecture`` (lists the supported ones), or
            metadata lacking a size (names every missing key).
    """
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"GGUF architecture {arch!r} is not supported; "
                         f"supported: {', '.join(GGUF_ARCHITECTURES)}")
    names = set(tensor_names)

    def g(key, default=None):
        v = meta.get(f"{arch}.{key}", default)
        return v[0] if isinstance(v, list) and v else v

    missing = [f"{arch}.{k}" for k in _REQUIRED if g(k) is None]
    if not (g("vocab_size") or meta.get("tokenizer.ggml.tokens")):
        missing.append(f"{arch}.vocab_size (or tokenizer.ggml.tokens)")
    if missing:
        raise ValueError(f"GGUF metadata lacks {', '.join(missing)}")
    n_heads = int(g("attention.head_count"))
    hidden = int(g("embedding_length"))
    vocab = g("vocab_size") or len(meta.get("tokenizer.ggml.tokens") or ())
    gemma = arch == "gemma3"
    cfg: dict[str, Any] = {
        "model_type": _MODEL_TYPE.get(arch, arch), "hidden_act": "gelu_pytorch_tanh" if gemma else "silu",
        "vocab_size": int(vocab),
        "hidden_size": hidden, "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")), "num_attention_heads": n_heads,
        "num_key_value_heads": int(g("attention.head_count_kv", n_heads)),
        "head_dim": int(g("attention.key_length") or hidden // n_heads),
        "rms_norm_eps": _f32(g("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": _f32(g("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(g("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": arch == "llama" and "blk.0.attn_q.bias" in names,
    }
    if gemma:   # as llama.cpp: local RoPE base 10000, 1 global layer in 6, 27B scales queries by hidden/heads
        n_layers = cfg["num_hidden_layers"]
        cfg.update(rope_local_base_freq=10000.0, sliding_window=int(g("attention.sliding_window", 4096)),
                   sliding_window_pattern=6,
                   query_pre_attn_scalar=hidden // n_heads if n_layers == 62 else cfg["head_dim"])
    stype = g("rope.scaling.type")
    if stype and stype != "none":
        cfg["rope_scaling"] = {"rope_type": stype, "factor": float(g("rope.scaling.factor", 1.0))}
    for k, t in (("bos_token_id", "bos"), ("eos_token_id", "eos")):
        if f"tokenizer.ggml.{t}_token_id" in meta:
            cfg[k] = int(meta[f"tokenizer.ggml.{t}_token_id"])
    return cfg


def _f32(v) -> float:
    """A float32 metadata value as the decimal it was written from (9.99999975e-06 -> 1e-05)."""
    return float(str(np.float32(v)))


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute`` of q/k rows (``convert_hf_to_gguf.py``).

    llama.cpp reorders each head's rows from the "rotate half" layout of HF
    checkpoints to interleaved pairs; this maps them back. Works for weights
    ``[rows, in]`` and biases ``[rows]``.
    """
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


class _DequantisedTensors(Mapping):
    """Hugging Face name -> float32 tensor, dequantised from the mapped file only when read."""

    def __init__(self, by_name: dict[str, tuple[GGUFTensor, int]], keep_quantised: bool = False,
                 stacks: Mapping[str, tuple[int, ...]] | None = None, floats: frozenset = frozenset()):
        self._by_name, self._keep, self._stacks, self._floats = by_name, keep_quantised, stacks or {}, floats

    def __contains__(self, name) -> bool:       # Mapping's default would read (dequantise) the tensor
        return name in self._by_name

    def __getitem__(self, name: str) -> np.ndarray:
        from gguf import quants

        t, n_head = self._by_name[name]
        if self._keep and int(t.qtype) in GGUF_QTYPES.values() and len(t.shape) == 2 and name not in self._floats:
            w = decode_gguf(t.data, t.qtype, t.shape, self._stacks.get(name, ()), device=True)
            release_pages(t.data)
            return w.map(lambda a: unpermute_qk(a, n_head)) if n_head > 0 else w
        arr = np.asarray(quants.dequantize(t.data, t.qtype), np.float32).reshape(t.shape)
        release_pages(t.data)
        if n_head < 0:      # Gemma: llama.cpp stores norm gains as 1 + weight; HF names hold the weight
            return arr - 1.0
        return unpermute_qk(arr, n_head) if n_head else arr

    def __iter__(self):
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


def gguf_tensors(tensors: list[GGUFTensor], config: Mapping[str, Any], *,
                 keep_quantised: bool = False) -> Mapping[str, np.ndarray]:
    """Dequantised float32 tensors under Hugging Face names, read lazily.

    With ``keep_quantised=True`` the matrices in a block format the decoder
    multiplies quantised (``Q4_0``, ``Q4_1``, ``Q5_0``, ``Q5_1``, ``Q8_0``,
    ``Q4_K``, ``Q5_K``, ``Q6_K``) come back as ``QuantisedWeight`` (codes and
    block scales repacked, q/k rows unpermuted, nothing dequantised); other
    tensors (norms, biases, float16/float32 matrices) as float32 arrays. A layer of a
    stack whose layers have different formats (a ``Q4_K_M`` file's ``ffn_down``:
    ``Q4_K`` and ``Q6_K``) comes in the one form the stack is held in (``Q4_K`` /
    ``Q5_K`` / ``Q6_K`` mixes: 6-bit codes, 6.625 bits a weight; others 8-bit). A stack
    mixing formats kept quantised with others (``Q3_K``, ``Q2_K``, float16 layers)
    is dequantised to float32 in every layer, with a ``UserWarning`` naming it.

    The mapping dequantises a tensor (and undoes the ``llama`` q/k permutation)
    each time it is indexed (and takes back the ``+ 1`` that llama.cpp adds to
    Gemma's norm weights) and then drops the file pages it read, so a
    loader that takes one tensor at a time never holds more than one float32
    tensor beside its parameters. Also adds ``config["rope_freq_factors"]``
    when the file has a ``rope_freqs.weight`` tensor (Llama 3 conversions);
    other unknown tensors are skipped.
    """
    from gguf import quants

    permute = config["model_type"] == "llama"
    gemma = config["model_type"] == "gemma3_text"
    blk = _BLK_GEMMA if gemma else _BLK
    by_name: dict[str, tuple[GGUFTensor, int]] = {}
    groups: dict[str, list[tuple[str, int]]] = {}
    for t in tensors:
        if t.name == "rope_freqs.weight":
            arr = np.asarray(quants.dequantize(t.data, t.qtype), np.float32).reshape(t.shape)
            config["rope_freq_factors"] = [float(x) for x in arr]  # type: ignore[index]
            continue
        if t.name in _TOP:
            by_name[_TOP[t.name]] = (t, -1 if gemma and t.name == "output_norm.weight" else 0)
            continue
        m = _BLK_RE.match(t.name)
        if not m or m.group(2) not in blk:
            log.info("skipping GGUF tensor %s", t.name)
            continue
        i, kind, wb = m.groups()
        n_head = 0
        if permute and kind == "attn_q":
            n_head = config["num_attention_heads"]
        elif permute and kind == "attn_k":
            n_head = config["num_key_value_heads"]
        elif gemma and kind.endswith("norm"):
            n_head = -1
        by_name[f"model.layers.{i}.{blk[kind]}.{wb}"] = (t, n_head)
        groups.setdefault(f"blk.*.{kind}.{wb}", []).append((f"model.layers.{i}.{blk[kind]}.{wb}", int(t.qtype)))
    stacks = {}             # a layer of a stack whose layers differ in format is decoded to the stack's form
    floats = set()          # a stack mixing formats kept quantised and others: dequantised whole
    for kind, members in groups.items():
        qtypes = tuple(sorted({q for _, q in members}))
        kept = [q in GGUF_QTYPES.values() for q in qtypes]
        if len(qtypes) > 1 and all(kept):
            stacks.update({name: qtypes for name, _ in members})
        elif keep_quantised and any(kept) and not all(kept):
            floats.update(name for name, _ in members)
            names = ", ".join(_qtype_name(q) for q in qtypes)
            warnings.warn(f"GGUF tensors {kind}: their layers mix formats kept quantised and others ({names}); "
                          "dequantised to float32 in every layer", UserWarning, stacklevel=3)
    return _DequantisedTensors(by_name, keep_quantised, stacks, frozenset(floats))


def _qtype_name(q: int) -> str:
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(q).name
    except ValueError:
        return str(q)


def special_tokens(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Special token ids, checked against the token types.

    A declared id is trusted only if it names a control / user-defined token.
    EOS is the end-of-turn token the chat template uses when there is one (so
    generation stops at the end of the assistant's turn), else the declared
    one, else the first known end-of-turn token in the vocabulary.

    Returns:
        dict with ``bos``, ``eos``, ``pad``, ``unk`` (token strings or ``None``)
        and ``eos_ids`` (every id that should end generation).
    """
    tokens = meta.get("tokenizer.ggml.tokens") or []
    types = meta.get("tokenizer.ggml.token_type") or [_CONTROL] * len(tokens)
    index = {t: i for i, t in enumerate(tokens) if types[i] in (_CONTROL, _USER)}

    def declared(name):
        i = meta.get(f"tokenizer.ggml.{name}_token_id")
        if i is None or not 0 <= int(i) < len(tokens) or types[int(i)] not in (_CONTROL, _USER):
            return None
        return tokens[int(i)]

    template = meta.get("tokenizer.chat_template") or ""
    eot = [t for t in _EOT if t in index]
    eos = next((t for t in eot if t in template), None) or declared("eos") or (eot[0] if eot else None)
    ids = {index[t] for t in eot}
    for t in (eos, declared("eos")):
        if t is not None:
            ids.add(index[t])
    return {"bos": declared("bos"), "eos": eos, "pad": declared("padding") or eos,
            "unk": declared("unknown"), "eos_ids": tuple(sorted(ids))}


def tokenizer_from_gguf(meta: Mapping[str, Any], path: str | os.PathLike | None = None):
    """A transformers fast tokenizer rebuilt from ``tokenizer.ggml.*`` metadata.

    Byte-level BPE (``tokenizer.ggml.model == "gpt2"``) is built directly with
    ``tokenizers``: vocabulary, merges, the pre-tokenizer of
    ``tokenizer.ggml.pre`` and control tokens as special tokens. No BOS is
    added on encoding (as transformers does for these tokenizers; chat
    templates write their own). Other tokenizer models are delegated to
    ``AutoTokenizer.from_pretrained(dir, gguf_file=name)`` (needs ``path``).

    Raises:
        ValueError: the tokenizer cannot be built.
    """
    # deliberately lazy (also below): transformers takes seconds to import; only a tokenizer needs it
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    with quiet_torch_notice():          # its "PyTorch was not found" says nothing of jaxrank's models
        from transformers import PreTrainedTokenizerFast

    kind = meta.get("tokenizer.ggml.model")
    pre = meta.get("tokenizer.ggml.pre") or ""
    if kind != "gpt2" or (pre not in _SPLIT_PRE and pre not in _DIGITS_PRE and pre not in _GPT2_PRE):
        if path is None:
            raise ValueError(f"cannot build a {kind!r}/{pre!r} tokenizer without the file path")
        return _transformers_tokenizer(path, meta)
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges,
                              ignore_merges=pre in ("llama-bpe", "llama3", "smaug-bpe")))
    if pre in _SPLIT_PRE:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_SPLIT_PRE[pre]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif pre in _DIGITS_PRE:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, y in zip(tokens, types) if y == _CONTROL])
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, y in zip(tokens, types) if y == _USER])
    sp = special_tokens(meta)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=sp["bos"], eos_token=sp["eos"],
                                  pad_token=sp["pad"], unk_token=sp["unk"])
    tok.chat_template = meta.get("tokenizer.chat_template")
    return tok


def _transformers_tokenizer(path, meta):
    with quiet_torch_notice():          # its "PyTorch was not found" says nothing of jaxrank's models
        from transformers import AutoTokenizer

    path = Path(path)
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except Exception as e:
        raise ValueError(f"cannot build the tokenizer of {path} "
                         f"({meta.get('tokenizer.ggml.model')!r}): {e}") from e
    if meta.get("tokenizer.chat_template") and not tok.chat_template:
        tok.chat_template = meta["tokenizer.chat_template"]
    return tok
