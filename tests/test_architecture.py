"""The architecture of ARCHITECTURE.md, checked on the source: imports go down the floors, privates stay home.

Every module under ``jaxrank/`` is parsed with :mod:`ast` (nothing is imported),
and every import statement counts: at module level, inside functions and
classes, and under ``if TYPE_CHECKING:``; ``importlib.import_module("jaxrank...")``
with a literal name too.

(a) **Floors.** :data:`FLOORS` gives every module its floor (the longest
    matching package prefix; the package root ``jaxrank`` matches only itself).
    A module may import modules of its own floor or below, never above. The
    package root (``jaxrank/__init__.py``) is the public facade: it re-exports
    every floor and is not checked as an importer; as an import target it sits
    just below the command line, so a library module that imports the root
    reaches upwards.

(b) **Private names.** A name is private if it starts with ``_`` and is not a
    dunder (``__x__``).

    1. A private module ``P._m`` (``jaxrank._graph``, ``jaxrank.selection._common``,
       ``jaxrank.models._llama_core``) may be imported only by modules inside its
       package ``P`` (at any depth; ``P``'s ``__init__`` included). So
       ``jaxrank._graph`` serves the whole library, ``selection._common`` only
       ``selection``.
    2. A private attribute ``_x`` of a module ``M`` (a function, class, constant
       or variable, imported by ``from M import _x`` or used as ``M._x`` through
       any name bound to ``M``) may be used only by modules of the same package as
       ``M`` (its siblings; for a package's ``__init__``, the package's own
       modules), not from a subpackage, a parent or another package.

    Scripts outside the package (``benchmarks/``, ``experiments/``) may use no
    private name of ``jaxrank`` at all. ``tests/`` are exempt: they test
    internals on purpose.

Known violations that phase 2 of the layout redesign removes are listed in
:data:`KNOWN_UPWARD` and :data:`KNOWN_PRIVATE`; an entry that no longer occurs
fails the test too, so the lists always show exactly what remains.

(c) The old import paths of the moved modules and names still work, each with a
    ``DeprecationWarning``; the package's own imports raise none.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxrank"

FLOORS = {
    # 0 core: the comparison pytree, graph algebra, metrics, data sets, file formats, the compilation cache
    "jaxrank.comparisons": 0, "jaxrank._graph": 0, "jaxrank._sparse_inverse": 0, "jaxrank._batching": 0, "jaxrank.metrics": 0, "jaxrank.data": 0, "jaxrank.io": 0,
    "jaxrank._validate": 0, "jaxrank.compilation": 0, "jaxrank.distributed": 0, "jaxrank._deprecation": 0, "jaxrank._notices": 0, "jaxrank._faults": 0, "jaxrank._multinomial": 0,
    # 1 scorers
    "jaxrank.scoring": 1,
    # 2 statistics of scores and judges: debiasing, zero-shot objectives, uncertainty, bootstrap, simulated
    # judges, sharding, learnt calibration and its fit
    "jaxrank.debias": 2, "jaxrank.fairness": 2, "jaxrank.uncertainty": 2, "jaxrank.bootstrap": 2,
    "jaxrank.simulate": 2, "jaxrank.sharding": 2, "jaxrank.scorer_table": 2, "jaxrank.calibration": 2,
    "jaxrank.learning": 2, "jaxrank._ranking_losses": 2,
    # 3 which comparisons to make
    "jaxrank.selection": 3,
    # 4 language models: networks, checkpoint and GGUF loading, the registry
    "jaxrank.models": 4,
    # 5 judges: prompts and the judges producing Comparisons
    "jaxrank.judges": 5,
    # 6 the assessment pipeline: run, store, active loop, report
    "jaxrank.assessment": 6,
    # 7 reusable studies (sweeps) of the experiments; jaxrank.experiments is its deprecated old name
    "jaxrank.studies": 7, "jaxrank.experiments": 7,
    # 8 the package root, the public facade (re-exports; not checked as an importer)
    "jaxrank": 8,
    # 9 the command line
    "jaxrank.cli": 9,
}
"""Module (or package) -> floor, bottom to top, as in ARCHITECTURE.md."""

FACADE = "jaxrank"

KNOWN_UPWARD: set[tuple[str, str]] = set()
"""(importer, imported) pairs that import a higher floor today."""

KNOWN_PRIVATE = {
    # The one deliberate exception: the edge-space benchmark measures an internal choice (the
    # threshold DENSE_RATIO between the dense and the sparse edge space), so it must reach inside.
    ("benchmarks.edge_space", "jaxrank._graph", ""),
    # Likewise the judge's batch-plan check measures how the A parts are planned on a CPU
    # (A_BATCH_COST, an internal constant of the forward pass), so it sets it from outside.
    ("benchmarks.judge_plan_check", "jaxrank.judges._forward", ""),
}
"""(user, module, private attribute) triples used across packages today ("" = the private module itself)."""


# ------------------------------------------------------------------------------------------- source model
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _library() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _library()
PACKAGES = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(module: str) -> str:
    """The package a module belongs to: itself for a package, else its parent."""
    return module if module in PACKAGES else module.rpartition(".")[0]


def _resolve_from(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute module of ``from <...> import``, relative imports resolved against ``module``."""
    if not node.level:
        return node.module
    base = _package_of(module).split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, tree: ast.AST):
    """``(line, imported module, name or None)`` for every import of a ``jaxrank`` module anywhere in ``tree``.

    ``from M import n`` gives ``(M.n, None)`` when ``M.n`` is a module, else ``(M, n)``.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            src = _resolve_from(module, node)
            for a in node.names:
                sub = f"{src}.{a.name}"
                yield (node.lineno, sub, None) if sub in MODULES else (node.lineno, src, a.name)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value, None


def floor_of(module: str) -> int:
    """The floor of a ``jaxrank`` module: its longest prefix in :data:`FLOORS` (the root matches only itself)."""
    parts = module.split(".")
    for k in range(len(parts), 1, -1):
        if ".".join(parts[:k]) in FLOORS:
            return FLOORS[".".join(parts[:k])]
    if module == FACADE:
        return FLOORS[FACADE]
    raise KeyError(module)


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for module, path in MODULES.items():
        if module == FACADE:
            continue
        for _, target, _ in _imports(module, ast.parse(path.read_text(), str(path))):
            if target == FACADE or target.startswith(FACADE + "."):
                if floor_of(target) > floor_of(module):
                    found.add((module, target))
    return found


def _private_module_violation(user: str, module: str) -> str | None:
    """The first private module on the path of ``module`` that ``user`` may not import (rule 1), if any."""
    parts = module.split(".")
    for k in range(1, len(parts)):
        if _is_private(parts[k]):
            owner = ".".join(parts[:k])
            if not (user == owner or user.startswith(owner + ".")):
                return ".".join(parts[:k + 1])
    return None


def _attribute_allowed(user: str, module: str) -> bool:
    return user == module or (user.startswith("jaxrank") and _package_of(user) == _package_of(module))


def private_uses(user: str, path: Path) -> set[tuple[str, str, str]]:
    """``(user, module, private attribute or "")`` for every private name ``user`` may not use."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    bound: dict[str, str] = {}                     # local name -> jaxrank module it is bound to
    for _, target, name in _imports(user, tree):
        if not (target == FACADE or target.startswith(FACADE + ".")):
            continue
        bad = _private_module_violation(user, target)
        if bad:
            found.add((user, bad, ""))
        if name is not None and _is_private(name) and not _attribute_allowed(user, target):
            found.add((user, target, name))
    for node in ast.walk(tree):                    # names bound to modules, for attribute uses
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(FACADE):
                    bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve_from(user, node)
            for a in node.names:
                if src and f"{src}.{a.name}" in MODULES:
                    bound[a.asname or a.name] = f"{src}.{a.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in bound:
            continue
        module = bound[base.id]
        for attr in reversed(chain):
            if f"{module}.{attr}" in MODULES:
                module = f"{module}.{attr}"
                bad = _private_module_violation(user, module)
                if bad:
                    found.add((user, bad, ""))
                continue
            if _is_private(attr) and not _attribute_allowed(user, module):
                found.add((user, module, attr))
            break
    return found


