"""Systems and single raters of the data sets: the system level and the human ceiling.

**Systems.** A data set names the system behind each candidate when its file does:
``topicalchat`` (``system_id``), ``personachat`` (``model``), ``webnlg2017`` and ``webnlg2020``
(the team) carry it as the ``candidate_id`` of :func:`jaxrank.data.load_dataset`; ``hanna``'s
``story_id`` is a rank, and its systems are recovered from the HANNA release CSV
(:func:`jaxrank.data.match_systems`). ``summeval`` and ``newsroom`` name none: their
``summary_id`` is a position within the article, not a system, so **no system level can be
computed from these files** (:data:`NO_SYSTEMS`).

**Single raters.** The human scores of the loaders are means over raters. Three files keep each
rater's score (:data:`PER_RATER`): HANNA (``Human 1 XX`` .. ``Human 3 XX`` of the release CSV, 3
crowd ratings per story), PersonaChat USR (the 3 raters of each dialogue, the same 3 people for
its 5 responses) and WebNLG 2020 (``en.zip``: 1-3 crowd workers per output, different workers
for different systems). A *rater* ``k`` here is the ``k``-th rating of each candidate in the file's
order; in HANNA and WebNLG it is a slot, not one person across a context's candidates. The others
(:data:`MEANS_ONLY`) hold the mean only: SummEval's file has the mean of its 3 experts per summary,
so **the agreement of one SummEval expert with the others cannot be computed from it**.

**The human ceiling** (:func:`human_ceiling`) is the agreement of one rater with the mean of the
others, leave one rater out: with ``x_k[c, n]`` rater ``k``'s score of candidate ``n`` of context
``c`` and ``y_{-k}[c, n]`` the mean of the other raters of that candidate,

``rho_c = mean_k corr(x_k[c, :], y_{-k}[c, :])``    (over the candidates both exist for),

``ceiling = mean_c rho_c`` over the contexts where it is defined, for ``corr`` each of Spearman,
Kendall tau-b and Pearson (:data:`jaxrank.metrics.CORRELATIONS`), with a percentile bootstrap
interval over contexts. At the system level ``corr`` is taken between per-system means of
``x_k`` and of ``y_{-k}`` (:func:`jaxrank.metrics.system_level`), averaged over ``k``, with a percentile
bootstrap interval resampling contexts (:func:`system_interval`; a correlation of means over resampled
contexts is biased low, so this interval can lie below the estimate: read it as the spread, not a bound).
One rater against the mean of the others is against a mean of one fewer rater than the judge's gold (the
mean of all): the ceiling is conservative.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy import stats

from jaxrank import metrics
from jaxrank.data.hanna_llm import ASPECT_CODES, CSV_FILE, _column, _read_release, match_systems
from jaxrank.data.loaders import _PERSONACHAT_KEYS, _WEBNLG2020_KEYS, ASPECTS, data_dir, label_matrix, load_dataset

__all__ = ["PER_RATER", "MEANS_ONLY", "NO_SYSTEMS", "RaterScores", "HumanCeiling", "system_ids", "rater_scores",
           "human_ceiling", "system_interval", "MIN_CONTEXTS"]

PER_RATER: dict[str, str] = {
    "hanna": "3 crowd ratings per story (Human 1-3 of the HANNA release CSV)",
    "personachat": "the 3 raters of each dialogue (the same 3 for its 5 responses)",
    "webnlg2020": "1-3 crowd workers per output (en.zip; different workers for different systems)",
}
"""Data sets whose files keep every rater's score, with who the raters are."""

MEANS_ONLY: dict[str, str] = {
    "summeval": "the file holds only the mean of the 3 experts per summary",
    "topicalchat": "the file holds only the mean of the 3 USR raters",
    "newsroom": "the file holds only the mean of the 3 raters",
    "webnlg2017": "the file holds only the mean over raters",
}
"""Data sets whose files hold mean human scores only: no single rater, so no human ceiling."""

