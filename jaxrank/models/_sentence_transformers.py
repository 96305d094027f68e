"""Reading a sentence-transformers model folder (private; :mod:`~jaxrank.models.bert` re-exports
:func:`sentence_transformer_settings`).

jaxrank runs the ``Transformer -> Pooling -> Normalize`` pipeline of a BERT sentence encoder
(:func:`~jaxrank.models.bert.embed`, :func:`~jaxrank.models.bert.embed_packed`) with one pooling mode of
``cls``, ``mean``, ``max`` and ``mean_sqrt_len``. A folder that asks for more (another module, such as
LaBSE's ``Dense`` projection, or a pooling jaxrank does not run, such as ``lasttoken``) is refused by
name, since its embeddings would not be the model's own.

The pooling flags are read as sentence-transformers' ``Pooling(**config)`` reads them: a missing
``pooling_mode_mean_tokens`` is True, the other flags False, and a ``pooling_mode`` string, when given,
sets exactly its own flag.
"""

from __future__ import annotations

import json
import os
from typing import Any

MODULES = ("Transformer", "Pooling", "Normalize")
"""The sentence-transformers module types jaxrank runs (the last part of ``modules.json``'s ``type``)."""

_FLAGS = {  # Pooling config key -> (its default in sentence-transformers, jaxrank's pooling or None)
    "pooling_mode_cls_token": (False, "cls"),
    "pooling_mode_mean_tokens": (True, "mean"),
    "pooling_mode_max_tokens": (False, "max"),
    "pooling_mode_mean_sqrt_len_tokens": (False, "mean_sqrt_len"),
    "pooling_mode_weightedmean_tokens": (False, None),
    "pooling_mode_lasttoken": (False, None),
}
_MODE_STRINGS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
                 "max": "pooling_mode_max_tokens", "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                 "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}


def _json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_modules(model_dir: str | os.PathLike) -> tuple[bool, str]:
    """``(normalize, pooling folder)`` from ``modules.json``; ``(True, "1_Pooling")`` without one.

    Raises:
        ValueError: ``modules.json`` not a list of objects, a module type other than :data:`MODULES`
            (naming it and the folder), or no ``Pooling`` module.
    """
    d = os.fspath(model_dir)
    path = os.path.join(d, "modules.json")
    if not os.path.exists(path):
        return True, "1_Pooling"
    mods = _json(path)
    if not isinstance(mods, list) or not all(isinstance(m, dict) for m in mods):
        raise ValueError(f"{path}: expected a list of module objects")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in mods]
    for m, kind in zip(mods, kinds):
        if kind not in MODULES:
            raise ValueError(f"{d}: modules.json has a {m.get('type')!r} module; jaxrank runs only "
                             f"{', '.join(MODULES)}, so its embeddings would not be the model's own")
    pools = [m for m, kind in zip(mods, kinds) if kind == "Pooling"]
    if not pools:
        raise ValueError(f"{d}: modules.json has no Pooling module (no sentence embedding)")
    return "Normalize" in kinds, str(pools[0].get("path") or "1_Pooling")


def read_pooling(model_dir: str | os.PathLike, pool_dir: str = "1_Pooling") -> str:
    """jaxrank's name of the folder's pooling (``pool_dir/config.json``; ``"mean"`` without one).

    Raises:
        ValueError: A pooling jaxrank does not run: a flag set other than the four of ``cls``, ``mean``,
            ``max`` and ``mean_sqrt_len`` (such as ``pooling_mode_lasttoken``, named), an unknown
            ``pooling_mode`` string, no mode, or several modes (sentence-transformers concatenates them).
    """
    path = os.path.join(os.fspath(model_dir), pool_dir, "config.json")
    if not os.path.exists(path):
        return "mean"
    cfg = _json(path)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    mode = cfg.get("pooling_mode")
    if mode is not None:
        key = _MODE_STRINGS.get(str(mode).lower())
        if key is None:
            raise ValueError(f"{path}: unknown pooling_mode {mode!r}")
        on = [key]
    else:
        on = [k for k, (default, _) in _FLAGS.items() if cfg.get(k, default)]
        on += [k for k in cfg if k.startswith("pooling_mode_") and k not in _FLAGS and cfg[k]]
    bad = [k for k in on if _FLAGS.get(k, (None, None))[1] is None]
    if bad:
        raise ValueError(f"{path}: pooling {', '.join(bad)} is not supported (jaxrank runs one of "
                         "cls, mean, max, mean_sqrt_len)")
    if len(on) != 1:
        raise ValueError(f"{path}: exactly one pooling mode is supported, got {on or 'none'}")
    return _FLAGS[on[0]][1]


def read_max_seq_length(model_dir: str | os.PathLike) -> int | None:
    """``max_seq_length`` of ``sentence_bert_config.json`` (``None`` without it).

    Raises:
        ValueError: A value that is not a positive integer.
    """
    path = os.path.join(os.fspath(model_dir), "sentence_bert_config.json")
    if not os.path.exists(path):
        return None
    n = _json(path).get("max_seq_length")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"{path}: max_seq_length must be a positive integer, got {n!r}")
    return n


def sentence_transformer_settings(model_dir: str | os.PathLike) -> dict[str, Any]:
    """Reads pooling / normalisation / max length from a sentence-transformers directory.

    Looks at ``modules.json`` (a ``Normalize`` module means ``normalize=True``; the ``Pooling`` module's
    path, ``1_Pooling`` by default), the pooling folder's ``config.json`` and
    ``sentence_bert_config.json`` (``max_seq_length``). Missing files give the all-MiniLM-L6-v2 defaults
    (mean pooling, normalised).

    Returns:
        ``{"pooling": str, "normalize": bool, "max_seq_length": int | None}``.

    Raises:
        ValueError: A folder jaxrank cannot run as the model's own: a module other than ``Transformer``,
            ``Pooling`` and ``Normalize`` (e.g. ``Dense``), or a pooling other than exactly one of
            ``cls``, ``mean``, ``max`` and ``mean_sqrt_len`` (the message names the folder and the flag).
    """
    normalize, pool_dir = read_modules(model_dir)
    return {"pooling": read_pooling(model_dir, pool_dir), "normalize": normalize,
            "max_seq_length": read_max_seq_length(model_dir)}
