"""Start-up: ``jaxrank --help``, argument errors and a malformed file never import JAX (each in a fresh process);
the lazy package namespace gives every public name as the eager imports did."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("jax", "jaxlib", "flax", "optax", "datasets", "transformers", "pandas", "torch")


def _fresh(code, tmp_path):
    """Run ``code`` in a fresh interpreter with this checkout first on the path; return its stdout."""
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys
        heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
        print("HEAVY", heavy)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_help_and_argument_errors_import_no_jax(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("item_a,item_b,p\nx,y,0.5\nx,y,lots\n")
    out = _fresh(f"""
        from jaxrank.cli import main

        def run(argv):
            try:
                main(argv)
            except SystemExit as e:
                print("EXIT", argv[:2], e.code)

        run(["--help"])
        run(["rank", "--help"])
        run(["rank", "--method", "bogus"])            # argparse error
        run(["rank", "{bad}", "--top", "-1"])          # our own option check
        run(["rank", "{bad}", "--method", "win_ratio", "--debias", "learn"])
        run(["rank", "{bad}"])                         # a malformed file: reported before JAX is needed
    """, tmp_path)
    assert out.count("EXIT") == 6
    assert "usage: jaxrank" in out and "--method" in out
    assert "HEAVY []" in out, out


def test_rank_error_messages_reach_the_user(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("item_a,item_b,p\nx,y,0.5\nx,y,lots\n")
    proc = subprocess.run([sys.executable, "-m", "jaxrank.cli", "rank", str(bad)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2                     # a usage error: the input named on the command line
    assert f"jaxrank: {bad}, line 3: field 'p' = 'lots' is not a number" in proc.stderr


def test_import_jaxrank_and_data_dir_are_light(tmp_path):
    out = _fresh("""
        import jaxrank as jr
        from jaxrank.data import data_dir, DATASETS
        import jaxrank.io
        names = dir(jr)
        assert "win_ratio" in names and "metrics" in names and "SCORERS" in names
        try:
            data_dir()
        except FileNotFoundError:
            pass
    """, tmp_path)
    assert "HEAVY []" in out, out


def test_reading_a_file_imports_no_pandas(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("left,right,winner\nx,y,left\n")
    out = _fresh(f"""
        from jaxrank.io import read_comparisons
        t = read_comparisons({str(f)!r})
        assert t.items == [["x", "y"]]
        import sys
        print("PANDAS", "pandas" in sys.modules)
    """, tmp_path)
    assert "PANDAS False" in out


def test_lazy_namespace_gives_every_public_name():
    import importlib

    import jaxrank as jr

    for name in jr.__all__:
        assert getattr(jr, name) is not None, name
    assert callable(jr.win_ratio) and jr.win_ratio is importlib.import_module("jaxrank.scoring").win_ratio
    assert set(jr.SCORERS) == {"win_ratio", "average_probability", "bradley_terry", "poe_gaussian",
                               "poe_gaussian_hard", "poe_bradley_terry", "max_likelihood_ranking"}
    assert jr.metrics.__name__ == "jaxrank.metrics" and jr.data.__name__ == "jaxrank.data"
    assert jr.judges.__name__ == "jaxrank.judges"
    from jaxrank import Comparisons, stack_contexts  # noqa: F401  (from-imports resolve through __getattr__)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        jr.not_a_name  # noqa: B018
    with pytest.raises(ImportError):
        from jaxrank import not_a_name  # noqa: F401


def test_bootstrap_stays_the_function_after_its_module_is_imported(tmp_path):
    out = _fresh("""
        import jaxrank as jr
        import jaxrank.bootstrap
        from jaxrank.bootstrap import bootstrap_intervals
        import types
        assert callable(jr.bootstrap) and not isinstance(jr.bootstrap, types.ModuleType), jr.bootstrap
        assert jr.bootstrap is __import__("sys").modules["jaxrank.bootstrap"].bootstrap
        print("OK")
    """, tmp_path)
    assert "OK" in out
