"""ZEPO: zero-shot prompt search for fairer pairwise judges (zepo §4, Algorithm 1, Appendix A).

Greedy search over instructions ``I`` maximising a zero-shot objective on
unlabelled pairs, ``I* = argmax_I fair_{x in D}(I)`` (zepo eq. 1):

1. the seed template's instruction (the text after ``{b}``) is the current best;
2. each epoch an LLM paraphraser (a local Flax model sampling at a set
   temperature, prompted with the paper's paraphrasing instruction, which keeps
   the aspect keyword) proposes ``population`` new instructions from the best;
3. candidates that break the template (no aspect keyword, no A/B labels, a
   placeholder, longer than the allowed tokens, a changed prefix) are rejected
   with a logged reason;
4. every other candidate is judged on the same fixed sample of pairs (both
   orders) -- all candidates of an epoch in one batched, prefix-shared job
   (:meth:`~jaxrank.judges.PromptJudge.compare_templates`) -- and scored by the
   objective (:mod:`jaxrank.fairness`);
5. the best of ``{I*} ∪ candidates`` survives (strictly better replaces it), so
   the result is never worse than the seed on the objective.

Every judgement goes through the :class:`~jaxrank.assessment.store.JudgementStore`
(keyed by template key), appended per context, and every step is written to a
JSONL search log as it happens; a killed search, rerun with the same
arguments, reads both back and judges or generates nothing twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np

from jaxrank import fairness as fair
from jaxrank.assessment._zepo_log import SearchLog
from jaxrank.assessment.run import judge_fingerprint, judgement_key, text_hashes
from jaxrank.assessment.store import JudgementStore
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.judges.textgen import as_loaded, check_sampling, generate_texts

__all__ = ["PARAPHRASE_INSTRUCTION", "CONTENT_FREE", "instruction_of", "with_instruction", "check_candidate",
           "aspect_forms", "aspect_keyword",
           "Paraphraser", "SearchSample", "sample_pairs", "sample_digest", "score_templates", "zepo_search",
           "ZepoResult", "save_template", "load_template"]

PARAPHRASE_INSTRUCTION = ('Paraphrase the following instruction for a pairwise comparison task. '
                          'Do not change the keyword "[ASPECT]". Be diverse and creative in paraphrasing. '
                          'Return the instruction only.')
"""The paraphraser's instruction (zepo App. A, Table 5); ``[ASPECT]`` becomes the aspect."""

CONTENT_FREE = "[N/A]"
"""The content-free input of the context-free confidence (zepo App. A)."""


def instruction_of(template: PairwiseTemplate) -> str:
    """The instruction: the template's text after ``{b}``, stripped (ZEPO's seed puts it there)."""
    return template.text[template.text.index("{b}") + 3:].strip()


def with_instruction(template: PairwiseTemplate, instruction: str) -> PairwiseTemplate:
    """``template`` with its text after ``{b}`` replaced by ``instruction`` (same separator, name, labels)."""
    cut = template.text.index("{b}") + 3
    tail = template.text[cut:]
    sep = tail[:len(tail) - len(tail.lstrip())]
    return dataclasses.replace(template, text=template.text[:cut] + sep + instruction.strip())


_ADJECTIVE_SUFFIXES = (("ibility", "ible"), ("ability", "able"), ("ency", "ent"), ("ence", "ent"),
                       ("ancy", "ant"), ("ance", "ant"), ("ity", ""), ("ness", ""))


def aspect_forms(aspect: str) -> tuple[str, ...]:
    """The words that name ``aspect`` in an instruction (lower case): the aspect itself and its adjective.

    ``"coherence"`` -> ``("coherence", "coherent")``, ``"consistency"`` -> ``+ "consistent"``,
    ``"fluency"`` -> ``+ "fluent"``, ``"relevance"`` -> ``+ "relevant"``, ``"complexity"`` ->
    ``+ "complex"``, ``"naturalness"`` -> ``+ "natural"`` (PoE templates ask which text "is more
    coherent"; ZEPO's seed asks for "better coherence").
    """
    base = str(aspect).lower().replace("_", " ").strip()
    forms = [base]
    for suffix, adjective in _ADJECTIVE_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix) + 2:
            forms.append(base[:-len(suffix)] + adjective)
            break
    return tuple(forms)


