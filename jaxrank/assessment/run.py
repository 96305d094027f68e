"""Judge many contexts of a data set into a resumable store (the engine behind ``jaxrank judge``).

For every selected context the comparisons to make are listed (all ``N(N-1)``
ordered pairs, or a random/symmetric subset of a budget, drawn per context
from a seed so a rerun lists the same ones); those already in the
:class:`~jaxrank.assessment.store.JudgementStore` under their full key (the
judge's name and fingerprint, the template key, the ids and the hashes of the
texts: :func:`judgement_key`) are skipped; the rest are judged
in chunks, each chunk appended to the store as soon as it is done. A run that
is killed resumes where it stopped without redoing or losing a comparison.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
import zlib
from typing import Sequence

import jax
import numpy as np

from jaxrank import _validate
from jaxrank.assessment.progress import progress_bar
from jaxrank.assessment._store_file import copy_held, mismatch_note
from jaxrank.assessment.contexts import ContextSet, contexts_of, _refuse_repeats
from jaxrank.assessment.store import JudgementStore, Key, StoredComparisons, TextHashes, text_sha
from jaxrank.comparisons import Comparisons, stack_contexts
from jaxrank.selection import random_comparisons

__all__ = ["ContextSet", "contexts_of", "plan_pairs", "judge_contexts", "judge_comparisons", "judge_chunk",
           "stored_labels", "template_key", "judge_fingerprint", "text_hashes", "judgement_key",
           "StoreMismatchWarning", "check_budget", "check_seed", "SEED_LIMIT"]


class StoreMismatchWarning(UserWarning):
    """A store holds judgements under this run's ids that were made by another judge checkpoint, from other
    texts, or before fingerprints, or judgements of these very texts by this judge under another template key
    (another prompt or answer prefix): they are not reused, and the run judges those comparisons itself."""


SEED_LIMIT = 2 ** 32
"""Seeds of the planned pairs lie in ``[0, SEED_LIMIT)``: the PRNG key takes 32 bits, so a larger seed would
wrap onto a smaller one and plan its very pairs."""


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int in ``[0, 2**32)`` (:data:`SEED_LIMIT`), or a ValueError naming ``name``."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or \
            not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(f"{name} must be an int in [0, 2**32) (a 32-bit PRNG seed: a larger one would wrap onto "
                         f"a smaller one's pairs), got {seed!r}")
    return int(seed)


def check_budget(num_items: int, budget: int | None, selection: str = "random") -> str | None:
    """Why ``budget`` comparisons of ``num_items`` candidates cannot be planned (:func:`plan_pairs`), in words
    naming the budget; ``None`` when they can.

    A budget of ``N(N-1)`` or more plans all ordered pairs; below it ``random`` needs ``N - 1`` (a
    connected comparison graph), ``symmetric`` an even budget of at least ``2(N - 1)``, and
    ``no_repeat`` at most ``N(N-1)/2`` (each unordered pair once).
    """
    if budget is None:
        return None
    if selection not in ("random", "no_repeat", "symmetric"):
        return f"selection must be 'random', 'no_repeat' or 'symmetric', got {selection!r}"
    n, b = int(num_items), int(budget)
    full = n * (n - 1)
    if b < 1:
        return f"budget {b} must be >= 1"
    if b >= full:
        return None
    least = (n - 1) * (2 if selection == "symmetric" else 1)
    if b < least:
        return (f"budget {b} is below {least}, the fewest {selection} comparisons that connect {n} candidates "
                f"(give at least {least}, or no budget: all {full} ordered pairs)")
    if selection == "symmetric" and b % 2:
        return f"budget {b} must be even with symmetric selection (both orders of each pair)"
    if selection == "no_repeat" and b > full // 2:
        return (f"budget {b} exceeds the {full // 2} unordered pairs of {n} candidates (no_repeat judges each "
                f"once; give at most {full // 2}, or {full} or more for all ordered pairs)")
    return None


def _id_key(context_id: str) -> int:
    """The CRC-32 of a context id: its pairs' key, as :func:`jaxrank.assessment.active.context_key`."""
    return zlib.crc32(str(context_id).encode("utf-8"))