def _scripts() -> dict[str, Path]:
    return {_module_name(p): p for folder in ("benchmarks", "experiments") for p in sorted((ROOT / folder).glob("*.py"))}


# ------------------------------------------------------------------------------------------------- tests
def test_every_module_has_a_floor():
    missing = [m for m in MODULES if m != FACADE and not _has_floor(m)]
    assert not missing, f"modules with no floor in FLOORS (add them here and to ARCHITECTURE.md): {missing}"


def _has_floor(module):
    try:
        floor_of(module)
    except KeyError:
        return False
    return True


def test_imports_go_down_the_floors():
    found = upward_imports()
    new = sorted(found - KNOWN_UPWARD)
    assert not new, "imports from a lower floor to a higher one (see ARCHITECTURE.md):\n" + "\n".join(
        f"  {a} (floor {floor_of(a)}) imports {b} (floor {floor_of(b)})" for a, b in new)
    gone = sorted(KNOWN_UPWARD - found)
    assert not gone, f"fixed, now remove from KNOWN_UPWARD: {gone}"


def test_no_module_uses_another_packages_private_names():
    found = set()
    for user, path in {**MODULES, **_scripts()}.items():
        found |= private_uses(user, path)
    new = sorted(found - KNOWN_PRIVATE)
    assert not new, "private names used outside their package (see ARCHITECTURE.md):\n" + "\n".join(
        f"  {u} uses {m}{'.' + a if a else ''}" for u, m, a in new)
    gone = sorted(KNOWN_PRIVATE - found)
    assert not gone, f"fixed, now remove from KNOWN_PRIVATE: {gone}"