NO_SYSTEMS: dict[str, str] = {
    "summeval": "summary_id is a position within the article, not a system",
    "newsroom": "summary_id is a position within the article, not a system",
}
"""Data sets whose files do not say which system wrote a candidate: no system level."""

MIN_CONTEXTS = 5
"""Fewest contexts with a defined value for a bootstrap interval (as the assess report)."""

_WEBNLG2020_ZIP = "webnlg2020/en.zip"


class RaterScores(NamedTuple):
    """Every rater's score of one aspect, laid out like :func:`jaxrank.data.label_matrix`.

    Attributes:
        scores: ``float64 [C, N, K]``, rater ``k``'s score of candidate ``n`` of context ``c``; NaN where
            that candidate has no ``k``-th rating (or is padding).
        mask: ``bool [C, N]``, True for real candidates.
        context_ids: the context id of each row.
        candidate_ids: per row, the candidate id of each real column.
        systems: per row, the system of each real column (``None`` where the file names none).
    """

    scores: np.ndarray
    mask: np.ndarray
    context_ids: list[str]
    candidate_ids: list[list[str]]
    systems: list[list[str]] | None


def _folder(path) -> Path:
    return Path(path) if path is not None else data_dir()


def _check(name: str, aspect: str | None = None) -> None:
    if name not in ASPECTS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(ASPECTS)}")
    if aspect is not None and aspect not in ASPECTS[name]:
        raise ValueError(f"unknown aspect {aspect!r} of {name}; known: {', '.join(ASPECTS[name])}")


def system_ids(name: str, *, path: str | os.PathLike | None = None) -> dict[tuple[str, str], str] | None:
    """The system behind each candidate of a data set, or ``None`` where the file names none.

    Args:
        name: a data set of :data:`jaxrank.data.DATASETS`.
        path: data folder (default :func:`jaxrank.data.data_dir`).

    Returns:
        ``{(context_id, candidate_id): system}`` in the ids of :func:`jaxrank.data.load_dataset`;
        ``None`` for the data sets of :data:`NO_SYSTEMS`.
    """
    _check(name)
    if name in NO_SYSTEMS:
        return None
    folder = _folder(path)
    lm = label_matrix(load_dataset(name, path=folder), ASPECTS[name][0])
    if name == "hanna":
        systems = match_systems(folder)
    else:                                       # the candidate id is the system (module docstring)
        systems = lm.candidate_ids
    return {(ctx, cand): sys for ctx, cands, syss in zip(lm.context_ids, lm.candidate_ids, systems)
            for cand, sys in zip(cands, syss)}


