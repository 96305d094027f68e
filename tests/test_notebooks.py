"""The notebooks run as they are (code cells executed in order, plots to a non-interactive backend)."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    import jaxrank
    try:
        jaxrank.data.data_dir()
    except FileNotFoundError:
        pytest.skip("shared data folder not found (set JAXRANK_DATA)")
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    exec(compile(code, str(path), "exec"), {"__name__": "__notebook__"})


def test_readme_quick_start_runs(tmp_path):
    """The README's first Python block, in a fresh process: it turns on the process-wide persistent
    compilation cache (``jr.enable_compilation_cache()``), which must not leak into this test
    process (every later compile would be serialised to disk) nor write to the user's cache."""
    import os
    import re
    import subprocess
    import sys
    root = Path(__file__).parent.parent
    blocks = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), re.S)
    assert blocks
    env = dict(os.environ, JAXRANK_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", blocks[0]], cwd=root, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    if "enable_compilation_cache" in blocks[0]:
        assert (tmp_path / "cache" / "xla").is_dir()          # the cache went where JAXRANK_CACHE says
