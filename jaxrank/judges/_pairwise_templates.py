"""Rendering and template batching of :class:`~jaxrank.judges.pairwise.PromptJudge` (private).

Moved unchanged out of :mod:`jaxrank.judges.pairwise` (which kept its public names): the prompt frame
around the context and candidates, the labels' first differing tokens, and the body of
:meth:`~jaxrank.judges.pairwise.PromptJudge.compare_templates` (several templates sharing their prefix in
one batched job), and the soft-prompt path of ``compare`` (:func:`compare_soft`). Each function takes the
judge as its first argument. Since then the frame heals a trailing space into the label
(:func:`~jaxrank.judges.reading.healed_tail`), the labels' lead follows
:func:`~jaxrank.judges.reading.label_lead`, compare_templates reads with the templates' own label tokens,
and both cut a too-long context per row, by as much as that row needs
(:func:`~jaxrank.judges._truncation.fit_each`), so a row's ``p`` depends on its own texts only.
compare_templates prepares an ``answer_prefix="auto"`` judge first and reads a soft-prompt judge's templates
through :func:`compare_soft`, so each result is ``with_template(t).compare``'s.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxrank.judges._truncation import fit_each
from jaxrank.judges.judgement import Judgement, _empty, check_pairs
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.judges.reading import healed_tail, label_lead

__all__ = ["render_frame", "label_tokens", "compare_templates", "compare_soft"]

_SENT_A, _SENT_B, _SENT_CUT = "\ue000", "\ue001", "\ue002"


def render_frame(judge) -> tuple[str, str, str]:
    """``(before_context, between_context_and_a, rest)``; ``rest`` holds the A/B sentinels.

    On a decoder, trailing spaces of the prompt (an answer prefix ``"Summary "``) that would merge into the
    label's first token are left to the label (token healing, :func:`~jaxrank.judges.reading.healed_tail`).
    """
    t = judge.template
    msg = t.text.replace("{context}", _SENT_CUT).replace("{a}", _SENT_A).replace("{b}", _SENT_B)
    if judge.chat:
        msgs = ([{"role": "system", "content": judge.system}] if judge.system else []) + \
            [{"role": "user", "content": msg}]
        full = judge.lm.tokenizer.apply_chat_template(msgs, chat_template=judge.lm.chat_template,
                                                     add_generation_prompt=True, tokenize=False)
    else:
        full = (judge.system + "\n\n" if judge.system else "") + msg + "\n\n"
    full = full + t.answer_prefix
    if judge.decoder:
        tail = full.split(_SENT_B)[-1].split(_SENT_A)[-1].split(_SENT_CUT)[-1]
        cut = healed_tail(judge.lm.tokenizer, tail, t.labels)
        full = full[:len(full) - cut]
    before, rest = full.split(_SENT_CUT) if judge.has_context else ("", full)
    between, rest = rest.split(_SENT_A, 1)
    if not judge.has_context:
        before, between = between, ""
    return before, between, _SENT_A + rest


def label_tokens(judge):
    """The first differing tokens of the two labels, each tokenised alone (the soft prompt's and T5's reading)."""
    tok = judge.lm.tokenizer
    rest = judge._frame[2]
    lead = label_lead(rest) if judge.decoder else ""
    ids = [list(tok(lead + w, add_special_tokens=False)["input_ids"]) for w in judge.template.labels]
    eos = set(judge.lm.eos_token_ids) | ({tok.eos_token_id} if tok.eos_token_id is not None else set())
    ids = [[t for t in x if t not in eos] for x in ids]
    d = 0
    while d < min(map(len, ids)) and ids[0][d] == ids[1][d]:
        d += 1
    if d == min(map(len, ids)):
        raise ValueError(f"label words {judge.template.labels!r} tokenise to {ids[0]} and {ids[1]}: "
                         "no differing token to compare; choose other label words")
    if d and not judge.decoder:
        raise ValueError(f"label words {judge.template.labels!r} share leading tokens; an encoder-decoder "
                         "judge reads only the first decoder token: choose words that differ at once")
    return ids[0][:d], np.array([ids[0][d], ids[1][d]], np.int32)


def compare_templates(judge, templates: Sequence[PairwiseTemplate], context: str, candidates: Sequence[str],
                      i, j, progress=None) -> list[Judgement]:
    """:meth:`PromptJudge.compare_templates <jaxrank.judges.pairwise.PromptJudge.compare_templates>`'s body.

    The rows are read with ``judge.with_template(templates[0])``'s label continuations (all templates read the
    same ones), never the calling judge's own: the two differ when ``judge``'s answer prefix is not the one
    the templates are rendered with. An ``answer_prefix="auto"`` judge is prepared first, as ``compare``
    prepares it (so every template reads after the chosen prefix). A judge with a soft prompt reads each
    template through its own soft-prompt path (:func:`compare_soft`, one template after another: the learnt
    vectors go into every row), so every result is ``judge.with_template(t).compare(...)``'s.
    """
    if not templates:
        raise ValueError("templates must hold at least one template")
    i, j = check_pairs(candidates, i, j)
    if i.size:
        judge.prepare(context, candidates)        # "auto": choose the prefix before deriving the templates' judges
    judges = [judge.with_template(t) for t in templates]
    first = judges[0]
    for k, jd in enumerate(judges[1:], start=1):
        t = templates[k]
        if jd._frame[:2] != first._frame[:2]:
            raise ValueError(f"templates[{k}] ({t.name}) changes the prefix before {{a}}; "
                             "templates judged together must share it")
        if jd.reading.ids != first.reading.ids or jd.template.answer_prefix != first.template.answer_prefix:
            raise ValueError(f"templates[{k}] ({t.name}) reads other label tokens "
                             f"({t.labels!r}, answer prefix {jd.template.answer_prefix!r}) than templates[0] "
                             f"({first.template.answer_prefix!r})")
    n = len(i)
    if n == 0:
        return [_empty() for _ in judges]
    if judge.soft_prompt is not None:             # the learnt vectors' own path, per template
        out = []
        for jd in judges:
            jd._warned, jd._mass_warned = judge._warned, judge._mass_warned
            out.append(compare_soft(jd, context, candidates, i, j, progress))
            judge._warned, judge._mass_warned = jd._warned, jd._mass_warned
        return out
    width = first.reading.width
    rows, groups, cut = [], [], []
    for jd in judges:             # each template's row cut as far as that row needs (as its own compare cuts it)
        jd._warned = judge._warned
        r, k, t = jd.fitted_rows(context, candidates, i, j, extra=width, stacklevel=4)
        judge._warned = judge._warned or t
        rows += r
        groups += list(zip(i.tolist(), k))     # rows cut alike share their A cache
        cut.append(t)
    logp, ti, tp = first._read(rows, groups, progress)   # the templates' reading
    out = []
    for k, jd in enumerate(judges):
        sl = slice(k * n, (k + 1) * n)
        jd._mass_warned = judge._mass_warned
        out.append(jd._judgement(logp[sl], ti[sl], tp[sl], cut[k]))
        judge._mass_warned = jd._mass_warned
    return out


def compare_soft(judge, context: str, candidates: Sequence[str], i, j, progress=None) -> Judgement:
    """:meth:`PromptJudge.compare <jaxrank.judges.pairwise.PromptJudge.compare>` with a soft prompt: each row's
    context cut by as much as that row needs (:func:`~jaxrank.judges._truncation.fit_each`), the rows of one
    cut read against their shared prefix cache (:meth:`~jaxrank.judges.soft_prompt.SoftPrompt.logits`)."""
    ab = list(zip(i.tolist(), j.tolist()))
    pairs = [judge.token_ids(context, candidates[a], candidates[b]) for a, b in ab]
    pairs, cuts, truncated = fit_each(
        pairs, need=lambda t: len(t[0]) + len(t[1]) + len(t[2]) + judge.soft_prompt.length + 1,
        max_length=judge.max_length,
        context_len=lambda: len(judge._encode(context, False)) if judge.has_context else 0,
        rebuild=lambda k, idx: [judge.token_ids(context, candidates[ab[r][0]], candidates[ab[r][1]],
                                                max_context_tokens=k) for r in idx],
        warn=not judge._warned, kept="candidates and question",
        error_tail=": the candidates and question alone do not fit", stacklevel=4)
    judge._warned = judge._warned or truncated
    by_cut: dict = {}                           # one prefix cache per cut (every row's own; fit_each)
    for r, k in enumerate(cuts):
        by_cut.setdefault(k, []).append(r)
    n = len(pairs)
    logp, top_ids, top_probs = np.zeros((n, 2), np.float32), None, None
    for idx in by_cut.values():
        lp, ti, tp = judge.soft_prompt.logits(judge, [pairs[r] for r in idx], progress)
        if top_ids is None:
            top_ids = np.zeros((n,) + np.shape(ti)[1:], np.int32)
            top_probs = np.zeros((n,) + np.shape(tp)[1:], np.float32)
        logp[idx], top_ids[idx], top_probs[idx] = lp, ti, tp
    return judge._judgement(logp, top_ids, top_probs, truncated)