def _fake_library(tmp_path, files):
    for rel, src in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))


def test_the_checks_catch_violations(tmp_path, monkeypatch):
    """The checkers on a fake library with one violation of each kind (and allowed uses beside them)."""
    _fake_library(tmp_path, {
        "jaxrank/__init__.py": "",
        "jaxrank/_graph.py": "def _h(): pass\ndef f(): pass\n",
        "jaxrank/comparisons.py": "def lazy():\n    from jaxrank.judges import pairwise\n",
        "jaxrank/scoring/__init__.py": "",
        "jaxrank/scoring/soft_bt.py": "from jaxrank import _graph\ndef _solve(): pass\n",
        "jaxrank/scoring/bradley_terry.py": "from jaxrank.scoring import soft_bt\nsoft_bt._solve()\n",
        "jaxrank/scoring/_core.py": "",
        "jaxrank/uncertainty.py": "from jaxrank.scoring import soft_bt\nx = soft_bt._solve\n",
        "jaxrank/debias.py": "from jaxrank.scoring._core import thing\nfrom .scoring.soft_bt import _solve\n",
        "jaxrank/judges/__init__.py": "",
        "jaxrank/judges/pairwise.py": "import jaxrank.scoring.soft_bt as sb\nif 1:\n    sb._solve()\n",
    })
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "jaxrank")
    monkeypatch.setattr(sys.modules[__name__], "MODULES", _library())
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", {_module_name(p) for p in (tmp_path / "jaxrank").rglob(
        "__init__.py")})
    assert upward_imports() == {("jaxrank.comparisons", "jaxrank.judges.pairwise")}   # inside a function
    found = set()
    for user, path in MODULES.items():
        found |= private_uses(user, path)
    assert found == {
        ("jaxrank.uncertainty", "jaxrank.scoring.soft_bt", "_solve"),          # attribute, another package
        ("jaxrank.debias", "jaxrank.scoring._core", ""),                        # private module of scoring
        ("jaxrank.debias", "jaxrank.scoring.soft_bt", "_solve"),                # relative from-import
        ("jaxrank.judges.pairwise", "jaxrank.scoring.soft_bt", "_solve"),       # through an alias
    }                           # allowed: soft_bt -> jaxrank._graph (the whole library), bradley_terry -> sibling


