"""Active assessment of many contexts with an LLM judge, through the resumable store (``jaxrank assess --active``).

For each context, :func:`jaxrank.selection.active_assess` asks for the most
informative comparisons in batches, refits the soft Bradley-Terry (PoE)
posterior after each batch and stops at the budget or when the Laplace
posterior is confident enough of the ranking. Its ``judge_fn`` here is a
:class:`StoreJudgeFn`: a requested pair already in the
:class:`~jaxrank.assessment.store.JudgementStore` is answered from the store;
the others are judged by the LLM, in chunks, and each chunk is appended (and
``fsync``-ed) to the store before the loop sees the answers. The answers the
loop receives are always the stored values, so a rerun after a crash replays
the same answers, the selection (deterministic given the seed and the answers)
repeats itself, and the run continues where it stopped without asking the model
for any stored pair. The store is the one ``jaxrank judge`` writes: judgements
made by a full or random run are reused too.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Sequence

import jax
import numpy as np

from jaxrank.assessment.progress import progress_bar
from jaxrank.assessment.run import (ContextSet, judge_chunk, judge_fingerprint, judgement_key, prepare_judge,
                                    template_key, text_hashes)
from jaxrank.assessment.store import JudgementStore, StoredComparisons
from jaxrank.comparisons import Comparisons, stack_contexts
from jaxrank.selection import active_assess

__all__ = ["StoreJudgeFn", "ActiveRun", "active_judge_contexts", "check_active", "context_key"]


class StoreJudgeFn:
    """``judge_fn(i, j) -> p`` of one context for :func:`~jaxrank.selection.active_assess`, backed by a store.

    Pairs in ``store`` are answered from it; the rest go to ``judge.compare`` in
    chunks of ``chunk`` comparisons, each chunk appended to the store as soon as
    it is judged. The returned ``p`` are the stored values (float64).

    ``progress`` (a callable taking a count) is told of every comparison answered,
    judged (per batch of the judge) or from the store.

    Attributes:
        judged: comparisons sent to the judge so far.
        replayed: comparisons answered from the store so far.
    """

    def __init__(self, judge, store: JudgementStore, context_id: str, text: str, candidates: Sequence[str],
                 candidate_ids: Sequence[str], *, chunk: int | None = None, progress=None):
        self.judge, self.store = judge, store
        if getattr(judge, "prepare", None) is not None:     # an "auto" answer prefix is chosen on this context
            judge.prepare(text, list(candidates))
        self.name, self.tkey, self.fingerprint = judge.name, template_key(judge), judge_fingerprint(judge)
        self.context_id, self.text = str(context_id), text
        self.candidates, self.candidate_ids = list(candidates), [str(c) for c in candidate_ids]
        self.hashes = text_hashes(text, self.candidates, self.candidate_ids)
        self.chunk = int(chunk or 4 * (getattr(judge, "batch_size", None) or 8))
        self.judged = self.replayed = 0
        self.progress = progress

    def _key(self, a: int, b: int):
        return judgement_key(self.name, self.tkey, self.fingerprint, self.context_id, self.hashes,
                             self.candidate_ids[a], self.candidate_ids[b])

    def __call__(self, i, j) -> np.ndarray:
        pairs = [(int(a), int(b)) for a, b in zip(np.asarray(i).tolist(), np.asarray(j).tolist())]
        todo = list(dict.fromkeys(pr for pr in pairs if self._key(*pr) not in self.store))
        self.replayed += len(pairs) - len(todo)
        if self.progress is not None and len(pairs) > len(todo):
            self.progress(len(pairs) - len(todo))
        for start in range(0, len(todo), self.chunk):
            part = np.array(todo[start:start + self.chunk], np.int32)
            judge_chunk(self.judge, self.store, self.name, self.tkey, self.context_id, self.text,
                        self.candidates, self.candidate_ids, part, progress=self.progress,
                        fingerprint=self.fingerprint, hashes=self.hashes)
            self.judged += len(part)
        return np.array([float(self.store.get(self._key(*pr))["p"]) for pr in pairs], np.float64)


@dataclasses.dataclass
class ActiveRun:
    """What :func:`active_judge_contexts` returns.

    Attributes:
        selection: the comparisons made (only those), one row per context, as
            :func:`~jaxrank.judges.judge_contexts` returns them (every candidate an item;
            padded with weight-0 slots to the largest budget).
        results: per context, the :class:`~jaxrank.selection.ActiveResult`.
        num_comparisons: ``[C]`` comparisons used per context.
        budgets: ``[C]`` the budget each context ran under (``min(budget, N(N-1))``).
        full: ``[C]`` ``N(N-1)``, all ordered pairs.
        stopped: per context ``"confidence"``, ``"budget"`` or ``"exhausted"``.
        confidence: ``[C]`` the final value of the stopping statistic.
        rank_confidence, stop_rule: the stopping target and rule.
        judged: comparisons the judge made in this run.
        replayed: comparisons answered from the store.
    """

    selection: StoredComparisons
    results: list
    num_comparisons: np.ndarray
    budgets: np.ndarray
    full: np.ndarray
    stopped: list[str]
    confidence: np.ndarray
    rank_confidence: float | None
    stop_rule: str
    judged: int
    replayed: int

    def summary(self) -> str:
        """One line: mean comparisons used against ``N(N-1)`` and the budget, stop reasons, store use."""
        used, full, bud = (float(np.mean(x)) for x in (self.num_comparisons, self.full, self.budgets))
        reasons = ", ".join(f"{self.stopped.count(s)} {s}" for s in ("confidence", "budget", "exhausted")
                            if s in self.stopped)
        target = "none" if self.rank_confidence is None else f"{self.rank_confidence:g}"
        return (f"Active assessment: {used:.1f} comparisons per context on average "
                f"({used / full:.0%} of all N(N-1) = {full:g}, {used / bud:.0%} of the budget {bud:g}); "
                f"stopped: {reasons} (rank confidence target {target}, rule {self.stop_rule}); "
                f"{self.judged} judged now, {self.replayed} from the store.")


def context_key(seed: int, context_id: str):
    """The ``jax.random`` key of one context: ``seed`` folded with a CRC-32 of the context id.

    Keyed by the id, not the position, so a context gets the same selection
    whichever ``--contexts`` it is run with.
    """
    return jax.random.fold_in(jax.random.PRNGKey(int(seed)), zlib.crc32(str(context_id).encode("utf-8")))


def check_active(cs: ContextSet, *, budget: int | None = None, batch_size: int = 4,
                 rank_confidence: float | None = None, stop_rule: str = "spearman", symmetric: bool = False) -> None:
    """Check the settings of :func:`active_judge_contexts` against every context before any judging.

    Raises:
        ValueError: no contexts; ``batch_size < 1``; ``rank_confidence`` outside ``(-1, 1)``;
            an unknown ``stop_rule``; a context of fewer than 2 candidates; a
            ``budget`` below the ``N - 1`` comparisons (``2 (N - 1)`` symmetric) of
            the starting spanning tree of some context.
    """
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch size must be an integer >= 1, got {batch_size!r}")
    if rank_confidence is not None and not -1 < float(rank_confidence) < 1:
        raise ValueError(f"rank confidence must lie in (-1, 1) (an expected Spearman or a mean probability), "
                         f"got {rank_confidence!r}")
    if stop_rule not in ("spearman", "adjacent"):
        raise ValueError(f"stop rule must be 'spearman' or 'adjacent', got {stop_rule!r}")
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    if not cs.ids:
        raise ValueError("no contexts selected")
    for ctx, cands in zip(cs.ids, cs.candidates):
        n = len(cands)
        if n < 2:
            raise ValueError(f"context {ctx} has {n} candidate(s); active assessment needs at least 2")
        start = 2 * (n - 1) if symmetric else n - 1
        if budget is not None and budget < start:
            raise ValueError(f"budget {budget} is below the {start} comparisons of the starting spanning tree "
                             f"(N - 1{', both orders' if symmetric else ''}) that connects the {n} candidates of "
                             f"context {ctx}; use a budget of at least {start}")


def active_judge_contexts(judge, cs: ContextSet, store: JudgementStore | str, *, budget: int | None = None,
                          batch_size: int = 4, rank_confidence: float | None = None, stop_rule: str = "spearman",
                          seed: int = 0, chunk: int | None = None, progress: bool = True,
                          **active_kwargs) -> ActiveRun:
    """Active assessment of every context of ``cs``, every judgement through ``store``.

    Args:
        judge: anything with ``name`` and ``compare(context, candidates, i, j)``
            (:class:`~jaxrank.judges.PromptJudge`, ...), as for :func:`~jaxrank.judges.judge_contexts`.
        cs: the contexts (:func:`~jaxrank.judges.contexts_of`).
        store: a :class:`JudgementStore` or its path (resumable: see the module doc).
        budget: the most comparisons per context (default, or above ``N(N-1)``:
            ``N(N-1)``).
        batch_size: comparisons asked per round.
        rank_confidence: stop a context once the stopping statistic reaches this;
            None runs every context to its budget.
        stop_rule: ``"spearman"`` or ``"adjacent"`` (:func:`~jaxrank.selection.active_assess`).
        seed: the per-context keys are :func:`context_key` ``(seed, context id)``.
        chunk: comparisons per ``compare`` call and per store write (default 4 x the
            judge's batch size).
        progress: a progress bar (tqdm) over comparisons, moving after every batch
            of the judge; its total is the sum of the budgets, lowered when a
            context stops early, so the time left is an upper bound.
        **active_kwargs: more :func:`~jaxrank.selection.active_assess` settings
            (``symmetric``, ``debias``, ``score_prior``, ``num_samples``, ...).

    Returns:
        :class:`ActiveRun`.

    Raises:
        ValueError: bad settings (:func:`check_active`, before any judging).
    """
    check_active(cs, budget=budget, batch_size=batch_size, rank_confidence=rank_confidence, stop_rule=stop_rule,
                 symmetric=bool(active_kwargs.get("symmetric", False)))
    if not isinstance(store, JudgementStore):
        store = JudgementStore(store)
    prepare_judge(judge, cs)   # an "auto" answer prefix chosen on the data set's first context, as judge_contexts
    budgets_all = [len(c) * (len(c) - 1) if budget is None else min(int(budget), len(c) * (len(c) - 1))
                   for c in cs.candidates]
    bar = None
    if progress and cs.ids:
        bar = progress_bar(sum(budgets_all), f"active assessment ({judge.name})")
    results, rows, budgets, full, judged, replayed = [], [], [], [], 0, 0
    try:
        for k, ctx in enumerate(cs.ids):
            n = len(cs.candidates[k])
            r = budgets_all[k]
            fn = StoreJudgeFn(judge, store, ctx, cs.texts[k], cs.candidates[k], cs.candidate_ids[k], chunk=chunk,
                              progress=None if bar is None else bar.update)

            def show(rnd, used, conf, post, ctx=ctx):
                if bar is not None:
                    bar.set_postfix_str(f"{ctx}: {used} cmp, confidence {conf:.3f}")

            res = active_assess(fn, n, batch_size=int(batch_size), budget=r, key=context_key(seed, ctx),
                                rank_confidence=rank_confidence, stop_rule=stop_rule, callback=show, **active_kwargs)
            u, c = res.num_comparisons, res.comparisons
            rows.append(Comparisons.from_pairs(np.asarray(c.i)[:u], np.asarray(c.j)[:u], np.asarray(c.p)[:u],
                                               num_items=n))
            results.append(res)
            budgets.append(r)
            full.append(n * (n - 1))
            judged += fn.judged
            replayed += fn.replayed
            if bar is not None and u < r:          # stopped early: its unused budget leaves the total
                bar.total -= r - u
                bar.refresh()
    finally:
        if bar is not None:
            bar.close()
    # padded to the largest budget, not to the comparisons used, so the scorers see the same shapes
    # (and do not recompile) whatever the stopping point
    sel = StoredComparisons(stack_contexts(rows, num_comparisons=max(budgets)), list(cs.ids),
                            [list(x) for x in cs.candidate_ids])
    return ActiveRun(sel, results, np.array([x.num_comparisons for x in results], int), np.array(budgets, int),
                     np.array(full, int), [x.stopped for x in results],
                     np.array([x.confidence for x in results], float),
                     None if rank_confidence is None else float(rank_confidence), stop_rule, judged, replayed)
