"""Language models: JAX/Flax NNX networks, checkpoint and GGUF loading, the registry of offline models.

The bottom floor of the judging side (ARCHITECTURE.md): the judges
(:mod:`jaxrank.judges`) run these models; nothing here knows about judging.

* :func:`load_model` (:mod:`~jaxrank.models.loading`): a registry name, a Hugging
  Face checkpoint directory (safetensors) or a ``.gguf`` file
  (:mod:`~jaxrank.models.gguf`, with its tokenizer) -> a :class:`LoadedModel`.
* :mod:`~jaxrank.models.registry`: the named models that work offline (:data:`MODELS`).
* The networks, one module each (``llama``, ``t5``, ``bert``): a frozen config
  dataclass with ``from_hf(config_dict)`` (``llama_config``, ``t5_config``,
  beside the network's private core), an ``nnx.Module`` model class and
  ``load_state_dict(config_or_model, tensors)`` mapping Hugging Face tensor names
  onto it. :func:`load_model` imports the one a checkpoint needs, on demand.
* :mod:`~jaxrank.models.partition`: a Llama-family decoder split over a device
  mesh (:func:`shard_model`: tensor-parallel weights and caches, data-parallel
  batches), imported on first use of its names here.
"""

from jaxrank.models.loading import LoadedModel, build_model, load_model, read_checkpoint, read_safetensors
from jaxrank.models.registry import MODELS, list_models

__all__ = ["LoadedModel", "load_model", "build_model", "read_checkpoint", "read_safetensors", "MODELS",
           "list_models", "shard_model", "ShardedLlama"]

_PARTITION = ("shard_model", "ShardedLlama")


def __getattr__(name):
    if name in _PARTITION:       # deferred: partition imports the Llama network and flax, which loading does not
        from jaxrank.models import partition
        return getattr(partition, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