def plan_pairs(num_items: int, *, budget: int | None = None, selection: str = "random", seed: int = 0,
               context_index: int = 0, context_id: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ordered pairs ``(i, j)`` to judge for one context.

    ``budget=None`` gives all ``N(N-1)`` ordered pairs. Otherwise ``selection``
    is ``"random"`` (distinct ordered pairs), ``"no_repeat"`` or ``"symmetric"``
    (both orders of ``budget / 2`` pairs), drawn by :func:`jaxrank.selection.random_comparisons`
    with a connected comparison graph (PoE §4.2), keyed by ``seed`` and the
    context: a CRC-32 of ``context_id`` when given (what :func:`judge_contexts`
    passes, so a context gets the same pairs in every ``--contexts`` slice and
    process share, the key :func:`jaxrank.assessment.active.context_key` uses),
    else ``context_index``; a rerun plans the same pairs.

    Raises:
        ValueError: a budget that cannot be planned (:func:`check_budget`), or a seed outside
            ``[0, 2**32)`` (:func:`check_seed`).
    """
    seed = check_seed(seed)
    if budget is None or budget >= num_items * (num_items - 1):
        a, b = np.nonzero(~np.eye(num_items, dtype=bool))
        return a.astype(np.int32), b.astype(np.int32)

    why = check_budget(num_items, budget, selection)
    if why:
        raise ValueError(why)
    key = jax.random.fold_in(jax.random.PRNGKey(seed), context_index if context_id is None else _id_key(context_id))
    i, j = random_comparisons(key, num_items, budget, symmetric=selection == "symmetric",
                              no_repeat=selection == "no_repeat")
    return np.asarray(i, np.int32), np.asarray(j, np.int32)


def stored_labels(cs: ContextSet, sel: StoredComparisons) -> np.ndarray:
    """The human scores ``[C, N]`` of a store's padded selection (:meth:`JudgementStore.comparisons`), matched
    to ``cs`` by context and candidate id; NaN at padded items."""
    pos = {c: k for k, c in enumerate(cs.ids)}
    labels = np.full(np.asarray(sel.comparisons.item_mask).shape, np.nan, np.float32)
    for r, ctx in enumerate(sel.contexts):
        k = pos[ctx]
        index = {cid: n for n, cid in enumerate(cs.candidate_ids[k])}
        for n, cid in enumerate(sel.candidates[r]):
            labels[r, n] = cs.labels[k][index[cid]]
    return labels


def judge_comparisons(judge, context: str, candidates: Sequence[str], i=None, j=None):
    """Judge one context and return the aggregation core's :class:`~jaxrank.Comparisons` directly.

    Args:
        judge: any judge with ``compare(context, candidates, i, j)``.
        context, candidates: the texts.
        i, j: positions A and B of each comparison; default all ``N(N-1)`` ordered pairs.
    """
    n = len(candidates)
    if i is None and j is None:
        i, j = plan_pairs(n)
    elif i is None or j is None:
        raise ValueError("give both i and j, or neither (all ordered pairs)")
    res = judge.compare(context, candidates, i, j)
    return Comparisons.from_pairs(np.asarray(i), np.asarray(j), np.asarray(res.p, np.float32), num_items=n)


def judge_fingerprint(judge) -> str:
    """The judge part of a judgement's key: ``judge.fingerprint`` (weights and tokenizer of a model judge,
    :attr:`~jaxrank.judges.PromptJudge.fingerprint`), or ``""`` for a judge that has none."""
    return str(getattr(judge, "fingerprint", "") or "")


def text_hashes(context: str, candidates: Sequence[str], candidate_ids: Sequence[str]) -> TextHashes:
    """The hashes of one context's texts (:func:`~jaxrank.assessment.store.text_sha`), by candidate id."""
    return TextHashes(text_sha(context), {str(c): text_sha(t) for c, t in zip(candidate_ids, candidates)})


def judgement_key(name: str, tkey: str, fingerprint: str, context_id: str, hashes: TextHashes, a: str,
                  b: str) -> Key:
    """The store key of judging candidate ``a`` against ``b`` of one context: names, fingerprint, text hashes."""
    return Key(name, tkey, str(context_id), str(a), str(b), fingerprint, hashes.context, hashes.candidates[str(a)],
               hashes.candidates[str(b)])


