"""Load a judge model by registry name, Hugging Face checkpoint directory or GGUF file.

* A Hugging Face directory: ``config.json`` (its ``model_type`` picks the
  implementation), ``model.safetensors`` or sharded
  ``model-0000x-of-0000y.safetensors`` + ``model.safetensors.index.json``, and
  the tokenizer files (``AutoTokenizer``, local files only, no remote code).
* A ``.gguf`` file (architectures ``llama``, ``qwen2``, ``gemma3``): see
  :mod:`jaxrank.models.gguf`.

``weights="quantised"`` keeps the decoder's matrices quantised in memory (GGUF
blocks as they are in the file; a safetensors checkpoint quantised on load to
int8 with one scale per output channel), dequantised inside the jitted matrix
products; the default ``"float"`` dequantises everything to ``dtype``.

Only safetensors and GGUF are read: no pickle (``pytorch_model.bin``) and no
remote code. ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``phi3``, ``gemma2`` and
``gemma3_text`` go to :mod:`jaxrank.models.llama` (one config, family switches
picked by ``model_type``); ``t5`` and ``bert`` to their modules, imported on
demand.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
import math
import os
import struct
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from jaxrank._notices import quiet_torch_notice
from jaxrank.models import _quant, gguf
from jaxrank.models._weights import float_tensor, release_pages
from jaxrank.models import registry
from jaxrank.models.fingerprint import checkpoint_fingerprint, parameters_dtype, parameters_fingerprint

__all__ = ["LoadedModel", "load_model", "read_safetensors", "read_checkpoint", "build_model",
           "ARCHITECTURES"]

log = logging.getLogger(__name__)

ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llama": ("jaxrank.models.llama", "LlamaConfig"),
    "mistral": ("jaxrank.models.llama", "LlamaConfig"),
    "qwen2": ("jaxrank.models.llama", "LlamaConfig"),
    "t5": ("jaxrank.models.t5", "T5Config"),
    "bert": ("jaxrank.models.bert", "BertConfig"),
    "qwen3": ("jaxrank.models.llama", "LlamaConfig"),
    "phi3": ("jaxrank.models.llama", "LlamaConfig"),
    "gemma2": ("jaxrank.models.llama", "LlamaConfig"),
    "gemma3_text": ("jaxrank.models.llama", "LlamaConfig"),
}
"""``model_type`` -> (module, config class) of each supported architecture."""

GENERATIVE = tuple(k for k, (mod, _) in ARCHITECTURES.items() if mod.endswith((".llama", ".t5")))
"""The architectures a prompt judge runs on: every decoder family of :mod:`jaxrank.models.llama`, and T5."""

_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


@dataclasses.dataclass
class LoadedModel:
    """A model ready to judge with.

    Attributes:
        model: the ``nnx.Module``.
        config: its config dataclass.
        tokenizer: a transformers tokenizer (``None`` when the checkpoint has none).
        chat_template: Jinja chat template, if any.
        name: registry name, or the file / directory name.
        architecture: ``model_type`` (a key of :data:`ARCHITECTURES`).
        path: where the weights were read; ``None`` for a model built in memory (no checkpoint).
        eos_token_ids: every id that ends generation.
        pad_token_id: padding id, always a row of the embedding table (:func:`load_model` replaces one
            past it); the Llama-family decoders read masked slots as id 0 whatever they hold.
    """

    model: Any
    config: Any
    tokenizer: Any | None
    chat_template: str | None
    name: str
    architecture: str
    path: Path | None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0

    @property
    def fingerprint(self) -> str:
        """What the model is, for the keys of stored judgements: the content hash of the checkpoint it was
        read from (:func:`~jaxrank.models.fingerprint.checkpoint_fingerprint`: weights and tokenizer, cached
        by path, size, inode, mtime and ctime), or of its parameters and tokenizer when no file is behind it
        (``path=None``, a missing path, or a folder with no ``*.safetensors`` / ``*.gguf`` file at its top level,
        which is not hashed: a model built in memory with ``path=Path(".")`` is not keyed by the working
        directory's files); then the
        parameters' dtype (``"3f2a...-float32"``). Computed once per object: parameters changed in memory
        after loading are not seen (build a new ``LoadedModel``)."""
        fp = self.__dict__.get("_fingerprint")
        if fp is None:
            content = None
            if self.path is not None and _holds_weights(Path(self.path)):
                try:
                    content = checkpoint_fingerprint(self.path)
                except FileNotFoundError:
                    pass
            if content is None:
                content = parameters_fingerprint(self.model, self.tokenizer)
            fp = f"{content}-{parameters_dtype(self.model)}"
            if getattr(self.model, "quantised", False):
                fp += "-quantised"
            self.__dict__["_fingerprint"] = fp
        return fp


def _holds_weights(path: Path) -> bool:
    """Whether ``path`` is a file, or a folder with a ``*.safetensors`` or ``*.gguf`` file at its top level."""
    if path.is_file():
        return True
    return path.is_dir() and any(p.suffix.lower() in (".safetensors", ".gguf") and p.is_file()
                                 for p in path.iterdir())


def _bf16():
    return ml_dtypes.bfloat16


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a safetensors file as memory-mapped NumPy arrays (bfloat16 via ``ml_dtypes``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: corrupt header or data (the message names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weight file not found: {path}")
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            if size < 8:
                raise ValueError("file too short")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                raise ValueError(f"header length {n} exceeds the file size {size}")
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        data = np.memmap(path, np.uint8, mode="r", offset=8 + n) if size > 8 + n else np.zeros(0, np.uint8)
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = _bf16() if info["dtype"] == "BF16" else _ST_DTYPES.get(info["dtype"])
            if dt is None:
                raise ValueError(f"tensor {name}: unsupported dtype {info['dtype']}")
            start, end = info["data_offsets"]
            shape = tuple(info["shape"])
            if end > data.size or end - start != math.prod(shape) * np.dtype(dt).itemsize:
                raise ValueError(f"tensor {name}: data offsets {start}..{end} do not fit "
                                 f"(data size {data.size}, shape {shape})")
            out[name] = np.frombuffer(data, dt, math.prod(shape), start).reshape(shape)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError, struct.error) as e:
        raise ValueError(f"corrupt safetensors file {path}: {e}") from e
    return out


def read_checkpoint(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of a Hugging Face checkpoint directory (single or sharded safetensors).

    Raises:
        FileNotFoundError: no safetensors weights (pickle ``.bin`` files are refused).
        ValueError: a corrupt file.
    """
    d = Path(directory)
    index = d / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError) as e:
            raise ValueError(f"corrupt index {index}: {e}") from e
        out: dict[str, np.ndarray] = {}
        for s in shards:
            out.update(read_safetensors(d / s))
        return out
    if (d / "model.safetensors").exists():
        return read_safetensors(d / "model.safetensors")
    found = sorted(p.name for p in d.glob("*.safetensors"))
    if len(found) == 1:
        return read_safetensors(d / found[0])
    pickles = sorted(p.name for p in d.glob("*.bin")) + sorted(p.name for p in d.glob("*.pt"))
    hint = (f" (found {', '.join(pickles)}: pickle checkpoints are not loaded; convert them "
            "to safetensors)") if pickles else ""
    raise FileNotFoundError(f"no model.safetensors in {d}{hint}")