def aspect_keyword(instruction: str, aspect: str) -> str:
    """The form of ``aspect`` (:func:`aspect_forms`) that ``instruction`` uses, as written there
    (the word a paraphraser must keep); ``aspect`` itself when none occurs."""
    low = instruction.lower()
    for form in aspect_forms(aspect):
        at = low.find(form)
        if at >= 0:
            return instruction[at:at + len(form)]
    return aspect


def check_candidate(instruction: str, aspect: str, *, labels=("A", "B"), max_tokens: int | None = None,
                    count_tokens: Callable[[str], int] | None = None, seed: PairwiseTemplate | None = None,
                    template: PairwiseTemplate | None = None) -> str | None:
    """Why a candidate instruction breaks the template, or ``None`` when it is usable.

    Reasons: empty; a ``{...}`` placeholder; the aspect keyword missing
    (case-insensitive; the aspect or its adjective, :func:`aspect_forms`); a label word missing (whole word, case-sensitive);
    more than ``max_tokens`` tokens (``count_tokens``); a ``template`` whose
    text before ``{a}`` differs from ``seed``'s (a changed prefix).
    """
    text = instruction.strip()
    if not text:
        return "empty instruction"
    if re.search(r"\{[a-z_]*\}", text):
        return "contains a template placeholder"
    forms = aspect_forms(aspect)
    if not any(f in text.lower() for f in forms):
        return f"missing the aspect keyword {' or '.join(map(repr, forms))}"
    for w in labels:
        if not re.search(r"(?<!\w)" + re.escape(w) + r"(?!\w)", text):
            return f"missing the label {w!r}"
    if max_tokens is not None and count_tokens is not None:
        n = count_tokens(text)
        if n > max_tokens:
            return f"longer than the window: {n} tokens > {max_tokens}"
    if seed is not None and template is not None:
        if template.text[:template.text.index("{a}")] != seed.text[:seed.text.index("{a}")]:
            return "changes the prefix before {a}"
    return None


class Paraphraser:
    """An LLM optimiser proposing paraphrases of an instruction (zepo App. A).

    Args:
        model: a loaded model or a name for :func:`~jaxrank.models.load_model` (a decoder).
        aspect: the keyword the paraphrases must keep.
        temperature: sampling temperature (the paper: 0.9).
        top_p: nucleus sampling.
        max_new_tokens: longest paraphrase.
        seed: the PRNG seed; epoch ``e`` samples with ``fold_in(PRNGKey(seed), e)``.
    """

    def __init__(self, model, aspect: str, *, temperature: float = 0.9, top_p: float = 1.0,
                 max_new_tokens: int = 96, seed: int = 0):
        check_sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        self.lm = as_loaded(model)
        self.aspect, self.temperature, self.top_p = aspect, float(temperature), float(top_p)
        self.max_new_tokens, self.seed = int(max_new_tokens), int(seed)

    @property
    def name(self) -> str:
        return self.lm.name

    @property
    def fingerprint(self) -> str:
        """The paraphrasing model's fingerprint (its weights, tokenizer and dtype), for the search log's config."""
        return self.lm.fingerprint

    def prompt(self, instruction: str) -> str:
        """The paraphrasing request (chat-wrapped when the model has a chat template)."""
        msg = PARAPHRASE_INSTRUCTION.replace("[ASPECT]", self.aspect) + "\n\nInstruction: " + instruction
        if self.lm.chat_template:
            return self.lm.tokenizer.apply_chat_template([{"role": "user", "content": msg}],
                                                         chat_template=self.lm.chat_template,
                                                         add_generation_prompt=True, tokenize=False)
        return msg + "\n\nParaphrase:"

    def propose(self, instruction: str, n: int, epoch: int) -> list[str]:
        """``n`` sampled paraphrases of ``instruction`` (deterministic given seed and epoch)."""
        ids = list(self.lm.tokenizer(self.prompt(instruction), add_special_tokens=not self.lm.chat_template)
                   ["input_ids"])
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed), epoch)
        texts = generate_texts(self.lm, [ids] * n, batch_rows=n, max_new_tokens=self.max_new_tokens,
                               temperature=self.temperature, top_p=self.top_p, key=key)
        return [t.strip().strip('"').strip() for t in texts]


