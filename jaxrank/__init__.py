"""jaxrank: LLM comparative assessment in JAX."""
from jaxrank.comparisons import Comparisons, stack_contexts
from jaxrank.scoring import *  # noqa: F401,F403
