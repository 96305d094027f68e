"""Prompt templates for pairwise and pointwise judges (METHODS.md §1, PoE Table 4, ZEPO, G-Eval).

A :class:`PairwiseTemplate` is a user message with the placeholders
``{context}``, ``{a}`` and ``{b}``, plus the two label words whose next-token
probabilities give ``p = P(A better)`` (llm-comparative-assessment eq. 3). The
judging layer renders it once per comparison; everything before the first
candidate (the article or dialogue) is the *shared prefix* whose key/value cache
is computed once per context.

Built-in templates (``TEMPLATES``, by ``(dataset, aspect)``) are the PoE paper's
Table 4 prompts where it gives them, and prompts of the same style for the
other aspects of our data sets; ``ZEPO_SEED`` is ZEPO's seed instruction.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Mapping

__all__ = ["PairwiseTemplate", "PointwiseTemplate", "TEMPLATES", "pairwise_template", "ZEPO_SEED",
           "G_EVAL_CRITERIA", "pointwise_template"]


_PLACEHOLDER = re.compile(r"\{context\}|\{a\}|\{b\}")


@dataclasses.dataclass(frozen=True)
class PairwiseTemplate:
    """A comparative prompt.

    Attributes:
        text: the user message, with ``{context}`` (may be absent), ``{a}`` and ``{b}``.
        labels: the label words for "A is better" and "B is better"; the judge
            reads the first token where their tokenisations differ.
        name: short identifier stored with every judgement.
        answer_prefix: text appended after the prompt (after the chat template's
            assistant header, if any), e.g. ``"Answer:"`` for base models.
    """

    text: str
    labels: tuple[str, str] = ("A", "B")
    name: str = "custom"
    answer_prefix: str = ""

    def __post_init__(self):
        for field in ("{a}", "{b}"):
            if field not in self.text:
                raise ValueError(f"template text must contain {field}: {self.text!r}")
        if self.text.find("{context}") > self.text.find("{a}"):
            raise ValueError("template text must put {context} (if any) before the candidates")
        if len(self.labels) != 2 or self.labels[0] == self.labels[1] or not all(self.labels):
            raise ValueError(f"labels must be two different non-empty words, got {self.labels!r}")

    @property
    def key(self) -> str:
        """A stable id of the whole template (name plus a hash of its text and labels)."""
        h = hashlib.sha1(repr((self.text, self.labels, self.answer_prefix)).encode()).hexdigest()[:8]
        return f"{self.name}-{h}"

    def split(self, context: str) -> tuple[str, str]:
        """``(prefix, rest)`` of the user message: ``rest`` starts at ``{a}``."""
        cut = self.text.index("{a}")
        return self.text[:cut].replace("{context}", context), self.text[cut:]

    def render(self, context: str, a: str, b: str) -> str:
        """The whole user message: every placeholder of the template replaced in one pass, so a context or a
        candidate that itself holds ``{a}``, ``{b}`` or ``{context}`` is kept as written (the template's text is
        searched, never the texts put into it)."""
        values = {"{context}": context, "{a}": a, "{b}": b}
        return _PLACEHOLDER.sub(lambda m: values[m.group(0)], self.text)


@dataclasses.dataclass(frozen=True)
class PointwiseTemplate:
    """A G-Eval style scoring prompt (g-eval §2): task, criteria, steps, then the input.

    ``text`` holds ``{criteria}``, ``{steps}``, ``{context}`` and ``{candidate}``;
    ``steps_request`` asks the model for the evaluation steps (auto chain-of-thought).
    """

    text: str
    steps_request: str
    criteria: str
    scores: tuple[int, ...] = (1, 2, 3, 4, 5)
    name: str = "geval"

    @property
    def key(self) -> str:
        h = hashlib.sha1(repr((self.text, self.steps_request, self.criteria, self.scores)).encode())
        return f"{self.name}-{h.hexdigest()[:8]}"


# ---------------------------------------------------------------------------- pairwise
_SUMMEVAL = ("Article: {context}\n\nSummary A: {a}\n\nSummary B: {b}\n\n"
             "Which Summary {q}, Summary A or Summary B?")
_DIALOGUE = ("Dialogue: {context}\n\nResponse A: {a}\n\nResponse B: {b}\n\n"
             "Which Response {q}, Response A or Response B?")
_STORY = "Prompt: {context}\n\nStory A: \n{a}\n\nStory B: \n{b}\n\nWhich story {q}, Story A or Story B?"
_DATA2TEXT = ("Data: {context}\n\nText A: {a}\n\nText B: {b}\n\nWhich Text {q}, Text A or Text B?")

_QUESTIONS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    # PoE Table 4 gives SummEval COH/CON, TopicalChat CNT/NAT and HANNA SUR/CMP verbatim;
    # the other aspects follow the same pattern ("only the attribute is changed").
    "summeval": (_SUMMEVAL, {
        "coherence": "is more coherent",
        "consistency": "is more consistent to the article",
        "fluency": "is more fluent",
        "relevance": "is more relevant to the article",
    }),
    "newsroom": (_SUMMEVAL, {
        "coherence": "is more coherent",
        "fluency": "is more fluent",
        "informativeness": "is more informative",
        "relevance": "is more relevant to the article",
    }),
    "topicalchat": (_DIALOGUE, {
        "coherence": "is more coherent",
        "engagingness": "is more engaging",
        "groundedness": "is better grounded in the facts",
        "naturalness": "appears more natural",
        "understandability": "is more understandable",
        "overall": "continues the dialogue better",
    }),
    "personachat": (_DIALOGUE, {
        "understandable": "is more understandable",
        "natural": "appears more natural",
        "maintains_context": "maintains the context better",
        "engaging": "is more engaging",
        "uses_knowledge": "uses the knowledge better",
        "overall": "continues the dialogue better",
    }),
    "hanna": (_STORY, {
        "relevance": "is more relevant to the prompt",
        "coherence": "is more coherent",
        "empathy": "shows more empathy",
        "surprise": "is more surprising",
        "engagement": "is more engaging",
        "complexity": "is more complex",
    }),
    "webnlg2017": (_DATA2TEXT, {
        "fluency": "is more fluent",
        "grammar": "is more grammatical",
        "semantics": "describes the data more faithfully",
    }),
    "webnlg2020": (_DATA2TEXT, {
        "correctness": "is more correct with respect to the data",
        "data_coverage": "covers the data better",
        "fluency": "is more fluent",
        "relevance": "is more relevant to the data",
        "text_structure": "has a better text structure",
    }),
}

TEMPLATES: dict[tuple[str, str], PairwiseTemplate] = {
    (ds, aspect): PairwiseTemplate(text.replace("{q}", q), name=f"{ds}-{aspect}")
    for ds, (text, qs) in _QUESTIONS.items() for aspect, q in qs.items()
}
"""Built-in pairwise templates by ``(dataset, aspect)``."""

ZEPO_SEED = PairwiseTemplate(
    "Source text: {context}\n\nSummary candidate A: {a}\n\nSummary candidate B: {b}\n\n"
    "Which summary candidate has better {aspect}? If the candidate A is better, please return 'A'. "
    "If the candidate B is better, please return 'B'. You must return the choice only.",
    name="zepo-seed")
"""ZEPO's seed instruction (zepo-fairer-preferences Fig. 1); ``{aspect}`` is filled by :func:`pairwise_template`."""