# ----------------------------------------------------------------------------------------- deprecations
OLD_JUDGES_ALL = [                # jaxrank.judges.__all__ before the split (models, judges, pipeline in one)
    "LoadedModel", "load_model", "MODELS", "list_models",
    "PromptJudge", "Judgement", "SamplingJudge", "CallableJudge", "label_parser", "SimilarityJudge",
    "GEvalJudge", "PromptScoringJudge", "PointwiseResult", "parse_score", "pointwise_comparisons",
    "PairwiseTemplate", "PointwiseTemplate", "TEMPLATES", "ZEPO_SEED", "G_EVAL_CRITERIA",
    "pairwise_template", "pointwise_template",
    "JudgementStore", "StoredComparisons", "ContextSet", "contexts_of", "judge_contexts", "judge_comparisons",
    "plan_pairs", "Assessment", "assess_comparisons",
    "active_judge_contexts", "ActiveRun", "StoreJudgeFn", "check_active",
]


def test_moved_names_forward_with_a_warning():
    import jaxrank.assessment
    import jaxrank.judges
    import jaxrank.models
    import jaxrank.studies

    for name, new in jaxrank.judges.MOVED_NAMES.items():
        with pytest.warns(DeprecationWarning, match=rf"jaxrank\.judges\.{name} is deprecated.*use {new}\.{name}"):
            value = getattr(jaxrank.judges, name)
        assert value is getattr(sys.modules[new], name)
    # every name jaxrank.judges exported before the split is still there: a judge, or forwarded
    new_judges = {"SoftPrompt", "train_soft_prompt",                 # added after the split
                  "replay_comparisons", "replay_probabilities", "replay_scores",
                  "ServerJudge", "ServerGEvalJudge", "parser_key", "SampledGEvalJudge"}
    assert set(OLD_JUDGES_ALL) | new_judges == set(jaxrank.judges.__all__) | set(jaxrank.judges.MOVED_NAMES)
    assert not set(jaxrank.judges.__all__) & set(jaxrank.judges.MOVED_NAMES)
    with pytest.warns(DeprecationWarning, match="JudgeMatrix"):
        assert jaxrank.studies.Judge is jaxrank.studies.JudgeMatrix
    with pytest.raises(AttributeError, match="experiments/_common.py"):
        jaxrank.studies.load_judge
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        jaxrank.judges.nothing


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_old_module_paths_are_the_new_modules_with_a_warning():
    """In a fresh process (the modules must not be imported yet): each old path warns once and is the new module."""
    out = _run("""
        import importlib, sys, warnings
        import jaxrank.judges
        old_paths = dict(jaxrank.judges.MOVED_MODULES)
        old_paths.update({"jaxrank.judges.models.llama": "jaxrank.models.llama",
                          "jaxrank.judges.models.t5": "jaxrank.models.t5",
                          "jaxrank.experiments": "jaxrank.studies"})
        for old, new in old_paths.items():
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                mod = importlib.import_module(old)
            ours = [x for x in w if issubclass(x.category, DeprecationWarning) and old + " is deprecated" in str(x.message)]
            assert len(ours) == 1, (old, [str(x.message) for x in w])
            assert new in str(ours[0].message)
            assert mod is importlib.import_module(new), old
            assert mod.__spec__.name == new and mod.__name__ == new, old   # the real spec kept
        from jaxrank.judges.run import judge_contexts                        # from-imports of old paths
        from jaxrank.judges.models.llama import LlamaConfig
        import jaxrank.assessment.run, jaxrank.models.llama
        assert judge_contexts is jaxrank.assessment.run.judge_contexts
        assert LlamaConfig is jaxrank.models.llama.LlamaConfig
        print("ok")
    """)
    assert out.strip() == "ok"


def test_the_package_itself_uses_no_deprecated_path():
    """Importing every module (the deprecated jaxrank.experiments aside) raises none of our DeprecationWarnings."""
    out = _run("""
        import importlib, pkgutil, warnings
        warnings.filterwarnings("error", message=".*is deprecated and will be removed in the next release")
        import jaxrank
        names = [m.name for m in pkgutil.walk_packages(jaxrank.__path__, "jaxrank.") if m.name != "jaxrank.experiments"]
        for name in names:
            importlib.import_module(name)
        print(len(names))
    """)
    assert int(out) >= 40