def template_key(judge) -> str:
    """The template part of a judgement's store key: the judge's ``template_key``, its template's key, or "none"."""
    key = getattr(judge, "template_key", None)
    if key is None and getattr(judge, "template", None) is not None:
        key = judge.template.key
    return str(key or "none")


def prepare_judge(judge, cs: ContextSet, positions: Sequence[int] | None = None) -> None:
    """Let a judge settle what it reads before its key is taken: ``judge.prepare(context, candidates)``.

    A :class:`~jaxrank.judges.PromptJudge` with ``answer_prefix="auto"`` chooses its prefix there, and
    the prefix is part of its template key, so it is chosen on one fixed sample: ``cs.prefix_sample``,
    the data set's first context with all its candidates (:func:`contexts_of` sets it), whatever
    ``--contexts`` selects and whichever process share is judged; for a set without one, the first
    context of ``cs``. ``positions`` is accepted for compatibility and does not change the choice.
    Judges without ``prepare`` are left as they are.
    """
    del positions                     # the choice must not depend on the share or slice judged
    prepare = getattr(judge, "prepare", None)
    if prepare is None or not cs.ids:
        return
    text, candidates = cs.prefix_sample if cs.prefix_sample is not None else (cs.texts[0], cs.candidates[0])
    prepare(text, list(candidates))


def _accepts_progress(judge) -> bool:
    try:
        return "progress" in inspect.signature(judge.compare).parameters
    except (TypeError, ValueError):
        return False


def judge_chunk(judge, store: JudgementStore, name: str, tkey: str, context_id: str, text: str,
                candidates: Sequence[str], candidate_ids: Sequence[str], pairs: np.ndarray,
                progress=None, *, fingerprint: str | None = None, hashes: TextHashes | None = None) -> list[dict]:
    """Judge ``pairs`` ``[K, 2]`` of one context in one ``compare`` call and append them to ``store``.

    Each record carries the judge's ``fingerprint`` (default :func:`judge_fingerprint`)
    and the hashes of the texts judged (default :func:`text_hashes` of ``text`` and
    ``candidates``), so it is keyed by everything that made it.

    ``progress`` (a callable taking a count) is told of every finished batch when
    the judge's ``compare`` takes ``progress=``, else of the whole chunk at the end.
    """
    fingerprint = judge_fingerprint(judge) if fingerprint is None else str(fingerprint)
    hashes = text_hashes(text, candidates, candidate_ids) if hashes is None else hashes
    if progress is not None and _accepts_progress(judge):
        res = judge.compare(text, candidates, pairs[:, 0], pairs[:, 1], progress=progress)
        progress = None
    else:
        res = judge.compare(text, candidates, pairs[:, 0], pairs[:, 1])
    logits = np.asarray(getattr(res, "logits", np.zeros((len(pairs), 2))), np.float64)
    mass = getattr(res, "label_mass", None)
    p, rows = np.asarray(res.p).tolist(), logits.tolist()      # Python floats once, not per record
    recs = []
    for r, (a, b) in enumerate(pairs.tolist()):
        ca, cb = str(candidate_ids[a]), str(candidate_ids[b])
        rec = {"judge": name, "template": tkey, "context": context_id, "a": ca, "b": cb, "i": a, "j": b,
               "p": float(p[r]), "truncated": bool(res.truncated), "fingerprint": fingerprint,
               "context_sha": hashes.context, "a_sha": hashes.candidates[ca], "b_sha": hashes.candidates[cb]}
        if logits.ndim == 2 and logits.shape[0] == len(pairs):
            rec["logits"] = rows[r]
        if mass is not None:
            rec["label_mass"] = float(mass[r])
        recs.append(rec)
    store.append(recs)
    if progress is not None:
        progress(len(pairs))
    return recs