def pairwise_template(dataset: str, aspect: str, *, style: str = "poe", labels=None,
                      answer_prefix: str = "") -> PairwiseTemplate:
    """The built-in template for ``dataset`` and ``aspect``.

    Args:
        dataset: a name of :data:`jaxrank.data.DATASETS`.
        aspect: one of its human-score aspects.
        style: ``"poe"`` (PoE Table 4 style) or ``"zepo"`` (ZEPO's seed instruction).
        labels: override the label words (default ``("A", "B")``).
        answer_prefix: e.g. ``"Answer:"`` for base (non-chat) models.

    Raises:
        ValueError: unknown data set, aspect or style (lists the known ones).
    """
    if style == "zepo":
        t = dataclasses.replace(ZEPO_SEED, text=ZEPO_SEED.text.replace("{aspect}", aspect),
                                name=f"zepo-{dataset}-{aspect}")
    elif style == "poe":
        if (dataset, aspect) not in TEMPLATES:
            known = sorted({d for d, _ in TEMPLATES})
            if dataset not in known:
                raise ValueError(f"no template for data set {dataset!r}; known: {', '.join(known)}")
            aspects = sorted(a for d, a in TEMPLATES if d == dataset)
            raise ValueError(f"no template for aspect {aspect!r} of {dataset}; known: {', '.join(aspects)}")
        t = TEMPLATES[(dataset, aspect)]
    else:
        raise ValueError(f"style must be 'poe' or 'zepo', got {style!r}")
    if labels is not None:
        t = dataclasses.replace(t, labels=tuple(labels))
    if answer_prefix:
        t = dataclasses.replace(t, answer_prefix=answer_prefix)
    return t


