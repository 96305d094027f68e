"""Text-only pairwise judges: sampled decisions and any Python callable (METHODS.md §1, eq. 4-5).

When a judge returns text rather than label probabilities, the probability
that A is better is estimated from ``K`` sampled answers
(llm-comparative-assessment eq. 4-5):

``p = (1/K) sum_k f(text_k)``,  ``f = 1`` for an answer naming A, ``0`` for B, ``1/2`` for neither.

* :class:`SamplingJudge` samples the ``K`` answers from a local decoder with
  :func:`~jaxrank.models.llama.generate` (temperature / nucleus
  sampling), rendering prompts exactly as :class:`~jaxrank.judges.pairwise.PromptJudge`
  does; the ``K`` samples of a batch of comparisons go through one ``generate``
  call (left-padded prompts, rows padded to a static batch).
* :class:`CallableJudge` wraps any function from prompts to probabilities or
  to texts (an API client, a cache file): prompts come from
  :meth:`PairwiseTemplate.render`, no tokenizer needed.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from typing import Callable, Sequence

import numpy as np

from jaxrank.judges.pairwise import Judgement, PromptJudge, check_pairs
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.judges.reading import MIN_LABEL_MASS, check_label_mass
from jaxrank.judges.textgen import SAMPLING_SCHEME, check_sampling, check_seed, generate_texts, row_keys

__all__ = ["SamplingJudge", "CallableJudge", "label_parser", "parser_key", "ParserKeyWarning", "GENERIC_TEMPLATE"]

GENERIC_TEMPLATE = PairwiseTemplate(
    "Context: {context}\n\nCandidate A: {a}\n\nCandidate B: {b}\n\nWhich candidate is better, A or B? "
    "Answer with A or B only.", name="generic")
"""Default prompt of :class:`CallableJudge`."""


def label_parser(labels: Sequence[str] = ("A", "B")) -> Callable[[str], float | None]:
    """A parser ``text -> 1.0 (A) | 0.0 (B) | None (neither)`` for two label words.

    The decision is the label that occurs first as a whole word (case-sensitive:
    ``"A"`` must not match the article ``"a"``). When neither label occurs and
    they are several words that differ in their last word (``"Summary A"`` /
    ``"Summary B"``), the last words are searched the same way.

    Limitation: a label that is also an English word is read wherever it stands
    as one, so with the labels ``("A", "B")`` the capitalised article of
    ``"A better summary is B."`` reads as A. No rule on the following word tells
    the two apart (``"A is better than B."`` names A the same way, and ``"A
    better"`` may be a sentence-initial article or a clipped "A, better"): ask
    for the label alone in the prompt, use labels that are no words
    (``("Summary 1", "Summary 2")``, read by their last words), or pass a parser
    of your own.
    """
    la, lb = (str(x) for x in labels)
    if la == lb:
        raise ValueError(f"labels must differ, got {labels!r}")

    def pattern(w):
        return re.compile(r"(?<!\w)" + re.escape(w) + r"(?!\w)")

    stages = [(pattern(la), pattern(lb))]
    ta, tb = la.split()[-1:], lb.split()[-1:]
    if ta and tb and ta != tb and (ta[0], tb[0]) != (la, lb):
        stages.append((pattern(ta[0]), pattern(tb[0])))

    def parse(text: str) -> float | None:
        for pa, pb in stages:
            ma, mb = pa.search(text or ""), pb.search(text or "")
            if ma or mb:
                if ma and (not mb or ma.start() <= mb.start()):
                    return 1.0
                return 0.0
        return None

    parse.key = f"label_parser{(la, lb)!r}"      # its identity in a store key (parser_key)
    return parse


_SIMPLE = (str, int, float, bool, type(None))


_KEY_WARNED: set[str] = set()


def parser_key(parser: Callable) -> str:
    """The identity of an answer parser, for a judge's store key.

    A parser's ``key`` attribute when it has one (:func:`label_parser` sets
    ``"label_parser('A', 'B')"``); else its module and qualified name, plus, for
    a Python function, a hash of its code (bytecode and constants, nested
    functions included) and of the values it closes over when they are plain
    (strings, numbers, tuples, lists and dicts of them, compiled regular
    expressions, functions), so two lambdas of one module or one
    factory's closures over other words differ. Give a parser a ``key``
    attribute for a key that survives edits of its code that do not change
    what it reads.

    Warns (:class:`ParserKeyWarning`, once per parser name) when the key cannot
    tell what the parser reads: it closes over other values (a dict, a compiled
    regex), is a bound method or a callable object whose state is not hashed,
    or is not a Python function: two such parsers that read answers differently
    would share their stored judgements. Set ``parser.key`` to a string naming
    what it reads.
    """
    key = getattr(parser, "key", None)
    if isinstance(key, str) and key:
        return key
    fn = parser if hasattr(parser, "__code__") else getattr(type(parser), "__call__", parser)
    name = f"{getattr(parser, '__module__', None) or type(parser).__module__}." \
           f"{getattr(parser, '__qualname__', None) or type(parser).__qualname__}"
    code = getattr(fn, "__code__", None)
    if code is None:
        _warn_key(name, "it is not a Python function")
        return name

    def plain(v):
        return isinstance(v, _SIMPLE) or (isinstance(v, (tuple, list, frozenset)) and all(plain(x) for x in v)) \
            or (isinstance(v, dict) and all(plain(k) and plain(x) for k, x in v.items()))

    def code_id(c):
        consts = [code_id(x) if hasattr(x, "co_code") else repr(x) if plain(x) else type(x).__qualname__
                  for x in c.co_consts]
        return (c.co_code, consts, c.co_names)

    cells, opaque = [], []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:                  # an empty cell
            v = None
        if plain(v):
            cells.append(repr(v))
        elif isinstance(v, re.Pattern):
            cells.append(repr(("re", v.pattern, v.flags)))
        elif callable(v) and hasattr(v, "__code__") and not hasattr(v, "__self__"):
            cells.append(parser_key(v))     # a function it calls: its own key
        else:
            cells.append(type(v).__qualname__)
            opaque.append(type(v).__qualname__)
    if fn is not parser and not hasattr(parser, "__code__"):
        opaque.append(f"the state of its {type(parser).__qualname__} object")
    elif getattr(parser, "__self__", None) is not None and not plain(parser.__self__):
        opaque.append(f"the state of its {type(parser.__self__).__qualname__} object")
    if opaque:
        _warn_key(name, f"its key does not cover {', '.join(dict.fromkeys(opaque))}")
    h = hashlib.sha1(repr((code_id(code), cells)).encode()).hexdigest()[:8]
    return f"{name}-{h}"


class ParserKeyWarning(UserWarning):
    """A parser's store key (:func:`parser_key`) may not tell it from another parser."""


