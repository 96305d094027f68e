import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# The CLI keeps compiled programs on disk by default; not from the tests' process.
os.environ.setdefault("JAXRANK_COMPILATION_CACHE", "0")