def build_model(model_type: str, config_dict: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
                *, dtype=jnp.float32, mesh=None):
    """``(model, config)`` for a ``model_type`` from a config dict and HF-named tensors.

    Raises:
        ValueError: unknown architecture (lists the supported ones), or
            missing / mis-shaped tensors.
    """
    if model_type not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture {model_type!r}; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    mod, config = _config_of(model_type, config_dict)
    takes = inspect.signature(mod.load_state_dict).parameters
    kw = {"dtype": dtype} if "dtype" in takes else {}
    if mesh is not None:
        if "mesh" not in takes:
            raise ValueError(f"mesh: {model_type} models load on one device; a mesh needs a decoder of the "
                             "Llama family")
        kw["mesh"] = mesh
    return mod.load_state_dict(config, tensors, **kw), config


def _check_mesh(model_type: str, config, mesh) -> None:
    """Refuse a ``mesh`` the model cannot load onto, before any weight is read: a model outside the Llama
    family, axes other than ``"data"`` / ``"model"``, or a ``"model"`` size not dividing the heads or the
    MLP (:func:`jaxrank.models.partition.check_mesh`)."""
    if mesh is None:
        return
    if ARCHITECTURES.get(model_type, ("",))[0] != "jaxrank.models.llama":
        raise ValueError(f"mesh: {model_type} models load on one device; a mesh needs a decoder of the "
                         "Llama family")
    from jaxrank.models.partition import check_mesh

    check_mesh(config, mesh)


def _config_of(model_type: str, config_dict: Mapping[str, Any]):
    """``(module, config)`` of a supported ``model_type``: the config parsed by its class's ``from_hf``."""
    mod_name, cls_name = ARCHITECTURES[model_type]
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ValueError(f"architecture {model_type!r} needs {mod_name}, which is unavailable: {e}") from e
    return mod, getattr(mod, cls_name).from_hf(dict(config_dict))


