"""LLM judges: JAX model implementations, checkpoint loading and the judging layer (issue 3)."""

from jaxrank.judges.loading import LoadedModel, load_model
from jaxrank.judges.registry import MODELS, list_models

__all__ = ["LoadedModel", "load_model", "MODELS", "list_models"]