def judge_contexts(judge, cs: ContextSet, store: JudgementStore | str, *, budget: int | None = None,
                   selection: str = "random", seed: int = 0, chunk: int | None = None,
                   progress: bool = True, positions: Sequence[int] | None = None,
                   reuse: str | os.PathLike | None = None) -> StoredComparisons:
    """Judge the planned comparisons of every context, appending each chunk to ``store`` as it is done.

    Args:
        judge: anything with ``name`` and ``compare(context, candidates, i, j) -> Judgement``
            (:class:`~jaxrank.judges.PromptJudge`, ``SamplingJudge``, ``SimilarityJudge``, ...).
        cs: the contexts (:func:`contexts_of`).
        store: a :class:`JudgementStore` or its path.
        budget, selection, seed: which comparisons (:func:`plan_pairs`).
        chunk: comparisons per ``compare`` call and per store write (default: the judge's
            ``chunk``, else 4 x the judge's batch size).
            A judge with ``prefetch(texts, progress=)`` (:class:`~jaxrank.judges.SimilarityJudge`) is first
            given the texts of every context to judge, so it reads them all in one plan.
        progress: show a progress bar (tqdm) over comparisons, moving after every
            batch of the judge (with rate and time left).
        positions: judge only these contexts of ``cs`` (e.g. one process's share,
            :func:`jaxrank.distributed.process_share`); each context's pairs are
            keyed by its id, so a share (or a ``--contexts`` slice) plans exactly
            the pairs a whole run would. Default: every context.
        reuse: another store, only read (a sharded run's main store, while ``store`` is this
            process's shard): the planned judgements it holds under their full key are copied
            into ``store`` and not judged again. An absent file holds nothing.

    An ``answer_prefix="auto"`` judge chooses its prefix on ``cs.prefix_sample``
    (:func:`prepare_judge`), the same for every slice and share. Before every
    chunk the store is re-read and pairs another process stored meanwhile are
    skipped; once another writer shows up the remaining chunks are taken in a
    random order, so two processes on one store mostly judge different ones.

    Returns:
        Exactly the planned comparisons of these contexts, read from the store (rows
        in the order of ``positions``, every candidate of each context an item): a
        store holding other pairs of these texts (another budget, seed or selection)
        adds nothing to them.

    Raises:
        ValueError: a position outside ``cs`` or given twice; a budget that cannot be
            planned for a context (:func:`check_budget`); a ``chunk`` or ``budget`` not an
            int >= 1, a ``seed`` outside ``[0, 2**32)``, an unknown ``selection`` (each named),
            before anything is judged.

    Warns:
        StoreMismatchWarning: the store holds judgements of this run's comparisons
            (judge name, context and candidate ids) made by another checkpoint, from
            other texts, before fingerprints, or of these very texts under another
            template key; they are not reused, and the warning says how many of each.
    """
    chunk = _validate.integer("chunk", chunk, low=1, none=True)
    budget = _validate.integer("budget", budget, low=1, none=True)
    seed = check_seed(seed)
    if selection not in ("random", "no_repeat", "symmetric"):
        raise ValueError(f"selection must be 'random', 'no_repeat' or 'symmetric', got {selection!r}")
    if not isinstance(store, JudgementStore):
        store = JudgementStore(store)
    if positions is None:
        positions = range(len(cs.ids))
    positions = [int(k) for k in positions]
    _refuse_repeats("positions", positions, positions)
    bad = [k for k in positions if not 0 <= k < len(cs.ids)]
    if bad:
        raise ValueError(f"positions {bad} outside [0, {len(cs.ids)}) (the contexts of cs)")
    for k in positions:                       # before the judge reads anything
        why = check_budget(len(cs.candidates[k]), budget, selection)
        if why:
            raise ValueError(f"context {cs.ids[k]}: {why}")
    prepare_judge(judge, cs)
    name, tkey, fp = judge.name, template_key(judge), judge_fingerprint(judge)
    chunk = int(chunk or getattr(judge, "chunk", None) or 4 * (getattr(judge, "batch_size", None) or 8))
    todo, hashes, absent, planned, lists = [], {}, [], [], []
    for k in positions:
        ctx = cs.ids[k]
        i, j = plan_pairs(len(cs.candidates[k]), budget=budget, selection=selection, seed=seed, context_id=ctx)
        ca = cs.candidate_ids[k]
        hashes[ctx] = h = text_hashes(cs.texts[k], cs.candidates[k], ca)
        keys = [judgement_key(name, tkey, fp, ctx, h, ca[a], ca[b]) for a, b in zip(i.tolist(), j.tolist())]
        if keys:
            planned.append((k, i, j, keys))
        lists.append((k, i, j, keys))
    if reuse is not None:
        copied = copy_held(store, reuse, [key for *_, keys in lists for key in keys])
        if progress and copied:
            print(f"{copied} judgement{'s' * (copied != 1)} copied from {reuse} (not judged again)", file=sys.stderr)
    for k, i, j, keys in lists:
        keep = [(a, b) for a, b, key in zip(i.tolist(), j.tolist(), keys) if key not in store]
        absent += [key for key in keys if key not in store]
        if keep:
            todo.append((k, np.array(keep, np.int32)))
    note = mismatch_note(store, absent)
    if note:
        warnings.warn(note, StoreMismatchWarning, stacklevel=2)
    prefetch = getattr(judge, "prefetch", None)   # a judge that reads each text once (SimilarityJudge): all in one plan
    if prefetch is not None and todo:
        texts = list(dict.fromkeys(t for k, _ in todo for t in (cs.texts[k], *cs.candidates[k])))
        ebar = progress_bar(len(texts), f"embedding ({name})", unit="text") if progress else None
        try:
            prefetch(texts, progress=None if ebar is None else ebar.update)
        finally:
            if ebar is not None:
                ebar.close()
    total = sum(len(t) for _, t in todo)
    bar = None
    if progress and total:
        bar = progress_bar(total, f"judging ({name})")
    try:
        _judge_todo(judge, store, todo, cs, chunk, name, tkey, fp, hashes, bar)
    finally:
        if bar is not None:
            bar.close()
    return _planned_selection(store, planned, cs)