def _check_vocabulary(tok, rows: int, where) -> None:
    """Refuse a tokenizer whose ids reach past the embedding table (they would read no row: NaN scores).

    An embedding table larger than the tokenizer (padding rows, as Qwen's 151,936 for 151,665 tokens) is
    fine; a token id ``>= rows`` is not.

    Raises:
        ValueError: naming ``where``, the tokenizer's size and the table's rows.
    """
    if tok is None:
        return
    vocab = tok.get_vocab()
    n = max(len(tok), max(vocab.values(), default=-1) + 1)
    if n > rows:
        raise ValueError(f"{where}: the tokenizer has {n} token ids but the embedding table has {rows} rows "
                         f"(ids {rows}..{n - 1} have no embedding): the tokenizer does not belong to these "
                         "weights")


def _pad_id(candidates, eos: tuple[int, ...], rows: int | None, where) -> int:
    """The padding id: the first int of ``candidates`` (the tokenizer's, then ``config.json``'s), else the
    first end-of-sequence id, else 0. One outside the embedding table (``config.json``'s ``pad_token_id``
    ``>= vocab_size``, or -1, as some hub configs carry) is replaced, with a warning, by the first
    end-of-sequence id inside the table (else 0): a pad id indexes the table wherever padding is built
    (prefix caches, batch rows), and a row past it is NaN."""
    pad = next((p for p in candidates if isinstance(p, int) and not isinstance(p, bool)), None)
    fallback = next((e for e in eos if rows is None or 0 <= e < rows), 0)
    if pad is None:
        return fallback
    if rows is not None and not 0 <= pad < rows:
        warnings.warn(f"{where}: pad_token_id {pad} is outside the embedding table's {rows} rows; "
                      f"padding with id {fallback} instead", stacklevel=3)
        return fallback
    return pad


def _eos_ids(*values) -> tuple[int, ...]:
    ids: set[int] = set()
    for v in values:
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(int(x) for x in v if isinstance(x, int))
    return tuple(sorted(ids))


WEIGHTS = ("float", "quantised")
"""The weight forms :func:`load_model` takes."""
_LINEAR = ("_proj.weight", "lm_head.weight", "embed_tokens.weight")


class _Int8Tensors(Mapping):
    """HF name -> tensor, the linear weights and embeddings quantised to int8 per output row when read."""

    def __init__(self, tensors: Mapping[str, np.ndarray]):
        self._t = tensors

    def __getitem__(self, name: str):
        arr = float_tensor(name, self._t[name])
        if name.endswith(_LINEAR) and np.ndim(arr) == 2:
            out = _quant.quantise_int8(np.asarray(arr, np.float32))
            release_pages(arr)
            return out
        return arr

    def __iter__(self):
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)


def _load_hf_dir(d: Path, name: str, dtype, want_tokenizer: bool, weights: str = "float",
                 mesh=None) -> LoadedModel:
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"no config.json in {d}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise ValueError(f"corrupt {cfg_path}: {e}") from e
    if not isinstance(cfg, dict):
        raise ValueError(f"corrupt {cfg_path}: not a JSON object")
    mt = cfg.get("model_type")
    if mt not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture {mt!r} in {cfg_path}; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    quant = cfg.get("quantization_config")
    if quant is not None:
        method = quant.get("quant_method", "unnamed") if isinstance(quant, Mapping) else quant
        raise ValueError(f"{cfg_path}: the checkpoint is quantised (quantization_config, quant_method "
                         f"{method!r}), which jaxrank does not read; load its float safetensors (weights="
                         "'quantised' quantises them on load to int8) or a GGUF file")
    try:            # before any weight is read: a config lacking a size fails at once, naming the file
        _, config = _config_of(mt, cfg)
        _check_mesh(mt, config, mesh)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {e}") from e
    tok = None
    tok_files = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "spiece.model", "tokenizer.model")
    if want_tokenizer and any((d / f).is_file() for f in tok_files):
        with quiet_torch_notice():               # its "PyTorch was not found" says nothing of jaxrank's models
            from transformers import AutoTokenizer  # deliberately lazy: seconds to import, only for a tokenizer

        try:
            tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True, trust_remote_code=False)
        except Exception as e:
            raise ValueError(f"cannot load the tokenizer in {d}: {e}") from e
        _check_vocabulary(tok, config.vocab_size, d)
    tensors = read_checkpoint(d)
    if weights == "quantised":
        if ARCHITECTURES[mt][0] != "jaxrank.models.llama":
            raise ValueError(f"weights='quantised' needs a decoder of the Llama family; {d} is {mt!r}")
        tensors = _Int8Tensors(tensors)
    model, config = build_model(mt, cfg, tensors, dtype=dtype, mesh=mesh)
    gen = {}
    if (d / "generation_config.json").is_file():
        gen = json.loads((d / "generation_config.json").read_text())
    eos = _eos_ids(gen.get("eos_token_id"), cfg.get("eos_token_id"),
                   getattr(tok, "eos_token_id", None))
    pad = _pad_id((getattr(tok, "pad_token_id", None), cfg.get("pad_token_id")), eos,
                  getattr(config, "vocab_size", None), d)
    return LoadedModel(model, config, tok, getattr(tok, "chat_template", None), name, mt, d, eos, pad)