@dataclasses.dataclass(frozen=True)
class SearchSample:
    """The fixed unlabelled pairs every candidate is judged on.

    Attributes:
        ids, texts, candidate_ids, candidates: per sampled context.
        pairs: per context, ``[P, 2]`` ordered pairs (both orders of each drawn pair).
    """

    ids: list[str]
    texts: list[str]
    candidate_ids: list[list[str]]
    candidates: list[list[str]]
    pairs: list[np.ndarray]

    @property
    def size(self) -> int:
        return int(sum(len(p) for p in self.pairs))


def sample_pairs(cs, *, num_contexts: int, pairs_per_context: int | None, seed: int = 0) -> SearchSample:
    """Draw ``num_contexts`` contexts of ``cs`` and ``pairs_per_context`` unordered pairs each, both orders.

    ``pairs_per_context=None`` takes every pair. Deterministic given ``seed``.

    Contexts with fewer than 2 candidates hold no pair and are never drawn.

    Raises:
        ValueError: no context with 2 candidates or more, ``num_contexts`` outside ``[1, number of such
            contexts]``, or ``pairs_per_context < 1``.
    """
    usable = [k for k in range(len(cs.ids)) if len(cs.candidates[k]) >= 2]
    if not usable:
        raise ValueError(f"no context has 2 candidates or more ({len(cs.ids)} contexts): there is no pair to "
                         "judge, so no sample to score a prompt on")
    if not 1 <= num_contexts <= len(usable):
        raise ValueError(f"num_contexts must lie in [1, {len(usable)}] (the contexts with 2 candidates or more), "
                         f"got {num_contexts}")
    if pairs_per_context is not None and pairs_per_context < 1:
        raise ValueError(f"pairs_per_context must be >= 1, got {pairs_per_context}")
    rng = np.random.default_rng(seed)
    pick = sorted(usable[x] for x in rng.choice(len(usable), num_contexts, replace=False).tolist())
    pairs = []
    for k in pick:
        n = len(cs.candidates[k])
        a, b = np.triu_indices(n, 1)
        if pairs_per_context is not None and pairs_per_context < len(a):
            sel = np.sort(rng.choice(len(a), pairs_per_context, replace=False))
            a, b = a[sel], b[sel]
        pairs.append(np.concatenate([np.stack([a, b], 1), np.stack([b, a], 1)]).astype(np.int32))
    return SearchSample([cs.ids[k] for k in pick], [cs.texts[k] for k in pick],
                        [cs.candidate_ids[k] for k in pick], [cs.candidates[k] for k in pick], pairs)