def rater_scores(name: str, aspect: str, *, path: str | os.PathLike | None = None) -> RaterScores:
    """Every rater's score of ``aspect``, aligned with ``label_matrix(load_dataset(name), aspect)``.

    The mean over raters of ``scores`` is the loader's human score (the tests check it).

    Args:
        name: a data set of :data:`PER_RATER`.
        aspect: one of ``ASPECTS[name]``.
        path: data folder (default :func:`jaxrank.data.data_dir`).

    Raises:
        ValueError: an unknown data set or aspect, or a data set whose file holds means only
            (:data:`MEANS_ONLY`), or a per-rater file that does not match the loader's candidates.
    """
    _check(name, aspect)
    if name not in PER_RATER:
        raise ValueError(f"{name}: no single raters' scores: {MEANS_ONLY[name]}; per-rater scores exist for "
                         f"{', '.join(PER_RATER)}")
    folder = _folder(path)
    lm = label_matrix(load_dataset(name, path=folder), aspect)
    c, n = lm.mask.shape
    systems = None
    if name == "hanna":
        file = folder / CSV_FILE
        rows = _read_release(file)
        index = {row["Model"]: s for s, row in enumerate(rows)}
        cols = np.stack([_column(rows, f"Human {k} {ASPECT_CODES[aspect]}", file) for k in (1, 2, 3)], -1)
        systems = match_systems(folder)
        scores = np.full((c, n, 3), np.nan)
        for k, names in enumerate(systems):
            scores[k, : len(names)] = cols[[index[s] for s in names], k]
    elif name == "personachat":
        records = json.loads((folder / "personachat_usr" / "topicalchat_usr.json").read_text(encoding="utf-8"))
        if len(records) != c:
            raise ValueError(f"personachat: {len(records)} records in the file, {c} contexts in the loader")
        scores = np.full((c, n, 3), np.nan)
        key = _PERSONACHAT_KEYS[aspect]
        for k, rec in enumerate(records):
            models = [r["model"] for r in rec["responses"]]
            if models != lm.candidate_ids[k]:
                raise ValueError(f"personachat: context C{k}: responses {models} != loader's {lm.candidate_ids[k]}")
            for m, resp in enumerate(rec["responses"]):
                scores[k, m, : len(resp[key])] = resp[key]
        systems = lm.candidate_ids
    else:                                                             # webnlg2020
        key = _WEBNLG2020_KEYS[aspect]
        with zipfile.ZipFile(folder / _WEBNLG2020_ZIP) as z:
            teams = {p.split("/")[1]: json.loads(z.read(p)) for p in z.namelist() if p.endswith("/primary.json")}
        width = max(len(w) for t in teams.values() for w in t.values())
        scores = np.full((c, n, width), np.nan)
        for k, (ctx, cands) in enumerate(zip(lm.context_ids, lm.candidate_ids)):
            for m, team in enumerate(cands):
                try:
                    workers = teams[team][ctx]
                except KeyError:
                    raise ValueError(f"webnlg2020: {_WEBNLG2020_ZIP} has no ratings of {team} on sample "
                                     f"{ctx}") from None
                scores[k, m, : len(workers)] = [float(w[key]) for w in workers.values()]
        systems = lm.candidate_ids
    return RaterScores(scores, lm.mask, lm.context_ids, lm.candidate_ids, systems)


@dataclasses.dataclass
class HumanCeiling:
    """The agreement of one rater with the mean of the others (module docstring).

    Attributes:
        dataset, aspect: what was measured.
        per_context: ``{metric: [C]}``, per context the mean over raters of each correlation (NaN where
            no rater's is defined).
        mean: ``{metric: float}``, the mean over the contexts where it is defined.
        interval: ``{metric: (low, high)}``, percentile bootstrap interval over contexts (NaN below
            :data:`MIN_CONTEXTS`).
        system: ``{metric: float}``, at the system level (empty without systems).
        system_interval: ``{metric: (low, high)}``, percentile, contexts resampled (:func:`system_interval`).
        contexts: the context ids, row order.
        num_systems: systems at the system level (0 without).
        raters: who the raters are (:data:`PER_RATER`).
        level: the intervals' coverage.
    """

    dataset: str
    aspect: str
    per_context: dict[str, np.ndarray]
    mean: dict[str, float]
    interval: dict[str, tuple[float, float]]
    system: dict[str, float]
    system_interval: dict[str, tuple[float, float]]
    contexts: list[str]
    num_systems: int
    raters: str
    level: float = 0.95

    def defined(self, metric: str = "spearman") -> int:
        """Contexts where the ceiling of ``metric`` is defined."""
        return int(np.isfinite(self.per_context[metric]).sum())