def _load_gguf(p: Path, name: str, dtype, want_tokenizer: bool, weights: str = "float", mesh=None) -> LoadedModel:
    meta, gts = gguf.read_gguf(p)
    try:
        cfg = gguf.gguf_config(meta, [t.name for t in gts])
        _check_mesh(cfg["model_type"], _config_of(cfg["model_type"], cfg)[1], mesh)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from e
    tensors = (gguf.gguf_tensors(gts, cfg, keep_quantised=True) if weights == "quantised"
               else gguf.gguf_tensors(gts, cfg))
    # the tokenizer first: its build's scratch (a 150k vocabulary's Python objects) is freed before the
    # weights arrive, not added to the load's peak on top of them
    tok = gguf.tokenizer_from_gguf(meta, p) if want_tokenizer else None
    _check_vocabulary(tok, cfg["vocab_size"], p)
    try:
        model, config = build_model(cfg["model_type"], cfg, tensors, dtype=dtype, mesh=mesh)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from e
    sp = gguf.special_tokens(meta)
    pad = _pad_id((getattr(tok, "pad_token_id", None),), tuple(sp["eos_ids"]), cfg["vocab_size"], p)
    return LoadedModel(model, config, tok, meta.get("tokenizer.chat_template"), name,
                       cfg["model_type"], p, sp["eos_ids"], pad)


def load_model(path_or_name: str | os.PathLike, *, dtype=jnp.float32, tokenizer: bool = True,
               weights: str = "float", mesh=None) -> LoadedModel:
    """Load a model by registry name (:mod:`jaxrank.models.registry`) or path.

    Args:
        path_or_name: ``"smollm2-135m"``, ``"qwen2.5-coder-0.5b"``, ``"minilm-l6"``, a
            Hugging Face checkpoint directory or a ``.gguf`` file.
        dtype: parameter dtype (float32 default; ``jnp.bfloat16`` halves memory).
        tokenizer: also load the tokenizer.
        weights: ``"float"`` (every weight dequantised to ``dtype``) or ``"quantised"``: the decoder's
            matrices and embedding kept quantised (a GGUF file's ``Q4_0``...``Q6_K`` blocks; a
            safetensors checkpoint of the Llama family quantised to int8 per output channel) and
            dequantised inside the jitted matrix products; norms and biases in ``dtype``.
        mesh: a ``jax.sharding.Mesh`` with axes ``"data"`` and ``"model"`` (decoders): the weights go
            from host memory straight to their shards (tensor-parallel over ``"model"``), so a model
            larger than one device loads; pass the same mesh to ``PromptJudge(..., mesh=)``.

    Returns:
        A :class:`LoadedModel`.

    Raises:
        FileNotFoundError: no such path / name, or a missing weight file
            (names the file; for registry models, gives the ``pip`` command).
        ValueError: a corrupt file, an unsupported architecture (lists the
            supported ones), a config or GGUF lacking a size (names the file and the
            keys), a tokenizer with ids past the embedding table (names the
            folder or file, the tokenizer's size and the table's rows), a quantised
            safetensors checkpoint (``quantization_config``, names its method; integer
            weights; ``*_scale`` / ``*_zero_point`` tensors), or a ``mesh`` with other
            axes or a ``"model"`` size not dividing the heads (checked before any weight is read).
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    p = registry.resolve(path_or_name)
    key = registry.ALIASES.get(str(path_or_name).lower(), str(path_or_name).lower())
    local = Path(path_or_name).expanduser().exists()
    name = key if key in registry.MODELS and not local else p.name
    if local and registry.ALIASES.get(name.lower(), name.lower()) in registry.MODELS:
        name += "-local"          # a folder named like a registered model is not that model: never its name
    if p.is_dir():
        return _load_hf_dir(p, name, dtype, tokenizer, weights, mesh)
    if p.suffix.lower() == ".gguf" or _is_gguf(p):
        return _load_gguf(p, name, dtype, tokenizer, weights, mesh)
    raise ValueError(f"{p} is neither a Hugging Face checkpoint directory nor a .gguf file")


def _is_gguf(p: Path) -> bool:
    with open(p, "rb") as f:
        return f.read(4) == b"GGUF"
