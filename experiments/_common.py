"""What the experiment scripts share and the package does not need: display names and judge loading.

``efficiency.py`` and ``judge_vs_human.py`` import it (``from _common import
...``, this folder being first on ``sys.path`` when a script runs). The
reusable sweeps themselves are :mod:`jaxrank.studies`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxrank.assessment.store import JudgementStore
from jaxrank.data import label_matrix, load_dataset
from jaxrank.studies import JudgeMatrix, simulated_judge

__all__ = ["LABELS", "store_judge", "load_judge", "rating_judge_matrix", "hanna_llm_judge", "assess_store"]

LABELS = {
    "win_ratio": "win ratio", "average_probability": "avg prob", "bradley_terry": "BT",
    "poe_gaussian": "PoE-g", "poe_gaussian_hard": "PoE-g-hard", "poe_bradley_terry": "PoE-BT",
    "max_likelihood_ranking": "ML ranking", "win_ratio_debiased": "win ratio (tau debiased)",
    "poe_gaussian_debiased": "PoE-g (debiased)", "poe_bradley_terry_debiased": "PoE-BT (debiased)",
    "poe_bradley_terry_learnt": "PoE-BT (learnt gamma)", "win_ratio_permavg": "win ratio (perm. avg)",
    "bradley_terry_permavg": "BT (perm. avg)", "poe_gaussian_hard_permavg": "PoE-g-hard (perm. avg)",
}
"""Short display names (the papers' own)."""


def store_judge(path, *, judge: str, data: str, aspect: str, template: str | None = None) -> JudgeMatrix:
    """A judge read from a judgement store (``jaxrank judge``), labels looked up in the data set.

    Contexts and candidates are matched by id (``context``, ``a``, ``b`` of the
    records vs the data set's ``context_id`` / ``candidate_id``). Repeated judgements
    of one ordered pair are averaged. Only candidates that appear in the store are kept.

    Raises:
        ValueError: no judgements, or ids that the data set does not have.
    """
    stored = JudgementStore(path).comparisons(judge=judge, template=template)
    lm = label_matrix(load_dataset(data), aspect)
    rows = {cid: k for k, cid in enumerate(lm.context_ids)}
    c = stored.comparisons
    n = c.num_items
    C = len(stored.contexts)
    labels, mask = np.zeros((C, n), np.float32), np.zeros((C, n), bool)
    wsum, psum = np.zeros((C, n, n)), np.zeros((C, n, n))
    ci, cj, cp, cw = (np.asarray(x) for x in (c.i, c.j, c.p, c.weight))
    for k, (ctx, cands) in enumerate(zip(stored.contexts, stored.candidates)):
        if ctx not in rows:
            raise ValueError(f"{path}: context {ctx!r} is not in {data}")
        row = rows[ctx]
        col = {cid: m for m, cid in enumerate(lm.candidate_ids[row])}
        missing = [x for x in cands if x not in col]
        if missing:
            raise ValueError(f"{path}: candidates {missing} of context {ctx!r} are not in {data}")
        labels[k, :len(cands)] = lm.labels[row, [col[x] for x in cands]]
        mask[k, :len(cands)] = True
        np.add.at(wsum[k], (ci[k], cj[k]), cw[k])
        np.add.at(psum[k], (ci[k], cj[k]), cw[k] * cp[k])
    observed = wsum > 0
    probs = np.where(observed, psum / np.where(observed, wsum, 1), 0.5).astype(np.float32)
    return JudgeMatrix(probs, observed, labels, mask, f"{judge} ({path})")


def load_judge(*, data: str, aspect: str, contexts: str | None = None, store=None, judge: str | None = None,
               template: str | None = None, accuracy: float = 0.686, p_a: float = 0.37, item_noise: float = 1.5,
               seed: int = 0, dataset=None) -> tuple[JudgeMatrix, str]:
    """The judge of an experiment script: read from a judgement store, or simulated on the human labels.

    Args:
        data, aspect: the data set and human aspect of the labels.
        contexts: ``"a:b"`` slice of the contexts (``None``: all).
        store, judge, template: a judgement store (``jaxrank judge``) and the judge's
            name in it (:func:`store_judge`); without ``store`` the judge is simulated.
        accuracy, p_a, item_noise, seed: the simulated judge's settings (:func:`jaxrank.studies.simulated_judge`).
        dataset: the loaded data set (saves loading it again), simulated judges only.

    Returns:
        ``(judge, label)``: the judge restricted to ``contexts`` and a file-name label
        (the store's judge name, or ``sim-acc686-pa37`` for a simulated judge).

    Raises:
        ValueError: ``store`` without ``judge``, or a malformed ``contexts`` slice.
    """
    try:
        cut = slice(*[int(x) if x else None for x in contexts.split(":")]) if contexts else slice(None)
    except ValueError:
        raise ValueError(f"contexts must be a slice such as 0:20, got {contexts!r}") from None
    if store:
        if not judge:
            raise ValueError("a judgement store needs the judge's name (judge=)")
        j = store_judge(store, judge=judge, data=data, aspect=aspect, template=template)
        return JudgeMatrix(*(x[cut] for x in j[:4]), j.name), Path(judge).name
    lm = label_matrix(dataset if dataset is not None else load_dataset(data), aspect)
    j = simulated_judge(lm.labels[cut], lm.mask[cut], accuracy=accuracy, p_a=p_a, item_noise=item_noise, seed=seed)
    return j, f"sim-acc{round(1000 * accuracy)}-pa{round(100 * p_a)}"


def rating_judge_matrix(ratings, human, mask, name: str) -> JudgeMatrix:
    """Every ordered pair's ``variant_share`` probability of stored ratings as a :class:`JudgeMatrix`.

    ``ratings [K, N, V]`` (``V`` rating variants per item), ``human``/``mask [K, N]``;
    ``p`` as :func:`jaxrank.judges.replay_probabilities` (``method="variant_share"``).
    """
    from jaxrank.judges.rating_replay import replay_probabilities

    k, n = mask.shape
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    i = np.broadcast_to(a.reshape(-1), (k, n * n))
    j = np.broadcast_to(b.reshape(-1), (k, n * n))
    probs = replay_probabilities(ratings, i, j, method="variant_share").reshape(k, n, n)
    observed = mask[:, :, None] & mask[:, None, :] & ~np.eye(n, dtype=bool)
    return JudgeMatrix(np.where(observed, probs, 0.5).astype(np.float32), observed, human, mask, name)


def hanna_llm_judge(llm: str, aspect: str = "coherence") -> JudgeMatrix:
    """A HANNA LLM's stored ratings (:func:`jaxrank.data.load_llm_ratings`) as a pairwise judge, all pairs."""
    from jaxrank.data import load_llm_ratings

    r = load_llm_ratings(llm, aspect)
    return rating_judge_matrix(r.ratings, r.human, r.mask, f"{llm} (stored ratings, variant share)")


STORE_METHODS = ("win_ratio", "average_probability", "poe_gaussian", "poe_bradley_terry")


def assess_store(path, *, data: str, aspect: str, judge: str | None = None, debias: str = "none",
                 methods=STORE_METHODS, template: str | None = None):
    """A judgement store's comparisons against the data set's human scores (``assess_comparisons``).

    ``template``: the template key (prompt and reading) to assess, for a store holding several.
    Every context of the store is kept with only the candidates judged in it (as
    :func:`store_judge`), in the data set's order: a store that judged 4 of an
    article's 16 summaries is assessed on those 4 (the 12 never judged would all
    tie at the scorer's default score and drag the correlation towards 0); a
    candidate without a human score is left out of the correlation.

    Returns:
        ``(assessment, judge name)``, or ``(None, None)`` when the store holds no record.
    """
    from jaxrank.assessment.report import assess_comparisons
    from jaxrank.assessment.run import contexts_of

    store = JudgementStore(path)
    recs = store.records(judge=judge, template=template)
    if not recs:
        return None, None
    judge = judge or recs[0]["judge"]
    cs = contexts_of(load_dataset(data), aspect=aspect)
    labels = {cs.ids[k]: dict(zip(cs.candidate_ids[k], cs.labels[k])) for k in range(len(cs.ids))}
    seen: dict[str, set] = {}
    for r in recs:
        if r["judge"] == judge:
            seen.setdefault(str(r["context"]), set()).update((str(r["a"]), str(r["b"])))
    order = {cs.ids[k]: [c for c in cs.candidate_ids[k] if str(c) in seen.get(str(cs.ids[k]), ())]
             for k in range(len(cs.ids)) if str(cs.ids[k]) in seen}
    sc = store.comparisons(judge=judge, candidates=order, template=template)
    lab = np.full((len(sc.contexts), max(map(len, sc.candidates))), np.nan)   # NaN: no human score, left out
    for r, (ctx, ids) in enumerate(zip(sc.contexts, sc.candidates)):
        lab[r, :len(ids)] = [labels.get(ctx, {}).get(cid, np.nan) for cid in ids]
    return assess_comparisons(sc.comparisons, lab, contexts=sc.contexts, debias=debias, methods=methods,
                              candidates=sc.candidates, dataset=data, aspect=aspect), judge

