"""Old import paths kept working for one release, each with a ``DeprecationWarning``.

Three kinds of forward (ARCHITECTURE.md, "Moved names"):

* a moved **name** of a package (``jaxrank.judges.load_model``): the package's
  module ``__getattr__`` calls :func:`forward_name`, which warns and returns the
  name from its new module;
* a **renamed** name (``jaxrank.studies.Judge``, now ``JudgeMatrix``):
  :func:`renamed`, from the module's ``__getattr__``;
* a moved **module** (``jaxrank.judges.run``, ``jaxrank.judges.models.llama``):
  :func:`forward_modules` installs an import hook (a ``sys.meta_path`` finder)
  that, for an old module path, warns and hands out the module at its new path
  (the same module object, so monkeypatching either name patches both).

New modules are named by strings, never imported here, so a forward never
shows up as an upward import in the architecture test.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Mapping

__all__ = ["forward_name", "renamed", "forward_modules", "renamed_keyword", "UNSET"]


def _warn(old: str, new: str, stacklevel: int) -> None:
    # stacklevel counts this helper; the import system's own frames are skipped by the warnings module,
    # so the warning points at the code that named the old path
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def forward_name(package: str, name: str, moved_names: Mapping[str, str],
                 moved_modules: Mapping[str, str] | None = None):
    """The value of ``package.name`` after a move, with a ``DeprecationWarning``.

    For a package's module ``__getattr__``.

    Args:
        package: the old package (``"jaxrank.judges"``).
        name: the attribute asked for.
        moved_names: ``{name: new module}`` of the package's moved names.
        moved_modules: ``{old module path: new}`` (:func:`forward_modules`): a moved
            submodule asked for as an attribute (``jaxrank.judges.run``) gives the new module.

    Raises:
        AttributeError: ``name`` was never moved (the usual message of a missing attribute).
    """
    old = f"{package}.{name}"
    if moved_modules and old in moved_modules:
        _warn(old, moved_modules[old], 4)                # _warn, forward_name, __getattr__, the caller
        return importlib.import_module(moved_modules[old])
    if name not in moved_names:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(old, f"{moved_names[name]}.{name}", 4)
    return getattr(importlib.import_module(moved_names[name]), name)


def renamed(module: str, old: str, new: str):
    """``module.new`` asked for by its old name ``old``, with a ``DeprecationWarning`` (for ``__getattr__``)."""
    _warn(f"{module}.{old}", f"{module}.{new}", 4)       # _warn, renamed, __getattr__, the caller
    return getattr(sys.modules[module], new)


class _ModuleForwards(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds old module paths (``old`` or ``old.sub``) and loads them as the module at the new path."""

    def __init__(self, moved: Mapping[str, str]):
        self.moved = dict(moved)
        self._specs = {}                             # old name -> the new module's own spec, while loading

    def _new_name(self, fullname: str) -> str | None:
        for old, new in self.moved.items():
            if fullname == old or fullname.startswith(old + "."):
                return new + fullname[len(old):]
        return None

    def find_spec(self, fullname, path=None, target=None):
        new = self._new_name(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = self._new_name(spec.name)
        _warn(spec.name, new, 3)                     # _warn, create_module, the importing code
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__     # the import system sets __spec__ to ours; restored below
        return module

    def exec_module(self, module):
        module.__spec__ = self._specs.pop(module.__spec__.name)


def forward_modules(moved: Mapping[str, str]) -> None:
    """Keep the old module paths ``moved`` (``{old: new}``; submodules follow their package) importable.

    Installs one finder per call at the front of ``sys.meta_path`` (so an old
    package path never reaches the file system finder, which would load a second
    copy of a module under its old name); a call with the same mapping again
    does nothing.
    """
    moved = dict(moved)
    if not any(isinstance(f, _ModuleForwards) and f.moved == moved for f in sys.meta_path):
        sys.meta_path.insert(0, _ModuleForwards(moved))


UNSET = object()
"""Default of a deprecated keyword: distinguishes "not passed" from ``None``."""


def renamed_keyword(function: str, old: str, new: str, old_value, new_value):
    """The value of keyword ``new`` of ``function``, taking the deprecated ``old`` with a ``DeprecationWarning``.

    ``old_value`` is :data:`UNSET` when the caller did not pass ``old``.

    Raises:
        ValueError: both ``old`` and ``new`` were passed.
    """
    if old_value is UNSET:
        return new_value
    if new_value is not None:
        raise ValueError(f"{function}: pass {new}= only ({old}= is its deprecated old name)")
    _warn(f"{function}({old}=)", f"{function}({new}=)", stacklevel=4)
    return old_value
