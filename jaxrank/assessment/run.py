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

import dataclasses
import inspect
import warnings
from typing import Sequence

import jax
import numpy as np

from jaxrank.assessment.progress import progress_bar
from jaxrank.assessment.store import JudgementStore, Key, StoredComparisons, TextHashes, text_sha
from jaxrank.comparisons import Comparisons
from jaxrank.selection import random_comparisons

__all__ = ["ContextSet", "contexts_of", "plan_pairs", "judge_contexts", "judge_comparisons", "judge_chunk",
           "stored_labels", "template_key", "judge_fingerprint", "text_hashes", "judgement_key",
           "StoreMismatchWarning"]


class StoreMismatchWarning(UserWarning):
    """A store holds judgements under this run's ids that were made by another judge checkpoint, from other
    texts, or before fingerprints: they are not reused, and the run judges those comparisons itself."""


@dataclasses.dataclass(frozen=True)
class ContextSet:
    """Contexts with their candidates (and optional human scores), as the judges need them.

    Attributes:
        ids: context ids.
        texts: context texts.
        candidate_ids: per context, candidate ids.
        candidates: per context, candidate texts.
        labels: per context, ``[N]`` human scores of one aspect (or ``None``).
    """

    ids: list[str]
    texts: list[str]
    candidate_ids: list[list[str]]
    candidates: list[list[str]]
    labels: list[np.ndarray] | None = None


def _parse_slice(spec: str | slice | Sequence[int] | None, n: int) -> list[int]:
    if spec is None:
        return list(range(n))
    if isinstance(spec, slice):
        return list(range(n))[spec]
    if isinstance(spec, str):
        try:
            if ":" in spec:
                parts = [int(x) if x.strip() else None for x in spec.split(":")]
                if len(parts) > 3:
                    raise ValueError
                out = list(range(n))[slice(*parts)]
            else:
                out = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"contexts {spec!r}: use START:STOP[:STEP] or i,j,k (context positions, "
                             f"0..{n - 1})") from None
        if not out:
            raise ValueError(f"contexts {spec!r} selects none of the {n} contexts (positions 0..{n - 1})")
        return out
    return [int(x) for x in spec]


def contexts_of(ds, *, aspect: str | None = None, contexts=None, max_candidates: int | None = None) -> ContextSet:
    """Group a loaded data set (:func:`jaxrank.data.load_dataset`) by context.

    Args:
        ds: a ``datasets.Dataset`` in jaxrank's schema.
        aspect: a human-score column to carry along (``labels``).
        contexts: which contexts, by position: ``"0:5"``, ``"0,3,7"``, a slice or indices.
        max_candidates: keep only the first ``max_candidates`` candidates of each context (an int >= 2:
            a comparison needs two); ``None``: all.

    Raises:
        ValueError: an unknown aspect, a selection outside the data set, or ``max_candidates`` not an
            int >= 2.
    """
    if max_candidates is not None and (isinstance(max_candidates, (bool, np.bool_))
                                       or not isinstance(max_candidates, (int, np.integer)) or max_candidates < 2):
        raise ValueError(f"max_candidates must be an int >= 2 (a comparison needs two candidates) or None (all), "
                         f"got {max_candidates!r}")
    text_columns = ("context_id", "context", "candidate_id", "candidate", "reference")
    scores = [c for c in ds.column_names if c not in text_columns]
    if aspect is not None and aspect not in scores:
        what = "a text column, not a human score" if aspect in ds.column_names else "unknown"
        raise ValueError(f"aspect {aspect!r} is {what}; the human scores are: {', '.join(scores) or 'none'}")
    cols = {k: ds[k] for k in ("context_id", "context", "candidate_id", "candidate")}
    lab = ds[aspect] if aspect else None
    order: dict[str, int] = {}
    groups: list[list[int]] = []
    for r, cid in enumerate(cols["context_id"]):
        if cid not in order:
            order[cid] = len(groups)
            groups.append([])
        groups[order[cid]].append(r)
    pick = _parse_slice(contexts, len(groups))
    bad = [k for k in pick if not 0 <= k < len(groups)]
    if bad:
        raise ValueError(f"contexts {bad} outside [0, {len(groups)})")
    ids, texts, cids, cands, labels = [], [], [], [], []
    for k in pick:
        rows = groups[k] if max_candidates is None else groups[k][:int(max_candidates)]
        ids.append(str(cols["context_id"][rows[0]]))
        texts.append(cols["context"][rows[0]] or "")
        cids.append([str(cols["candidate_id"][r]) for r in rows])
        cands.append([cols["candidate"][r] for r in rows])
        if lab is not None:
            labels.append(np.array([np.nan if lab[r] is None else lab[r] for r in rows], np.float32))
    return ContextSet(ids, texts, cids, cands, labels if lab is not None else None)