def _warn_key(name: str, why: str) -> None:
    if name in _KEY_WARNED:
        return
    _KEY_WARNED.add(name)
    warnings.warn(f"parser {name}: {why}, so parsers that read answers differently may share one store key "
                  "and each other's stored judgements; set parser.key = '<a name for what it reads>'",
                  ParserKeyWarning, stacklevel=3)


def _decide(texts: Sequence[Sequence[str]], parser) -> tuple[np.ndarray, np.ndarray, int]:
    """``(p [R], counts [R, 2], undecided)`` from ``R`` lists of answers (eq. 4-5)."""
    counts = np.zeros((len(texts), 2), np.float64)
    p = np.zeros(len(texts), np.float64)
    undecided = 0
    for r, answers in enumerate(texts):
        if len(answers) == 0:
            raise ValueError(f"comparison {r} has no answers")
        total = 0.0
        for t in answers:
            v = parser(t)
            if v is None:
                undecided += 1
                v = 0.5
            else:
                v = float(v)
                if not 0.0 <= v <= 1.0:
                    raise ValueError(f"the parser returned {v} for {t!r}; expected 1 (A), 0 (B) or None")
                counts[r] += (v, 1.0 - v)
            total += v
        p[r] = total / len(answers)
    return p.astype(np.float32), counts.astype(np.float32), undecided