# --------------------------------------------------------------------------- pointwise
G_EVAL_CRITERIA: dict[str, str] = {
    # g-eval §2 (the SummEval criteria of the G-Eval prompts).
    "coherence": "Coherence (1-5) - the collective quality of all sentences. We align this dimension with "
                 "the DUC quality question of structure and coherence whereby \"the summary should be "
                 "well-structured and well-organized. The summary should not just be a heap of related "
                 "information, but should build from sentence to sentence to a coherent body of information "
                 "about a topic.\"",
    "consistency": "Consistency (1-5) - the factual alignment between the summary and the summarized source. "
                   "A factually consistent summary contains only statements that are entailed by the source "
                   "document. Annotators were also asked to penalize summaries that contained hallucinated facts.",
    "fluency": "Fluency (1-5): the quality of the summary in terms of grammar, spelling, punctuation, word "
               "choice, and sentence structure.",
    "relevance": "Relevance (1-5) - selection of important content from the source. The summary should include "
                 "only important information from the source document. Annotators were instructed to penalize "
                 "summaries which contained redundancies and excess information.",
}


def pointwise_template(aspect: str, *, criteria: str | None = None, kind: str = "summary",
                       chain_of_thought: bool = True) -> PointwiseTemplate:
    """A G-Eval template (g-eval §2) for ``aspect``; ``criteria`` overrides the built-in text.

    ``chain_of_thought=False`` leaves the evaluation steps out of the prompt
    (the G-Eval paper's "without CoT" ablation, g-eval Table 1): a judge then
    never asks the model for them.
    """
    if criteria is None:
        if aspect not in G_EVAL_CRITERIA:
            raise ValueError(f"no built-in criteria for aspect {aspect!r} (known: "
                             f"{', '.join(G_EVAL_CRITERIA)}); pass criteria=")
        criteria = G_EVAL_CRITERIA[aspect]
    if not isinstance(chain_of_thought, bool):
        raise ValueError(f"chain_of_thought must be True or False, got {chain_of_thought!r}")
    task = (f"You will be given one {kind} written for a source text.\n\n"
            f"Your task is to rate the {kind} on one metric.\n\n")
    steps_request = task + f"Evaluation Criteria:\n\n{criteria}\n\nEvaluation Steps:\n\n" \
        "Write the evaluation steps as a short numbered list."
    steps = "Evaluation Steps:\n\n{steps}\n\n" if chain_of_thought else ""
    text = (task + "Evaluation Criteria:\n\n{criteria}\n\n" + steps +
            "Source Text:\n\n{context}\n\n" + kind.capitalize() + ":\n\n{candidate}\n\n"
            f"Evaluation Form (scores ONLY):\n\n- {aspect.capitalize()}:")
    return PointwiseTemplate(text, steps_request, criteria,
                             name=f"geval-{aspect}" if chain_of_thought else f"geval-{aspect}-nocot")
