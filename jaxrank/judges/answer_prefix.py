"""The words a model writes before the label (``PromptJudge(answer_prefix="auto")``), from its greedy answers."""

from __future__ import annotations

from typing import Sequence

from jaxrank.judges.judgement import AnswerPrefixChoice, check_pairs
from jaxrank.judges.reading import answer_prefix_of, naming_word
from jaxrank.judges.textgen import generate_texts, sample_key

__all__ = ["find_answer_prefix"]


def find_answer_prefix(bare, context: str, candidates: Sequence[str], *, pairs: int = 4,
                       max_new_tokens: int = 12) -> AnswerPrefixChoice:
    """The words the model writes before the label, from its greedy answers to a few pairs.

    ``bare`` is a :class:`~jaxrank.judges.PromptJudge` whose template has no answer prefix
    (:meth:`PromptJudge.find_answer_prefix` makes it), so the model answers after the bare header.

    Pairs ``(0, 1), (1, 0), (1, 2), (2, 1) ...`` of ``candidates`` (up to
    ``pairs``) are answered greedily without any answer prefix; the text
    before the first stand-alone label word is taken
    (:func:`~jaxrank.judges.reading.answer_prefix_of`: ``"Summary A is
    more coherent"`` gives ``"Summary"``), the most common one winning.
    When no answer names a label (a model that begins "To determine..."),
    the prefix is the word the prompt names the candidates with
    (:func:`~jaxrank.judges.reading.naming_word`), if any.

    Raises:
        ValueError: fewer than two candidates, or ``pairs < 1``.
    """
    if len(candidates) < 2 or pairs < 1:
        raise ValueError(f"find_answer_prefix needs >= 2 candidates and pairs >= 1, got {len(candidates)} "
                         f"and {pairs}")
    n = len(candidates)
    ij = [(k % n, (k + 1) % n) if s == 0 else ((k + 1) % n, k % n) for k in range(n) for s in (0, 1)][:pairs]
    i, j = check_pairs(candidates, [a for a, _ in ij], [b for _, b in ij])
    rows, _ = bare.prompt_rows(context, candidates, i, j, extra=max_new_tokens)
    answers = generate_texts(bare.lm, rows, batch_rows=min(len(rows), bare.batch_size),
                             max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0,
                             key=sample_key(0, context))
    prefix = answer_prefix_of(answers, bare.template.labels)
    if prefix is None:                       # no answer names a label: name them as the prompt does
        word = naming_word(bare.template.text, bare.template.labels)
        return AnswerPrefixChoice(word or "", tuple(answers), False, word is not None)
    return AnswerPrefixChoice(prefix, tuple(answers), True)