class SamplingJudge:
    """Text-only pairwise judge: ``p`` = fraction of ``K`` sampled answers that choose A (eq. 4-5).

    Prompts are :class:`~jaxrank.judges.pairwise.PromptJudge`'s (chat template,
    context truncation), without the label words' shared leading tokens: the
    model answers freely and ``parser`` reads the answer (default
    :func:`label_parser` of the template's labels). Answers naming neither label
    count 1/2 and are counted in :attr:`undecided`. Each comparison's ``K``
    prompts are consecutive rows; ``batch_size`` comparisons (``batch_size * K``
    rows) go through one :func:`generate` call. Sample ``s`` of a comparison
    samples with its own key, ``fold_in(PRNGKey(seed), hash(context, text A,
    text B, s))`` (:func:`~jaxrank.judges.textgen.row_keys`): its answers are
    the same whatever the batching or the call it comes in, and differ between
    comparisons and between the two orders of one pair.

    The store key (:attr:`template_key`, :attr:`fingerprint`, :attr:`name`)
    covers the template, the system message, the parser, the model, ``K``, the
    temperature, ``top_p``, ``max_new_tokens``, the seed and the sampling scheme.

    ``Judgement.logits`` holds the counts ``[R, 2]`` of answers for A and for B,
    and ``Judgement.label_mass`` the share of each comparison's answers that
    name a label: below ``min_parsed`` the judge warns once with the answers
    (``strict=True``: raises :class:`~jaxrank.judges.reading.LabelMassError`).

    Args:
        model: a :class:`~jaxrank.models.loading.LoadedModel` or a name / path (a decoder).
        template: the comparative prompt.
        num_samples: ``K``.
        temperature, top_p: sampling settings (``temperature=0``: greedy, ``K`` identical answers).
        max_new_tokens: answer length limit.
        seed: PRNG seed, an int in ``[0, 2**32)``.
        parser: ``str -> 1.0 | 0.0 | None`` (or any value in [0, 1]).
        chat, system, batch_size, max_length: as for ``PromptJudge``.
        min_parsed: the share of parseable answers below which the judge warns.
        strict: raise instead of warning.

    Raises:
        ValueError: ``num_samples < 1``, ``max_new_tokens < 1``, a negative or infinite
            ``temperature``, ``top_p`` outside ``(0, 1]``, or ``seed`` outside ``[0, 2**32)``
            (a larger seed would wrap onto a smaller one's answers under its own store key).
        NotImplementedError: a T5 model with ``temperature > 0`` (T5 decodes greedily only).
    """

    def __init__(self, model, template: PairwiseTemplate, *, num_samples: int = 10, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 8, seed: int = 0,
                 parser: Callable[[str], float | None] | None = None, chat: bool | None = None,
                 system: str | None = None, batch_size: int = 4, max_length: int | None = None,
                 min_parsed: float = MIN_LABEL_MASS, strict: bool = False):
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        check_sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        seed = check_seed(seed)
        self.prompt = PromptJudge(model, template, chat=chat, system=system, batch_size=batch_size,
                                  max_length=max_length)
        self.lm = self.prompt.lm
        if not self.prompt.decoder and temperature > 0:
            raise NotImplementedError("t5 generation is greedy only: SamplingJudge with a t5 model needs "
                                      "temperature=0")
        self.template = template
        self.num_samples, self.max_new_tokens = int(num_samples), int(max_new_tokens)
        self.temperature, self.top_p, self.seed = float(temperature), float(top_p), int(seed)
        self.batch_size = int(batch_size)
        self.parser = parser or label_parser(template.labels)
        self.undecided = 0
        self._warned = False
        self.min_parsed, self.strict = float(min_parsed), bool(strict)
        self._parse_warned = False

    @property
    def name(self) -> str:
        """Judge id: the model name, ``-sampled``, ``K`` and the temperature."""
        return f"{self.prompt.name}-sampled-k{self.num_samples}-t{self.temperature:g}"

    @property
    def fingerprint(self) -> str:
        """The model's fingerprint (:attr:`PromptJudge.fingerprint`); sampling settings are in :attr:`name`."""
        return f"{self.prompt.fingerprint}-n{self.max_new_tokens}-s{self.seed}-p{self.top_p:g}"

    @property
    def template_key(self) -> str:
        """The store's template key: the template's key, and a hash of the sampling scheme
        (:data:`~jaxrank.judges.textgen.SAMPLING_SCHEME`: one key per sampled row, so answers stored under
        the former one key per batch are never reused) and of what else makes the prompt and reads the
        answer where it is set: the system message, the parser's identity (:func:`parser_key`) where it is
        not the default :func:`label_parser` of the template's labels, and ``chat`` where it differs from
        the model's default."""
        pj = self.prompt
        extra = {"sampling": SAMPLING_SCHEME}
        if pj.system is not None:
            extra["system"] = pj.system
        pk = parser_key(self.parser)
        if pk != parser_key(label_parser(self.template.labels)):
            extra["parser"] = pk
        if pj.chat != bool(pj.lm.chat_template):
            extra["chat"] = pj.chat
        h = hashlib.sha1(repr(sorted(extra.items())).encode()).hexdigest()[:6]
        return f"{self.template.key}-{h}"

    def token_rows(self, context: str, candidates: Sequence[str], i, j) -> tuple[list[list[int]], bool]:
        """One prompt (the whole text's token ids, up to the answer and its prefix, if any) per comparison,
        and whether the context had to be cut to leave room for the answer."""
        pj = self.prompt
        i, j = check_pairs(candidates, i, j)
        pj._warned = self._warned
        rows, truncated = pj.prompt_rows(context, candidates, i, j, extra=self.max_new_tokens)
        self._warned = self._warned or truncated
        return rows, truncated

    def sample_texts(self, context: str, candidates: Sequence[str], i, j) -> tuple[list[list[str]], bool]:
        """The ``K`` answers ``[R][K]`` of every comparison, and whether the context was cut."""
        rows, truncated = self.token_rows(context, candidates, i, j)
        if not rows:
            return [], truncated
        k = self.num_samples
        flat = [r for r in rows for _ in range(k)]
        i, j = check_pairs(candidates, i, j)
        keys = row_keys(self.seed, [(context, candidates[a], candidates[b], s)
                                    for a, b in zip(i.tolist(), j.tolist()) for s in range(k)])
        texts = generate_texts(self.lm, flat, batch_rows=self.batch_size * k, max_new_tokens=self.max_new_tokens,
                               temperature=self.temperature, top_p=self.top_p, keys=keys)
        return [texts[r * k:(r + 1) * k] for r in range(len(rows))], truncated

    def compare(self, context: str, candidates: Sequence[str], i, j) -> Judgement:
        """``p = P(candidates[i] better)`` as the fraction of sampled answers for A.

        Returns:
            :class:`Judgement` with ``p [R]`` and ``logits`` = answer counts ``[R, 2]`` (A, B).

        Raises:
            ValueError: an index out of range or an empty candidate text.
        """
        texts, truncated = self.sample_texts(context, candidates, i, j)
        if not texts:
            return Judgement(np.zeros(0, np.float32), truncated, np.zeros((0, 2), np.float32), np.zeros(0, np.float32))
        p, counts, und = _decide(texts, self.parser)
        self.undecided += und
        parsed = (counts.sum(1) / self.num_samples).astype(np.float32)
        if (parsed < self.min_parsed).any():
            worst = int(np.argmin(parsed))
            given = check_label_mass(
                parsed, threshold=self.min_parsed, strict=self.strict, warn=not self._parse_warned,
                who=f"judge {self.name}, template {self.template.name}", labels=self.template.labels,
                top="answers " + "; ".join(repr(t[:40]) for t in texts[worst][:3]),
                remedy="Its p counts answers that name neither label as 1/2: ask for the label only, "
                       "or use another parser or model.", stacklevel=3)
            self._parse_warned = self._parse_warned or given
        return Judgement(p, truncated, counts, parsed)


