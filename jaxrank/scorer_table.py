"""The table of scorers, with their debias choices, defined once.

Every scorer the command line (``--method``), the report, the studies and the
benchmarks name is an entry of :data:`SCORERS`: its function, the debias choices
it accepts, whether it reads hard decisions or soft probabilities, and a line
describing it.

One debias vocabulary (:data:`DEBIAS`):

* model terms, fitted by the scorer itself: ``"none"``, ``"mean"`` (PoE's bias
  term from the mean probability, PoE eq. 12 and App. A.9) and ``"learn"`` (a
  bias ``gamma`` fitted jointly, soft Bradley-Terry only);
* transforms of the comparisons, before any scorer: ``"threshold"`` (LCA
  eq. 9-10, :func:`jaxrank.threshold_debias`) and ``"permutation"`` (average both
  orders, :func:`jaxrank.permutation_average`).

The scorers' own keywords keep their documented values (``False``/``True`` for
``"none"``/``"mean"``).

This module imports no JAX: the command line reads the table for ``--help``;
a scorer's module is imported when it is first used.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

__all__ = ["DEBIAS", "MODEL_TERMS", "TRANSFORMS", "ScorerEntry", "SCORERS", "check_debias", "transform",
           "scorer", "score", "functions"]

MODEL_TERMS = ("none", "mean", "learn")
"""Debias choices that are terms of a scorer's model."""
TRANSFORMS = ("threshold", "permutation")
"""Debias choices that transform the comparisons before scoring (every scorer accepts them)."""
DEBIAS = MODEL_TERMS + TRANSFORMS
"""Every debias choice."""


@dataclasses.dataclass(frozen=True)
class ScorerEntry:
    """One scorer of the table.

    Attributes:
        name: its name (``--method``).
        function: ``"module:attribute"`` of the function, imported on first use.
        model_terms: the model terms it accepts (:data:`MODEL_TERMS`); every
            scorer accepts the :data:`TRANSFORMS`.
        hard: whether it reads only the decisions ``1[p > 0.5]``.
        description: one line.
        options: fixed keywords of the function (``hard=True`` for PoE-g on decisions).
        debias_keyword: how a model term is passed: ``"bool"`` (``debias=True`` for
            ``"mean"``), ``"str"`` (``debias="mean"``/``"learn"``) or ``None`` (no term).
        in_report: listed by ``jaxrank assess`` by default.
    """

    name: str
    function: str
    model_terms: tuple[str, ...]
    hard: bool
    description: str
    options: tuple[tuple[str, object], ...] = ()
    debias_keyword: str | None = None
    in_report: bool = True

    @property
    def debias(self) -> tuple[str, ...]:
        """Every debias choice this scorer accepts."""
        return self.model_terms + TRANSFORMS

    def load(self) -> Callable:
        """The function, imported now."""
        module, attr = self.function.split(":")
        return getattr(importlib.import_module(module), attr)

    def keywords(self, debias: str = "none") -> dict:
        """The keywords that fit the model term ``debias`` (a transform passes none)."""
        kw = dict(self.options)
        if debias in MODEL_TERMS and debias != "none":
            kw["debias"] = True if self.debias_keyword == "bool" else debias
        return kw


def _entries(*rows):
    return {r.name: r for r in rows}


SCORERS: dict[str, ScorerEntry] = _entries(
    ScorerEntry("win_ratio", "jaxrank.scoring:win_ratio", ("none",), True,
                "fraction of games won (PoE eq. 6)"),
    ScorerEntry("average_probability", "jaxrank.scoring:average_probability", ("none",), False,
                "mean probability of winning (LCA §3.3)"),
    ScorerEntry("bradley_terry", "jaxrank.scoring:bradley_terry", ("none",), True,
                "Bradley-Terry on decisions with a 1/(N-1) virtual-win prior (PoE eq. 1-2)"),
    ScorerEntry("poe_gaussian", "jaxrank.scoring:poe_gaussian", ("none", "mean"), False,
                "product of Gaussian experts on probabilities (PoE-g, PoE eq. 7-8)", debias_keyword="bool"),
    ScorerEntry("poe_gaussian_hard", "jaxrank.scoring:poe_gaussian", ("none", "mean"), True,
                "product of Gaussian experts on decisions (PoE-g hard)", (("hard", True),), debias_keyword="bool"),
    ScorerEntry("poe_bradley_terry", "jaxrank.scoring:poe_bradley_terry", ("none", "mean", "learn"), False,
                "product of soft Bradley-Terry experts (PoE-BT, PoE §3.2)", debias_keyword="str"),
    ScorerEntry("max_likelihood_ranking", "jaxrank.scoring:max_likelihood_ranking", ("none",), True,
                "the ranking maximising the likelihood of the decisions (exhaustive; small N)", in_report=False),
)
"""Every scorer by name."""


def _accepting(choice: str) -> str:
    names = [n for n, e in SCORERS.items() if choice in e.debias]
    if len(names) == 1:
        return names[0]
    if all(n.startswith("poe_") for n in names) and len(names) == sum(n.startswith("poe_") for n in SCORERS):
        return "the PoE methods"
    return ", ".join(names)


def check_debias(name: str, debias, *, argument: str = "debias") -> str:
    """Validate scorer ``name`` and the debias choice ``debias`` for it; returns ``debias``.

    Raises:
        ValueError: an unknown scorer or choice, or a model term the scorer has not,
            naming ``argument``.
    """
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; choose from {', '.join(SCORERS)}")
    if not isinstance(debias, str) or debias not in DEBIAS:
        raise ValueError(f"{argument} must be one of {', '.join(DEBIAS)}; got {debias!r}")
    if debias not in SCORERS[name].debias:
        hint = "; use threshold or permutation" if debias == "mean" else ""
        raise ValueError(f"{argument} {debias} applies to {_accepting(debias)} only{hint}")
    return debias


def transform(c, debias: str):
    """``c`` transformed by a debias transform (``"threshold"``, ``"permutation"``); unchanged for a model term."""
    if debias not in DEBIAS:
        raise ValueError(f"debias must be one of {', '.join(DEBIAS)}; got {debias!r}")
    if debias in MODEL_TERMS:
        return c
    from jaxrank import debias as transforms   # deferred: the table imports no JAX until it scores

    return transforms.threshold_debias(c) if debias == "threshold" else transforms.permutation_average(c)


def score(name: str, c, debias: str = "none"):
    """Scores ``[..., N]`` of ``c`` by scorer ``name`` with the debias choice ``debias`` (validated)."""
    check_debias(name, debias)
    entry = SCORERS[name]
    return entry.load()(transform(c, debias), **entry.keywords(debias))


def scorer(name: str, debias: str = "none") -> Callable:
    """``Comparisons -> scores``: scorer ``name`` with ``debias`` fixed (validated now)."""
    check_debias(name, debias)

    def fn(c):
        return score(name, c, debias)

    fn.__name__ = name if debias == "none" else f"{name}_{debias}"
    return fn


def functions() -> dict[str, Callable]:
    """Every scorer as a function ``f(c, **keywords)`` (fixed options applied), by name."""
    out = {}
    for name, entry in SCORERS.items():
        f = entry.load()
        out[name] = (lambda f, kw: (lambda c, **k: f(c, **kw, **k)))(f, dict(entry.options)) if entry.options else f
    return out