def _judge_todo(judge, store, todo, cs, chunk, name, tkey, fp, hashes, bar) -> None:
    """Judge ``todo`` (per context position, its missing pairs) chunk by chunk. Before every chunk the store
    is re-read (the lines other processes appended since the last look) and pairs stored meanwhile are
    skipped; once another writer shows up, the chunks left are taken in a random order, so two processes
    on one store mostly judge different chunks."""
    queue = [(k, pairs[start:start + chunk]) for k, pairs in todo for start in range(0, len(pairs), chunk)]
    others, shuffled = store.read_from_others, False
    while queue:
        store.refresh()
        if store.read_from_others != others and not shuffled:       # another process writes to this store
            shuffled = True
            queue = [queue[r] for r in np.random.default_rng().permutation(len(queue))]
        k, part = queue.pop(0)
        ctx, ca = cs.ids[k], cs.candidate_ids[k]
        left = [r for r, (a, b) in enumerate(part.tolist())
                if judgement_key(name, tkey, fp, ctx, hashes[ctx], ca[a], ca[b]) not in store]
        if len(left) < len(part) and bar is not None:
            bar.update(len(part) - len(left))
        if left:
            judge_chunk(judge, store, name, tkey, ctx, cs.texts[k], cs.candidates[k], ca, part[np.array(left)],
                        progress=None if bar is None else bar.update, fingerprint=fp, hashes=hashes[ctx])


def _planned_selection(store: JudgementStore, planned, cs: ContextSet) -> StoredComparisons:
    """The planned comparisons of each context, read from the store: exactly the pairs planned, whatever
    else the store holds of these texts (other budgets, seeds or selections)."""
    store.refresh()
    sets, ctxs, cands = [], [], []
    for k, i, j, keys in planned:
        recs = [store.get(key) for key in keys]
        gone = sum(r is None for r in recs)
        if gone:
            raise RuntimeError(f"{store.path}: {gone} planned judgement(s) of context {cs.ids[k]} are not in the "
                               "store after judging (was it rewritten meanwhile?); rerun to judge them")
        p = np.array([float(r["p"]) for r in recs], np.float32)
        sets.append(Comparisons.from_pairs(i, j, p, num_items=len(cs.candidate_ids[k])))
        ctxs.append(cs.ids[k])
        cands.append([str(x) for x in cs.candidate_ids[k]])
    if not sets:
        raise ValueError(f"{store.path}: no comparisons planned (every context has fewer than 2 candidates)")
    return StoredComparisons(stack_contexts(sets), ctxs, cands)