def plan_pairs(num_items: int, *, budget: int | None = None, selection: str = "random", seed: int = 0,
               context_index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ordered pairs ``(i, j)`` to judge for one context.

    ``budget=None`` gives all ``N(N-1)`` ordered pairs. Otherwise ``selection``
    is ``"random"`` (distinct ordered pairs), ``"no_repeat"`` or ``"symmetric"``
    (both orders of ``budget / 2`` pairs), drawn by :func:`jaxrank.selection.random_comparisons`
    with a connected comparison graph (PoE §4.2), keyed by ``(seed, context_index)``
    so a rerun plans the same pairs.
    """
    if budget is None or budget >= num_items * (num_items - 1):
        a, b = np.nonzero(~np.eye(num_items, dtype=bool))
        return a.astype(np.int32), b.astype(np.int32)

    if selection not in ("random", "no_repeat", "symmetric"):
        raise ValueError(f"selection must be 'random', 'no_repeat' or 'symmetric', got {selection!r}")
    key = jax.random.fold_in(jax.random.PRNGKey(seed), context_index)
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


def _mismatch_note(store: JudgementStore, keys: Sequence[Key]) -> str | None:
    """What the store holds under these keys' ids that is not these judgements, in one sentence (or None)."""
    legacy = judge = texts = 0
    for key in keys:
        for other in store.variants(key):
            if other.legacy:
                legacy += 1
            elif other.fingerprint != key.fingerprint:
                judge += 1
            else:
                texts += 1
    if not legacy + judge + texts:
        return None
    parts = [f"{judge} by another checkpoint or setting of judge {keys[0].judge!r}" if judge else "",
             f"{texts} of other texts (another data set or edited texts under the same ids)" if texts else "",
             f"{legacy} written before judgements carried fingerprints (`jaxrank store adopt` reuses them once "
             "you know they are this judge's judgements of these texts)" if legacy else ""]
    return (f"{store.path} holds {legacy + judge + texts} judgement(s) under this run's ids that are not this "
            f"run's: {'; '.join(x for x in parts if x)}. They are not reused; this run judges its own.")


def template_key(judge) -> str:
    """The template part of a judgement's store key: the judge's ``template_key``, its template's key, or "none"."""
    key = getattr(judge, "template_key", None)
    if key is None and getattr(judge, "template", None) is not None:
        key = judge.template.key
    return str(key or "none")


def prepare_judge(judge, cs: ContextSet, positions: Sequence[int] | None = None) -> None:
    """Let a judge settle what it reads before its key is taken: ``judge.prepare(context, candidates)``
    on the first context to judge (a :class:`~jaxrank.judges.PromptJudge` with ``answer_prefix="auto"``
    chooses its prefix there); judges without ``prepare`` are left as they are."""
    prepare = getattr(judge, "prepare", None)
    if prepare is None or not cs.ids:
        return
    k = int(positions[0]) if positions is not None and len(positions) else 0
    prepare(cs.texts[k], cs.candidates[k])


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
                   progress: bool = True, positions: Sequence[int] | None = None) -> StoredComparisons:
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
            :func:`jaxrank.distributed.process_share`); each keeps its position in
            ``cs`` as the key of its planned pairs, so a share plans exactly the
            pairs a whole run would. Default: every context.

    Returns:
        The judged comparisons of these contexts (:meth:`JudgementStore.comparisons`),
        with every candidate of each context as an item: only judgements by this
        judge (its :func:`judge_fingerprint`) of exactly these texts (their
        :func:`text_hashes`); a store may hold more candidates, contexts or budgets.

    Raises:
        ValueError: a position outside ``cs``.

    Warns:
        StoreMismatchWarning: the store holds judgements under this run's ids
            (judge name, template, context and candidate ids) made by another
            checkpoint, from other texts, or before fingerprints; they are not
            reused, and the warning says how many of each.
    """
    if not isinstance(store, JudgementStore):
        store = JudgementStore(store)
    prepare_judge(judge, cs, positions)
    name, tkey, fp = judge.name, template_key(judge), judge_fingerprint(judge)
    chunk = int(chunk or getattr(judge, "chunk", None) or 4 * (getattr(judge, "batch_size", None) or 8))
    if positions is None:
        positions = range(len(cs.ids))
    positions = [int(k) for k in positions]
    bad = [k for k in positions if not 0 <= k < len(cs.ids)]
    if bad:
        raise ValueError(f"positions {bad} outside [0, {len(cs.ids)}) (the contexts of cs)")
    todo, hashes, absent = [], {}, []
    for k in positions:
        ctx = cs.ids[k]
        i, j = plan_pairs(len(cs.candidates[k]), budget=budget, selection=selection, seed=seed, context_index=k)
        ca = cs.candidate_ids[k]
        hashes[ctx] = h = text_hashes(cs.texts[k], cs.candidates[k], ca)
        keep = []
        for a, b in zip(i.tolist(), j.tolist()):
            key = judgement_key(name, tkey, fp, ctx, h, ca[a], ca[b])
            if key not in store:
                keep.append((a, b))
                absent.append(key)
        if keep:
            todo.append((k, np.array(keep, np.int32)))
    note = _mismatch_note(store, absent)
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
        for k, pairs in todo:
            ca = cs.candidate_ids[k]
            for start in range(0, len(pairs), chunk):
                part = pairs[start:start + chunk]
                judge_chunk(judge, store, name, tkey, cs.ids[k], cs.texts[k], cs.candidates[k], ca, part,
                            progress=None if bar is None else bar.update, fingerprint=fp, hashes=hashes[cs.ids[k]])
    finally:
        if bar is not None:
            bar.close()
    cand = {cs.ids[k]: cs.candidate_ids[k] for k in positions}
    sel = store.comparisons(judge=name, template=tkey, fingerprint=fp, candidates=cand, hashes=hashes)
    keep_rows = [r for r, c in enumerate(sel.contexts) if c in cand]
    if len(keep_rows) != len(sel.contexts):       # the store may hold other contexts too
        comps = jax.tree.map(lambda x: x[np.array(keep_rows)], sel.comparisons)
        sel = StoredComparisons(comps, [sel.contexts[r] for r in keep_rows], [sel.candidates[r] for r in keep_rows])
    return sel