def sample_digest(sample: SearchSample) -> str:
    """A hash of everything a search judges (the first 16 hex digits of a SHA-256): the context ids and
    texts, the candidate ids and texts and the ordered pairs. Two samples with the same contexts but other
    candidates (``--candidates``), other pairs or edited texts differ."""
    blob = json.dumps([sample.ids, sample.texts, sample.candidate_ids, sample.candidates,
                       [np.asarray(p).tolist() for p in sample.pairs]], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


_LOG_NOTES = {"sample": "The sampled pairs differ: other contexts, candidates (--candidates), pairs, seed or "
                        "texts.",
              "max_instruction_tokens": "Candidates were accepted or rejected under another token limit."}


def stored_key(judge, template: PairwiseTemplate) -> str:
    """The store's template key of ``judge`` reading ``template``: the judge's own ``template_key`` for it
    (a :class:`~jaxrank.judges.PromptJudge`'s covers how the answer is read), else the template's key."""
    other = getattr(judge, "with_template", None)
    return other(template).template_key if other is not None else template.key


def _judge_missing(judge, store: JudgementStore, templates: Sequence[PairwiseTemplate], ctx_id: str, text: str,
                   cand_ids: Sequence[str], cands: Sequence[str], pairs: np.ndarray, progress=None) -> int:
    """Judge the pairs of one context not yet stored for any of ``templates``, in one batched call."""
    name, fp = judge.name, judge_fingerprint(judge)
    h = text_hashes(text, cands, cand_ids)
    keys = [stored_key(judge, t) for t in templates]
    todo = [(t, key) for t, key in zip(templates, keys)
            if store.missing(judgement_key(name, key, fp, ctx_id, h, cand_ids[a], cand_ids[b])
                             for a, b in pairs.tolist())]
    if not todo:
        return 0
    res = judge.compare_templates([t for t, _ in todo], text, cands, pairs[:, 0], pairs[:, 1], progress=progress)
    recs = []
    for (t, key), r in zip(todo, res):
        for n, (a, b) in enumerate(pairs.tolist()):
            ca, cb = str(cand_ids[a]), str(cand_ids[b])
            recs.append({"judge": name, "template": key, "context": ctx_id, "a": ca, "b": cb,
                         "fingerprint": fp, "context_sha": h.context, "a_sha": h.candidates[ca],
                         "b_sha": h.candidates[cb],
                         "i": a, "j": b, "p": float(r.p[n]), "truncated": bool(r.truncated),
                         "logits": [float(x) for x in r.logits[n]],
                         **({} if r.label_mass is None else {"label_mass": float(r.label_mass[n])})})
    store.append(recs)
    return len(todo) * len(pairs)


def score_templates(judge, templates: Sequence[PairwiseTemplate], sample: SearchSample,
                    store: JudgementStore, *, progress=None) -> dict[str, np.ndarray]:
    """Judge ``templates`` on ``sample`` (and on the content-free pair) through ``store``; all objectives.

    Returns:
        ``{"p": [K, R], "p_content_free": [K, 2], "fairness": [K], "confidence": [K],
        "calibration": [K], "context_free": [K], "decision_rate": [K]}``, the
        objectives as in :data:`jaxrank.fairness.OBJECTIVES` (higher is fairer).
    """
    for c in range(len(sample.ids)):
        _judge_missing(judge, store, templates, sample.ids[c], sample.texts[c], sample.candidate_ids[c],
                       sample.candidates[c], sample.pairs[c], progress)
    cf_pairs = np.array([[0, 1], [1, 0]], np.int32)
    _judge_missing(judge, store, templates, CONTENT_FREE, CONTENT_FREE, ["na-0", "na-1"],
                   [CONTENT_FREE, CONTENT_FREE], cf_pairs)

    keys = {id(t): stored_key(judge, t) for t in templates}
    fp = judge_fingerprint(judge)
    hashes = {**{c: text_hashes(sample.texts[n], sample.candidates[n], sample.candidate_ids[n])
                 for n, c in enumerate(sample.ids)},
              CONTENT_FREE: text_hashes(CONTENT_FREE, [CONTENT_FREE, CONTENT_FREE], ["na-0", "na-1"])}

    def read(t, ctx_id, cids, pairs):
        return [store.get(judgement_key(judge.name, keys[id(t)], fp, ctx_id, hashes[ctx_id], cids[a], cids[b]))["p"]
                for a, b in pairs.tolist()]

    p = np.array([[x for c in range(len(sample.ids))
                   for x in read(t, sample.ids[c], sample.candidate_ids[c], sample.pairs[c])] for t in templates],
                 np.float32)
    pcf = np.array([read(t, CONTENT_FREE, ["na-0", "na-1"], cf_pairs) for t in templates], np.float32)
    out = {"p": p, "p_content_free": pcf, "decision_rate": np.asarray(fair.decision_rate(p))}
    for k, f in fair.OBJECTIVES.items():
        out[k] = np.asarray(f(p, pcf))
    return out


@dataclasses.dataclass
class ZepoResult:
    """What :func:`zepo_search` returns.

    Attributes:
        best: the surviving template.
        seed: the seed template.
        epochs: per epoch ``{"epoch", "best", "objective", "fairness", "decision_rate", "accepted", "rejected"}``
            (epoch 0 is the seed).
        candidates: every scored candidate ``{"epoch", "instruction", "template_key", objectives...}``.
        rejected: every rejected candidate ``{"epoch", "instruction", "reason"}``.
        judged: comparisons judged by the model in this call (0 for a finished search rerun).
    """

    best: PairwiseTemplate
    seed: PairwiseTemplate
    epochs: list[dict]
    candidates: list[dict]
    rejected: list[dict]
    judged: int


def zepo_search(judge, paraphraser, seed: PairwiseTemplate, sample: SearchSample, aspect: str, *,
                store: JudgementStore | str, log: str | Path, epochs: int = 5, population: int = 5,
                objective: str = "fairness", max_instruction_tokens: int = 160,
                on_epoch: Callable[[dict], None] | None = None, progress=None) -> ZepoResult:
    """Greedy ZEPO search (zepo Algorithm 1); see the module docstring.

    Args:
        judge: a :class:`~jaxrank.judges.PromptJudge` (anything with ``name``,
            ``compare_templates`` and ``lm.tokenizer``).
        paraphraser: anything with ``propose(instruction, n, epoch) -> list[str]`` (:class:`Paraphraser`).
        seed: the seed template; its instruction (after ``{b}``) is searched.
        sample: the fixed unlabelled pairs (:func:`sample_pairs`).
        aspect: the keyword every candidate must keep.
        store: the judgement store (or its path).
        log: the JSONL search log, resumed when it exists and its config is this search's: the judge's
            name, fingerprint and reading (its template key of the seed), the paraphraser's name,
            fingerprint and sampling settings (temperature, top_p, max_new_tokens, seed), the seed
            template, aspect, objective, population, ``max_instruction_tokens`` and the sample
            (:func:`sample_digest`: its contexts, candidates, texts and pairs). Another search's log is
            refused (a ``ValueError`` naming the file and the settings that differ), never mixed in.
        epochs, population: the search's size (the paper: 5 and 5).
        objective: a name of :data:`jaxrank.fairness.OBJECTIVES` to maximise.
        max_instruction_tokens: longer candidates are rejected.
        on_epoch: called with each epoch's summary as it is decided.
        progress: callable told of judged comparisons (a progress bar's ``update``).

    A candidate whose objective is NaN (a judge that gave NaN ``p``) is logged but never chosen.

    Raises:
        ValueError: bad sizes, an empty sample (no comparisons), an unknown objective, a seed without
            the aspect (or its adjective, :func:`aspect_forms`) or labels, or a log of another search.
    """
    fair.objective(objective)
    if sample.size == 0:
        raise ValueError("the sample holds no comparisons (contexts of fewer than 2 candidates?): no objective "
                         "can be computed; draw it with sample_pairs from contexts with 2 candidates or more")
    if epochs < 0 or population < 1:
        raise ValueError(f"epochs must be >= 0 and population >= 1, got {epochs} and {population}")
    if not isinstance(store, JudgementStore):
        store = JudgementStore(store)
    if getattr(judge, "prepare", None) is not None and sample.ids:   # an "auto" answer prefix, chosen once
        judge.prepare(sample.texts[0], sample.candidates[0])
    tok = judge.lm.tokenizer
    count = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
    best_instr = instruction_of(seed)
    why = check_candidate(best_instr, aspect, labels=seed.labels)
    if why:
        raise ValueError(f"seed template: {why}")
    config = {"judge": judge.name, "judge_fingerprint": judge_fingerprint(judge),
              "reading": stored_key(judge, seed),
              "paraphraser": getattr(paraphraser, "name", type(paraphraser).__name__),
              "paraphraser_fingerprint": getattr(paraphraser, "fingerprint", None),
              "seed_key": seed.key, "aspect": aspect, "objective": objective, "population": population,
              "contexts": sample.ids, "comparisons": sample.size, "sample": sample_digest(sample),
              "max_instruction_tokens": max_instruction_tokens,
              "temperature": getattr(paraphraser, "temperature", None), "top_p": getattr(paraphraser, "top_p", None),
              "max_new_tokens": getattr(paraphraser, "max_new_tokens", None),
              "paraphrase_seed": getattr(paraphraser, "seed", None)}
    lg = SearchLog(log, config, notes=_LOG_NOTES)
    before = len(store)

    def scored(templates, instructions, epoch):
        res = score_templates(judge, templates, sample, store, progress=progress)
        rows = []
        for k, (t, ins) in enumerate(zip(templates, instructions)):
            row = {"event": "candidate", "epoch": epoch, "instruction": ins, "template_key": stored_key(judge, t),
                   "decision_rate": float(res["decision_rate"][k])}
            row.update({o: float(res[o][k]) for o in fair.OBJECTIVES})
            rows.append(row)
        return rows

    seed_row = scored([seed], [best_instr], 0)[0]
    best_row, candidates, rejected = seed_row, [seed_row], []
    summary = {"event": "epoch", "epoch": 0, "best": best_instr, "objective": best_row[objective],
               "fairness": best_row["fairness"], "decision_rate": best_row["decision_rate"],
               "accepted": 1, "rejected": 0}
    summaries = [summary]
    lg.once(seed_row)
    lg.once(summary)
    if on_epoch:
        on_epoch(summary)
    for e in range(1, epochs + 1):
        prop = lg.find("proposals", e, **{"from": best_instr})
        if prop is None:
            prop = {"event": "proposals", "epoch": e, "from": best_instr,
                    "instructions": list(paraphraser.propose(best_instr, population, e))}
            lg.write(prop)
        temps, instrs, rej, seen = [], [], [], {best_instr}
        for ins in prop["instructions"]:
            t = with_instruction(seed, ins)
            why = check_candidate(ins, aspect, labels=seed.labels, max_tokens=max_instruction_tokens,
                                  count_tokens=count, seed=seed, template=t)
            if why is None and ins.strip() in seen:
                why = "duplicate of an instruction already scored this epoch"
            if why:
                rej.append({"event": "rejected", "epoch": e, "instruction": ins, "reason": why})
            else:
                seen.add(ins.strip())
                temps.append(t)
                instrs.append(ins.strip())
        rows = scored(temps, instrs, e) if temps else []
        # a NaN objective (a judge's NaN p) is never chosen, and a NaN best is replaced by any number
        winner = max((r for r in rows if math.isfinite(r[objective])), key=lambda r: r[objective], default=None)
        if winner is not None and (not math.isfinite(best_row[objective]) or winner[objective] > best_row[objective]):
            best_row, best_instr = winner, winner["instruction"]
        summary = {"event": "epoch", "epoch": e, "best": best_instr, "objective": best_row[objective],
                   "fairness": best_row["fairness"], "decision_rate": best_row["decision_rate"],
                   "accepted": len(rows), "rejected": len(rej)}
        for ev in rej + rows + [summary]:
            lg.once(ev)
        candidates += rows
        rejected += rej
        summaries.append(summary)
        if on_epoch:
            on_epoch(summary)
    return ZepoResult(with_instruction(seed, best_instr), seed, summaries, candidates, rejected,
                      len(store) - before)


def save_template(template: PairwiseTemplate, path: str | Path) -> Path:
    """Write a template as JSON (``text``, ``labels``, ``name``, ``answer_prefix``) for ``--template FILE``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(template), indent=1, ensure_ascii=False) + "\n")
    return path


def load_template(path: str | Path) -> PairwiseTemplate:
    """Read a template written by :func:`save_template` (or a plain-text file holding the template text).

    Raises:
        ValueError: not a template, or not UTF-8 text (names the file).
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        raw = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}: the file is in another "
                         "encoding, e.g. Latin-1, Windows-1252 or UTF-16); save it as UTF-8") from None
    try:
        if raw.lstrip().startswith("{") and raw.rstrip().endswith("}") and '"text"' in raw:
            d = json.loads(raw)
            t = PairwiseTemplate(d["text"], tuple(d.get("labels", ("A", "B"))), d.get("name", path.stem),
                                 d.get("answer_prefix", ""))
        else:
            t = PairwiseTemplate(raw.rstrip("\n"), name=path.stem)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a pairwise template ({e})") from None
    unknown = sorted(set(re.findall(r"\{([A-Za-z_]\w*)\}", t.text)) - {"context", "a", "b"})
    if unknown:                              # a placeholder that nothing fills: a typo such as {summary}
        raise ValueError(f"{path}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; a "
                         "pairwise template fills {context}, {a} and {b} only")
    return t