def _restrict(rs: RaterScores, contexts, candidates) -> RaterScores:
    """``rs`` cut to the given contexts (ids) and, per context, candidates (ids), in that order.

    Raises:
        ValueError: ``candidates`` without ``contexts``, or not one list per context; a context
            or candidate id repeated or not in the data set.
    """
    if contexts is None:
        if candidates is not None:
            raise ValueError("candidates needs contexts: pass the context ids its lists belong to")
        return rs
    if isinstance(contexts, str):
        raise ValueError(f"contexts must be a list of context ids, got the string {contexts!r}")
    contexts = list(contexts)
    pos = {c: k for k, c in enumerate(rs.context_ids)}
    missing = [c for c in contexts if c not in pos]
    if missing:
        raise ValueError(f"contexts {missing[:5]} are not in the data set")
    repeated = sorted({c for c in contexts if contexts.count(c) > 1})
    if repeated:
        raise ValueError(f"contexts repeats {repeated[:5]}; give each context once")
    if candidates is not None:
        candidates = [list(x) for x in candidates]
        if len(candidates) != len(contexts):
            raise ValueError(f"candidates must hold one list per context of contexts ({len(contexts)}), "
                             f"got {len(candidates)}")
        for ctx, ids in zip(contexts, candidates):
            twice = sorted({cid for cid in ids if ids.count(cid) > 1})
            if twice:
                raise ValueError(f"candidates of context {ctx} repeats {twice[:5]}")
    cands = candidates if candidates is not None else [rs.candidate_ids[pos[c]] for c in contexts]
    width = max((len(x) for x in cands), default=0)
    scores = np.full((len(contexts), width, rs.scores.shape[-1]), np.nan)
    mask = np.zeros((len(contexts), width), bool)
    systems = [] if rs.systems is not None else None
    for r, (ctx, ids) in enumerate(zip(contexts, cands)):
        k = pos[ctx]
        col = {cid: m for m, cid in enumerate(rs.candidate_ids[k])}
        bad = [cid for cid in ids if cid not in col]
        if bad:
            raise ValueError(f"context {ctx}: candidates {bad[:5]} are not in the data set")
        take = [col[cid] for cid in ids]
        scores[r, : len(take)] = rs.scores[k, take]
        mask[r, : len(take)] = rs.mask[k, take]
        if systems is not None:
            systems.append([rs.systems[k][m] for m in take])
    return RaterScores(scores, mask, list(contexts), [list(x) for x in cands], systems)


def _leave_one_out(scores: np.ndarray, mask: np.ndarray):
    """Per rater ``k``: ``(x_k, y_-k, use_k)``, each ``[K, C, N]``."""
    k_all = scores.shape[-1]
    x = np.moveaxis(scores, -1, 0)                                           # [K, C, N]
    finite = np.isfinite(x)
    total, count = np.where(finite, x, 0.0).sum(0), finite.sum(0)
    others = count[None] - finite                                            # raters besides k
    with np.errstate(invalid="ignore", divide="ignore"):
        y = (total[None] - np.where(finite, x, 0.0)) / others
    use = finite & (others > 0) & mask[None]
    assert x.shape[0] == k_all
    return np.where(use, x, 0.0), np.where(use, y, 0.0), use