class CallableJudge:
    """Any Python callable as a pairwise judge.

    ``fn`` receives the rendered prompts of one call (``template.render(context,
    a, b)``, plus ``"\\n\\n" + answer_prefix`` when the template has one) and
    returns, for ``kind="probability"``, one ``P(A better)`` per prompt; for
    ``kind="text"``, one answer per prompt (called ``num_samples`` times) or a
    list of answers per prompt (called once), parsed to A / B / neither
    (eq. 4-5: ``p`` = the mean of 1 for A, 0 for B, 1/2 for neither; neither is
    counted in :attr:`undecided`).

    ``Judgement.logits``: ``(log p, log(1 - p))`` (clipped at ``1e-12``) for
    probabilities, the answer counts ``[R, 2]`` for texts.

    Args:
        fn: ``list[str] -> list[float]`` or ``-> list[str] | list[list[str]]``.
        template: the comparative prompt (default :data:`GENERIC_TEMPLATE`).
        name: the judge id (stored with the judgements).
        fingerprint: what the function is, for the store's keys (e.g. the model
            and version it calls): judgements stored under another fingerprint are
            not reused. Default ``""``: the function is identified by ``name`` only.
        kind: ``"probability"`` or ``"text"``.
        parser: text parser (default :func:`label_parser` of the template's labels).
        num_samples: calls per comparison set when ``fn`` returns one text per prompt.
        batch_size: prompts per call (default: all comparisons of a ``compare`` call at once).

    Raises:
        ValueError: (on ``compare``) a result of the wrong length, a probability
            that is NaN or outside [0, 1], or an answer that is not a string;
            the message names the prompt index and the value.
    """

    def __init__(self, fn: Callable, template: PairwiseTemplate | None = None, *, name: str,
                 fingerprint: str = "", kind: str = "probability", parser: Callable[[str], float | None] | None = None,
                 num_samples: int = 1, batch_size: int | None = None):
        if kind not in ("probability", "text"):
            raise ValueError(f"kind must be 'probability' or 'text', got {kind!r}")
        if not callable(fn):
            raise TypeError("fn must be callable")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.fn, self.kind, self.name, self.fingerprint = fn, kind, str(name), str(fingerprint)
        self.template = template or GENERIC_TEMPLATE
        self.parser = parser or label_parser(self.template.labels)
        self.num_samples, self.batch_size = int(num_samples), batch_size
        self.undecided = 0

    @property
    def template_key(self) -> str:
        """The store's template key: the template's key, plus a hash of the parser's identity
        (:func:`parser_key`) for ``kind="text"`` with a parser other than the default :func:`label_parser`
        of the template's labels (answers read another way are other judgements), and ``-k{num_samples}`` for
        ``kind="text"`` with more than one call per comparison set (``p`` is then a share of that many answers;
        the default of one call keeps the bare key, so results stored before are found)."""
        if self.kind != "text":
            return self.template.key
        key = self.template.key
        pk = parser_key(self.parser)
        if pk != parser_key(label_parser(self.template.labels)):
            key = f"{key}-{hashlib.sha1(repr([('parser', pk)]).encode()).hexdigest()[:6]}"
        return key if self.num_samples == 1 else f"{key}-k{self.num_samples}"

    def prompts(self, context: str, candidates: Sequence[str], i, j) -> list[str]:
        """The prompt text of every comparison."""
        i, j = check_pairs(candidates, i, j)
        t = self.template
        tail = "\n\n" + t.answer_prefix if t.answer_prefix else ""
        return [t.render(context, candidates[a], candidates[b]) + tail for a, b in zip(i, j)]

    def _call(self, prompts: list[str]) -> list:
        bs = self.batch_size or max(len(prompts), 1)
        out: list = []
        for start in range(0, len(prompts), bs):
            chunk = prompts[start:start + bs]
            res = list(self.fn(chunk))
            if len(res) != len(chunk):
                raise ValueError(f"judge {self.name!r} returned {len(res)} results for {len(chunk)} prompts")
            out.extend(res)
        return out

    def compare(self, context: str, candidates: Sequence[str], i, j) -> Judgement:
        """``p = P(candidates[i] better)`` for every comparison, from ``fn``."""
        prompts = self.prompts(context, candidates, i, j)
        if not prompts:
            return Judgement(np.zeros(0, np.float32), False, np.zeros((0, 2), np.float32))
        if self.kind == "probability":
            raw = self._call(prompts)
            p = np.zeros(len(raw), np.float64)
            for r, v in enumerate(raw):
                try:
                    x = float(v)
                except (TypeError, ValueError):
                    raise ValueError(f"judge {self.name!r}: result {r} is {v!r}, not a probability") from None
                if not np.isfinite(x) or not 0.0 <= x <= 1.0:
                    raise ValueError(f"judge {self.name!r}: result {r} is {v!r}; probabilities must be in [0, 1]")
                p[r] = x
            q = np.clip(np.stack([p, 1 - p], -1), 1e-12, 1.0)
            return Judgement(p.astype(np.float32), False, np.log(q).astype(np.float32))
        first = self._call(prompts)
        if all(isinstance(x, (list, tuple)) for x in first):
            texts = [list(x) for x in first]
        else:
            texts = [[x] for x in first]
            for _ in range(self.num_samples - 1):
                for r, x in enumerate(self._call(prompts)):
                    texts[r].append(x)
        for r, answers in enumerate(texts):
            for x in answers:
                if not isinstance(x, str):
                    raise ValueError(f"judge {self.name!r}: answer for prompt {r} is {x!r}, not a string")
        p, counts, und = _decide(texts, self.parser)
        self.undecided += und
        return Judgement(p, False, counts)
