"""JAX/Flax NNX implementations of the judge and encoder networks.

Each module (``llama``, ``t5``, ``bert``) exposes a frozen config dataclass with
``from_hf(config_dict)``, an ``nnx.Module`` model class and
``load_state_dict(config_or_model, tensors)`` mapping Hugging Face tensor names
onto it. Modules are imported on demand by :mod:`jaxrank.judges.loading`.
"""