def _nanmean0(values: np.ndarray) -> np.ndarray:
    """Mean over the first axis of the finite entries; NaN where none is (without NumPy's warning)."""
    ok = np.isfinite(values)
    return np.where(ok.any(0), np.where(ok, values, 0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)


def _interval(values: np.ndarray, *, level: float, num: int, seed: int) -> tuple[float, float]:
    ok = values[np.isfinite(values)]
    if ok.size < MIN_CONTEXTS or np.ptp(ok) == 0:
        return (float("nan"), float("nan")) if ok.size < MIN_CONTEXTS else (float(ok[0]), float(ok[0]))
    res = stats.bootstrap((ok,), np.mean, confidence_level=level, n_resamples=num, method="percentile",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def system_interval(statistic, num_contexts: int, *, level: float, num: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval (``scipy.stats.bootstrap``) of a statistic of context weights, contexts
    resampled, as the field reports system-level intervals (Deutsch et al. 2021, bootstrapping the inputs).

    A resample of the ``C`` contexts is given to ``statistic`` as the count of each context,
    ``w_c = #{draws of c}``, so a system-level correlation
    (:func:`jaxrank.metrics.system_level`) is recomputed from weighted system means without copying data.

    Args:
        statistic: ``weights [B, C] -> [B]``, e.g. a :func:`jaxrank.metrics.system_level` correlation.
        num_contexts: ``C``.
        level, num, seed: coverage, resamples, seed.

    Returns:
        ``(low, high)``; NaN below :data:`MIN_CONTEXTS` contexts.
    """
    if num_contexts < MIN_CONTEXTS:
        return float("nan"), float("nan")

    def of_indices(idx, axis=-1):
        idx = np.asarray(idx, int)
        flat = idx.reshape(-1, idx.shape[-1])
        w = np.stack([np.bincount(row, minlength=num_contexts) for row in flat]).astype(np.float64)
        return np.asarray(statistic(w)).reshape(idx.shape[:-1])

    res = stats.bootstrap((np.arange(num_contexts),), of_indices, vectorized=True, confidence_level=level,
                          n_resamples=num, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def human_ceiling(name: str, aspect: str, *, path: str | os.PathLike | None = None, contexts=None,
                  candidates=None, level: float = 0.95, num_bootstrap: int = 2000, seed: int = 0) -> HumanCeiling:
    """The human ceiling: one rater against the mean of the others (module docstring).

    Args:
        name: a data set of :data:`PER_RATER`.
        aspect: one of ``ASPECTS[name]``.
        path: data folder (default :func:`jaxrank.data.data_dir`).
        contexts: context ids to measure on (default all), e.g. the contexts a judge was assessed on;
            each at most once.
        candidates: per context of ``contexts`` (required with it), the candidate ids to use, one
            list per context, each id at most once (default all).
        level: coverage of the bootstrap intervals.
        num_bootstrap: bootstrap resamples.
        seed: the bootstrap's seed.

    Returns:
        A :class:`HumanCeiling`: Spearman, Kendall tau-b and Pearson per context (mean and interval over
        contexts) and at the system level.

    Raises:
        ValueError: a data set of :data:`MEANS_ONLY` (its file holds means only), an unknown data set,
            aspect, context or candidate; a repeated context or candidate; ``candidates`` without
            ``contexts`` or not one list per context.
    """
    rs = _restrict(rater_scores(name, aspect, path=path), contexts, candidates)
    x, y, use = _leave_one_out(rs.scores, rs.mask)
    per_context, mean, interval = {}, {}, {}
    for m, fn in metrics.CORRELATIONS.items():
        per_rater = np.asarray(fn(x, y, where=use), np.float64)                 # [K, C]
        per_context[m] = rho = _nanmean0(per_rater)
        mean[m] = float(np.nanmean(rho)) if np.isfinite(rho).any() else float("nan")
        interval[m] = _interval(rho, level=level, num=num_bootstrap, seed=seed)
    system, sys_interval, num_systems = {}, {}, 0
    if rs.systems is not None:
        names = sorted({s for row in rs.systems for s in row})
        code = {s: k for k, s in enumerate(names)}
        sid = np.full(rs.mask.shape, -1)
        for r, row in enumerate(rs.systems):
            sid[r, : len(row)] = [code[s] for s in row]
        num_systems = len(names)

        def at_system_level(m, weights=None):
            per = [metrics.system_level(x[k], y[k], sid, where=use[k], weights=weights, names=(m,))[m]
                   for k in range(len(x))]
            return _nanmean0(np.stack(per))

        for m in metrics.CORRELATIONS:
            system[m] = float(at_system_level(m))
            sys_interval[m] = system_interval(lambda w, m=m: at_system_level(m, w), len(rs.context_ids),
                                              level=level, num=num_bootstrap, seed=seed)
    return HumanCeiling(name, aspect, per_context, mean, interval, system, sys_interval, list(rs.context_ids),
                        num_systems, PER_RATER[name], level)
