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


def test_readme_quick_start_runs():
    import re
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks
    exec(compile(blocks[0], "README.md", "exec"), {})
