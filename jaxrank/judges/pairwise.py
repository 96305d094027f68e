"""Prompt-based pairwise classifier: ``p = P(A better)`` from the label continuations (METHODS.md §1).

``p = P(L_A) / (P(L_A) + P(L_B)) = sigmoid(log P(L_A) - log P(L_B))``
(llm-comparative-assessment eq. 3), each label ``L_k`` scored as the whole
continuation the model would write after the prompt (the sum of its tokens'
log-probabilities, :mod:`jaxrank.judges.reading`), from full-vocabulary
log-probabilities at the answer position. Every judgement also carries the
**label mass** ``P(L_A) + P(L_B)``, the share of the model's answer the labels
hold, and the model's top next tokens there: a judge whose labels hold less
than ``min_label_mass`` warns once with those tokens (``strict=True``
refuses), since its ``p`` compares two answers the model hardly gives. An
answer prefix (``"Summary"`` for a model that writes ``"Summary A"``) goes into
the assistant turn; ``answer_prefix="auto"`` finds it from the model's own
greedy answers on a few pairs (:meth:`PromptJudge.prepare`).

The prompt is rendered to one text and tokenised whole, so the model reads
exactly the tokenizer's ids of that text. Decoders (Llama family) share the
context: the key/value cache levels are the longest common token prefixes of a
context's prompts (:func:`~jaxrank.judges.reading.shared_split`): the prefix
(chat header, instruction, article) is encoded once per context, then once per
candidate A, and every comparison runs only its own tokens (candidate B, the
question, the assistant header, the label's shared tokens) against the shared
cache, in batches padded to a few length buckets so shapes do not recompile,
cut where they run the fewest padded tokens (:func:`plan_batches`).
Encoder-decoders (T5) encode each prompt (bidirectional attention cannot share
a prefix) and read the decoder's first step.

Prompts longer than the model's context window keep the candidates and the
question whole and truncate the context (the article) from its end, each
prompt only as far as it needs (so a comparison's ``p`` never depends on the
other comparisons of its call; rows cut alike share their caches); the
judgement then carries ``truncated=True`` and a warning says so once.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._buckets import ACCELERATOR_BATCH_COST, BUCKETS, batch_sizes, bucket, plan_batches
from jaxrank.judges._forward import read_decoder, read_t5, rows_per_call
from jaxrank.judges._pairwise_templates import (_SENT_A, _SENT_B, compare_soft, compare_templates, label_tokens,
                                                render_frame)
from jaxrank.judges._truncation import fit_each
from jaxrank.judges.answer_prefix import find_answer_prefix
from jaxrank.judges._pointwise_checks import fixed
from jaxrank.judges.judgement import AnswerPrefixChoice, Judgement, _empty, check_pairs
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.judges.reading import (MIN_LABEL_MASS, LabelContinuations, check_label_mass, cut_text,
                                    format_top_tokens, label_continuations, shared_split, whole_text_ids)
from jaxrank.models.llama_config import judge_max_length
from jaxrank.models.loading import GENERATIVE, load_model
from jaxrank.models.partition import shard_model

CPU_BATCH_SIZE = 8
"""``batch_size="auto"`` on a CPU: a forward pass costs its padded tokens there, so small batches planned
for the fewest padded tokens are as fast as large ones (``ACCELERATOR_BATCH_COST``'s note)."""
ACCELERATOR_NOMINAL_BATCH = 64
"""``judge.batch_size`` on an accelerator with ``batch_size="auto"`` where no call sets it (sampled
answers); each judging call sizes its batches from the device memory free then."""

__all__ = ["PromptJudge", "Judgement", "AnswerPrefixChoice", "bucket", "plan_batches", "batch_sizes", "BUCKETS",
           "ACCELERATOR_BATCH_COST", "READING_VERSION"]

READING_VERSION = "whole-continuation-1"
"""How a :class:`PromptJudge` reads the answer; part of its ``template_key``, so judgements read another way
(the first differing label token of piecewise-tokenised prompts, before) are never mixed with these."""



class PromptJudge:
    """A pairwise LLM judge (prompt-based classifier).

    Args:
        model: a :class:`~jaxrank.models.LoadedModel` or anything
            :func:`~jaxrank.models.load_model` takes (``"smollm2-135m"``, a path).
        template: the comparative prompt (:func:`~jaxrank.judges.pairwise_template`).
        chat: wrap the prompt in the model's chat template (default: when it has one).
        system: optional system message for the chat template.
        batch_size: rows per forward pass (at most), or ``"auto"`` (the default): 8 on a CPU; on an
            accelerator, per call, the most rows whose caches and activations fit in 60% of the device
            memory free then (up to 256; ``_forward.rows_per_call``).
        batch_cost: tokens' worth of fixed cost per forward call when planning
            batches (:func:`plan_batches`); ``"auto"``: 0 on a CPU,
            :data:`ACCELERATOR_BATCH_COST` on an accelerator (few, full batches).
        cache_dtype: dtype of the key/value caches (decoders); ``"auto"``: the
            weights' dtype when they are low precision and the judge runs on an
            accelerator (bfloat16 halves the cache there), else float32 (on a CPU
            bfloat16 elementwise work is emulated).
        max_length: context window to respect (default: the model's
            ``max_position_embeddings``; 512 for T5); above the model's window
            it is refused for LongRoPE and warned about otherwise
            (:func:`~jaxrank.models.llama_config.judge_max_length`).
        soft_prompt: optional learnt input vectors
            (:class:`~jaxrank.judges.soft_prompt.SoftPrompt`, decoders only),
            inserted into every comparison; the judge's name then carries their key.
        answer_prefix: text placed in the assistant turn before the label
            (prefill), overriding the template's; ``"auto"``: the words the model
            itself writes before the label, found by :meth:`prepare` on a few
            pairs of the first context judged (the choice is reported with a
            warning and recorded in :attr:`template_key`). ``None``: the template's.
        min_label_mass: the labels' share of the model's answer below which the
            judge warns once (:class:`~jaxrank.judges.reading.LabelMassWarning`),
            naming the model's top next tokens.
        strict: raise :class:`~jaxrank.judges.reading.LabelMassError` instead of warning.
        mesh: a :class:`jax.sharding.Mesh` with axes ``"data"`` and/or
            ``"model"`` (``jax.make_mesh((2, 4), ("data", "model"))``) to run a
            decoder over several devices: its weights split tensor-parallel over
            ``"model"`` (query heads and MLP columns, the key/value cache by heads;
            :mod:`jaxrank.models.partition`), the comparisons data-parallel over
            ``"data"`` (batches padded to multiples of its size). The judge runs a
            sharded copy of the weights (the model passed in is unchanged; drop it
            to free its memory); ``p`` is the single-device judge's up to float
            rounding. ``None``: one device.

    Raises:
        ValueError: a model without a tokenizer, an architecture that is not a
            generative judge (BERT), label words whose tokenisations do not differ,
            ``min_label_mass`` outside ``[0, 1]``, a ``mesh`` on an encoder-decoder
            (T5), a mesh whose ``"model"`` axis does not divide the attention
            heads or the MLP width, or a ``max_length`` past a LongRoPE model's window.
    """

    def __init__(self, model, template: PairwiseTemplate, *, chat: bool | None = None, system: str | None = None,
                 batch_size="auto", max_length: int | None = None, soft_prompt=None, batch_cost="auto",
                 cache_dtype="auto", answer_prefix: str | None = None, min_label_mass: float = MIN_LABEL_MASS,
                 strict: bool = False, mesh=None):
        if not hasattr(model, "model"):
            model = load_model(model)
        if model.tokenizer is None:
            raise ValueError(f"model {model.name} has no tokenizer; a prompt judge needs one")
        if model.architecture not in GENERATIVE:
            raise ValueError(f"{model.architecture} models are not generative; use SimilarityJudge for encoders")
        self.auto_batch = isinstance(batch_size, str) and batch_size == "auto"
        if self.auto_batch:
            batch_size = CPU_BATCH_SIZE if jax.default_backend() == "cpu" else ACCELERATOR_NOMINAL_BATCH
            self.auto_batch = jax.default_backend() != "cpu"
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be 'auto' or an int >= 1, got {batch_size!r}")
        if batch_cost == "auto":
            batch_cost = 0 if jax.default_backend() == "cpu" else ACCELERATOR_BATCH_COST
        if isinstance(batch_cost, bool) or not isinstance(batch_cost, (int, np.integer)) or batch_cost < 0:
            raise ValueError(f"batch_cost must be 'auto' or an int >= 0, got {batch_cost!r}")
        if not isinstance(min_label_mass, (int, float)) or not 0.0 <= float(min_label_mass) <= 1.0:
            raise ValueError(f"min_label_mass must be a number in [0, 1], got {min_label_mass!r}")
        if answer_prefix is not None and not isinstance(answer_prefix, str):
            raise ValueError(f"answer_prefix must be a string, 'auto' or None, got {answer_prefix!r}")
        self.batch_cost = int(batch_cost)
        if isinstance(cache_dtype, str) and cache_dtype == "auto":
            weights = model.model.weights() if hasattr(model.model, "weights") else {}
            low = weights.get("wq") is not None and weights["wq"].dtype != jnp.float32
            cache_dtype = weights["wq"].dtype if low and jax.default_backend() != "cpu" else None
        try:
            self.cache_dtype = None if cache_dtype is None else np.dtype(cache_dtype)
        except TypeError as e:
            raise ValueError(f"cache_dtype must be 'auto', None or a dtype, got {cache_dtype!r}") from e
        if self.cache_dtype is not None and not jnp.issubdtype(self.cache_dtype, jnp.floating):
            raise ValueError(f"cache_dtype must be a floating dtype, got {self.cache_dtype}")
        self.mesh, self._sharded = None, None
        if mesh is not None:
            if model.architecture == "t5":
                raise ValueError("mesh= shards decoder (Llama-family) judges; a T5 judge runs on one device "
                                 "(mesh=None)")
            sharded = shard_model(model.model, mesh)
            model = dataclasses.replace(model, model=sharded.model)     # same fingerprint, weights on the mesh
            self.mesh, self._sharded = sharded.mesh, sharded
        self.lm = model
        self.decoder = model.architecture != "t5"
        self._chat = bool(model.chat_template) if chat is None else bool(chat)
        if self._chat and not model.chat_template:
            raise ValueError(f"model {model.name} has no chat template; use chat=False")
        self._system = system
        self.batch_size = int(batch_size)
        self.max_length = judge_max_length(model.config, max_length)
        self.min_label_mass = float(min_label_mass)
        self.strict = bool(strict)
        self.answer_prefix_choice: AnswerPrefixChoice | None = None
        self._auto_prefix = answer_prefix == "auto"
        if answer_prefix is not None and not self._auto_prefix:
            template = dataclasses.replace(template, answer_prefix=answer_prefix)
        self._warned = False
        self._mass_warned = False
        self._set_template(template)
        self.soft_prompt = soft_prompt
        if soft_prompt is not None:
            soft_prompt.check_judge(self)

    def _set_template(self, template: PairwiseTemplate) -> None:
        self._template = template
        self._frame = self._render_frame()
        self._common, self._label_ids = self._label_tokens()
        eos = set(self.lm.eos_token_ids) | ({self.lm.tokenizer.eos_token_id}
                                            if self.lm.tokenizer.eos_token_id is not None else set())
        if self.decoder:
            self.reading = label_continuations(self.lm.tokenizer, self.prompt_text("context", "a", "b"),
                                               template.labels, add_special_tokens=self._special, drop=sorted(eos))
        else:      # T5 reads the decoder's first token: the first differing token (checked by _label_tokens)
            self.reading = LabelContinuations(((int(self._label_ids[0]),), (int(self._label_ids[1]),)),
                                              tuple(template.labels))

    # fixed when the judge is built: the frame, the labels' tokens and the store key are made from them
    # (a changed one would change template_key but not the prompt); with_template() gives another template
    template = fixed("template", "The prompt template (:meth:`with_template` gives the judge with another one).")
    system = fixed("system", "The system message (or ``None``).")
    chat = fixed("chat", "Whether the prompt goes through the model's chat template.")

    @property
    def runner(self):
        """What the forward passes call (``prefill``, ``extend``, ``logits_at``): the model, or on a mesh its
        :class:`~jaxrank.models.partition.ShardedLlama` (caches and batches pinned to their shardings)."""
        return self.lm.model if self._sharded is None else self._sharded

    def rows_per_call(self, cache_slots: int, new_tokens: int) -> int:
        """Rows a forward pass runs after ``cache_slots`` cached tokens with ``new_tokens`` new ones: the
        ``batch_size``, or with ``batch_size="auto"`` on an accelerator what fits the device memory free now."""
        return rows_per_call(self, self.runner, cache_slots, new_tokens)

    # ------------------------------------------------------------------ naming
    @property
    def name(self) -> str:
        """Judge id for the store: the model name (plus ``-nochat`` when a chat model is used raw)."""
        name = self.lm.name + ("" if self.chat or not self.lm.chat_template else "-nochat")
        return name if self.soft_prompt is None else f"{name}+{self.soft_prompt.key}"

    @property
    def fingerprint(self) -> str:
        """What the judge is, for the store's keys: the model's fingerprint (its checkpoint's weights and
        tokenizer, and the parameters' dtype; :attr:`~jaxrank.models.LoadedModel.fingerprint`) and the
        context window it cuts prompts to (``"...-float32-L8192"``), and the key/value caches' dtype when it is
        not float32 (``"...-L8192-kvbfloat16"``: a bfloat16 cache moves ``p`` in its 3rd-4th digit); a judge
        with float32 caches (the default on a CPU, and with float32 weights) keeps the key without it."""
        fp = f"{self.lm.fingerprint}-L{self.max_length}"
        if self.cache_dtype is not None and self.cache_dtype != np.float32:
            fp += f"-kv{self.cache_dtype.name}"
        return fp

    @property
    def template_key(self) -> str:
        """The store's template key: the template's key and a hash of how the answer is read.

        The hash covers :data:`READING_VERSION`, the system message and the label
        continuations' tokens, so judgements read another way never share a key.

        Raises:
            RuntimeError: ``answer_prefix="auto"`` not yet resolved (call :meth:`prepare`).
        """
        if self._auto_prefix and self.answer_prefix_choice is None:
            raise RuntimeError("the answer prefix is 'auto' and not chosen yet: call judge.prepare(context, "
                               "candidates) (judge_contexts does) before asking for the template key")
        h = hashlib.sha1(repr((READING_VERSION, self.system, self.reading.ids)).encode()).hexdigest()[:6]
        return f"{self.template.key}-{h}"

    # --------------------------------------------------------------- rendering
    def _render_frame(self) -> tuple[str, str, str]:
        """``(before_context, between_context_and_a, rest)``; ``rest`` holds the A/B sentinels."""
        return render_frame(self)

    @property
    def has_context(self) -> bool:
        """Whether the template shows the context (HANNA's story templates do not)."""
        return "{context}" in self.template.text

    @property
    def _special(self) -> bool:
        """Whether the tokenizer adds its special tokens: a raw decoder prompt gets BOS; chat templates
        write their own; T5 gets ``</s>`` appended by the judge."""
        return self.decoder and not self.chat

    def _encode(self, text: str, first: bool) -> list[int]:
        special = first and self._special
        return list(self.lm.tokenizer(text, add_special_tokens=special)["input_ids"]) if text else []

    def _label_tokens(self):
        """The first differing tokens of the two labels, each tokenised alone (the soft prompt's and T5's reading)."""
        return label_tokens(self)

    def prompt_text(self, context: str, a: str, b: str) -> str:
        """The exact text the model reads for one comparison, up to the answer position.

        It ends with the assistant header and the answer prefix, if any; the
        labels' tokens (:attr:`reading`) are what is scored after it.
        """
        before, between, rest = self._frame
        text = before + (context if self.has_context else "") + between + rest
        return text.replace(_SENT_A, a).replace(_SENT_B, b)

    def prompt_rows(self, context: str, candidates: Sequence[str], i, j, *, extra: int | None = None,
                    max_context_tokens: int | None = None) -> tuple[list[list[int]], bool]:
        """The token ids the model reads for each comparison: its whole prompt text, tokenised whole.

        A prompt that would not fit the window with ``extra`` more tokens (the
        labels' tokens; a generated answer) has its context cut from the end,
        on a token boundary, by as much as that prompt needs
        (:meth:`fitted_rows`): each comparison's prompt depends on its own texts
        only, never on the other comparisons asked for with it.

        Args:
            context, candidates: the texts.
            i, j: ``[R]`` candidate indices in positions A and B (checked by the caller).
            extra: tokens each row still needs after its prompt (default: the
                longest label continuation).
            max_context_tokens: keep at most this many context tokens.

        Returns:
            ``(rows, truncated)``.
        """
        rows, _, truncated = self.fitted_rows(context, candidates, i, j, extra=extra,
                                              max_context_tokens=max_context_tokens, stacklevel=4)
        return rows, truncated

    def fitted_rows(self, context: str, candidates: Sequence[str], i, j, *, extra: int | None = None,
                    max_context_tokens: int | None = None, stacklevel: int = 3):
        """:meth:`prompt_rows` with each row's cut: ``(rows, cuts, truncated)``, ``cuts[r]`` the context tokens
        row ``r`` keeps (``None``: all of them, up to ``max_context_tokens``), set by that row alone
        (:func:`~jaxrank.judges._truncation.fit_each`); warns once per judge when a row is cut."""
        extra = self.reading.width if extra is None else int(extra)
        tok = self.lm.tokenizer
        eos = [tok.eos_token_id] if not self.decoder and tok.eos_token_id is not None else []
        pairs = list(zip(np.asarray(i).tolist(), np.asarray(j).tolist()))

        def build(k, idx):
            ctx = context if k is None or not self.has_context else cut_text(tok, context, k)
            texts = [self.prompt_text(ctx, candidates[pairs[r][0]], candidates[pairs[r][1]]) for r in idx]
            return [r + eos for r in whole_text_ids(tok, texts, add_special_tokens=self._special)]

        rows = build(max_context_tokens, range(len(pairs)))
        if not rows:
            return rows, [], False

        def context_len():
            n = len(self._encode(context, False)) if self.has_context else 0
            return n if max_context_tokens is None else min(n, max(0, int(max_context_tokens)))

        return fit_each(rows, need=lambda row: len(row) + extra, max_length=self.max_length,
                        context_len=context_len, rebuild=build, warn=not self._warned,
                        kept="candidates and question", error_tail=": the candidates and question alone do not fit",
                        name_row=lambda r: f"row {r} (candidates {pairs[r][0]} and {pairs[r][1]})",
                        stacklevel=stacklevel)

    def token_ids(self, context: str, a: str, b: str, *, max_context_tokens: int | None = None):
        """``(prefix, a_part, b_part)`` of one comparison tokenised piece by piece (soft prompts only).

        The pieces (chat header and instruction; context; the text up to
        candidate A; candidate A up to candidate B; the rest) are tokenised
        apart, so a learnt soft prompt's vector slots sit at the same piece
        boundary in every comparison. Plain judging reads whole-text tokens
        (:meth:`prompt_rows`).
        """
        before, between, rest = self._frame
        ctx = self._encode(context, False) if self.has_context else []
        if max_context_tokens is not None:
            ctx = ctx[:max(0, max_context_tokens)]
        prefix = self._encode(before, True) + ctx + self._encode(between, False)
        cut = rest.index(_SENT_B)
        a_part = self._encode(rest[:cut].replace(_SENT_A, a), False)
        b_part = self._encode(rest[cut:].replace(_SENT_B, b).replace(_SENT_A, a), False) + self._common
        return prefix, a_part, b_part

    # ------------------------------------------------------------ answer prefix
    def find_answer_prefix(self, context: str, candidates: Sequence[str], *, pairs: int = 4,
                           max_new_tokens: int = 12) -> AnswerPrefixChoice:
        """The words the model writes before the label, from its greedy answers to a few pairs
        (:func:`~jaxrank.judges.answer_prefix.find_answer_prefix`)."""
        bare = copy.copy(self)                                   # the model answers after the bare header
        bare._auto_prefix = False
        bare._set_template(dataclasses.replace(self.template, answer_prefix=""))
        return find_answer_prefix(bare, context, candidates, pairs=pairs, max_new_tokens=max_new_tokens)

    def prepare(self, context: str, candidates: Sequence[str]) -> AnswerPrefixChoice | None:
        """Resolve ``answer_prefix="auto"`` on one context (the first one judged); a no-op otherwise.

        The chosen prefix goes into the template (so into :attr:`template_key`)
        and a ``UserWarning`` says what was chosen from which answers.
        """
        if not self._auto_prefix or self.answer_prefix_choice is not None:
            return self.answer_prefix_choice
        choice = self.find_answer_prefix(context, candidates)
        self._set_template(dataclasses.replace(self.template, answer_prefix=choice.prefix))
        self.answer_prefix_choice = choice
        seen = "; ".join(repr(a[:40]) for a in choice.answers[:3])
        what = (f"answer prefix {choice.prefix!r}, labels read as {self.reading.texts!r}" if choice.found else
                f"answer prefix {choice.prefix!r} (no answer named a label; the prompt names the candidates so), "
                f"labels read as {self.reading.texts!r}" if choice.from_prompt else
                "no answer prefix (no answer named a label, and the prompt names the candidates by the labels "
                "alone)")
        warnings.warn(f"{self.name}: chose {what} from the model's greedy answers ({seen})", UserWarning,
                      stacklevel=2)
        return choice

    # ------------------------------------------------------------------ judging
    def compare(self, context: str, candidates: Sequence[str], i, j, *, progress=None) -> Judgement:
        """``p = P(candidates[i] better than candidates[j])`` for every pair of one context.

        Args:
            context: the article / dialogue / prompt ("" when the template has none).
            candidates: the candidate texts.
            i, j: ``[R]`` indices into ``candidates`` for positions A and B.
            progress: optional callable, called with the number of comparisons
                finished after every batch (a progress bar's ``update``).

        Returns:
            :class:`Judgement` with ``p [R]``, the label log-probabilities, the
            label mass and the model's top next tokens.

        Raises:
            ValueError: an index out of range, or an empty candidate text.
            LabelMassError: ``strict=True`` and the labels hold less than
                ``min_label_mass`` of the model's answer.
        """
        i, j = check_pairs(candidates, i, j)
        if i.size == 0:
            return _empty()
        self.prepare(context, candidates)
        if self.soft_prompt is not None:      # the learnt vectors' own path (soft_prompt.py)
            return self._compare_soft(context, candidates, i, j, progress)
        rows, cuts, truncated = self.fitted_rows(context, candidates, i, j)
        self._warned = self._warned or truncated
        out = self._read(rows, list(zip(i.tolist(), cuts)), progress)     # rows cut alike share their A cache
        return self._judgement(*out, truncated)

    def _compare_soft(self, context, candidates, i, j, progress) -> Judgement:
        return compare_soft(self, context, candidates, i, j, progress)

    def _read(self, rows, groups, progress):
        if self.decoder:
            return read_decoder(self, shared_split(rows, groups), progress)
        return read_t5(self, rows, progress)

    def _judgement(self, logp, top_ids, top_probs, truncated) -> Judgement:
        logp = np.asarray(logp, np.float64)
        p = (1.0 / (1.0 + np.exp(logp[:, 1] - logp[:, 0]))).astype(np.float32)
        mass = np.exp(logp).sum(1).astype(np.float32)
        if mass.size and (mass < self.min_label_mass).any():
            worst = int(np.argmin(mass))
            given = check_label_mass(
                mass, threshold=self.min_label_mass, strict=self.strict, warn=not self._mass_warned,
                who=f"judge {self.name}, template {self.template.name}", labels=self.reading.texts,
                top=format_top_tokens(self.lm.tokenizer, top_ids[worst], top_probs[worst]),
                remedy="Its p compares answers the model hardly gives: set an answer prefix (PromptJudge("
                       "answer_prefix='auto') or the words it writes first), other labels, or another model "
                       "(`jaxrank judge --diagnose` shows the model's answers).", stacklevel=3)
            self._mass_warned = self._mass_warned or given
        return Judgement(p, truncated, logp.astype(np.float32), mass, np.asarray(top_ids, np.int32),
                         np.asarray(top_probs, np.float32))

    def with_template(self, template: PairwiseTemplate) -> "PromptJudge":
        """The same judge (model, chat, batch size, window, checks) with another template; nothing is reloaded.

        A template without an answer prefix takes this judge's (the one given as ``answer_prefix=``, its
        template's, or the one ``answer_prefix="auto"`` chose once :meth:`prepare` ran), so the templates of
        a prompt search are read alike (and :meth:`compare_templates` reads them so); a template with its own
        answer prefix keeps it; an unprepared "auto" judge gives an "auto" judge.
        """
        other = copy.copy(self)
        other._warned = False
        other._mass_warned = False
        if self._auto_prefix and self.answer_prefix_choice is None:        # unprepared: still "auto"
            other._auto_prefix = not template.answer_prefix
        elif not template.answer_prefix:                                   # this judge's prefix
            template = dataclasses.replace(template, answer_prefix=self.template.answer_prefix)
        else:                                                              # the template's own prefix
            other._auto_prefix = False
            other.answer_prefix_choice = None
        other._set_template(template)
        return other

    def compare_templates(self, templates: Sequence[PairwiseTemplate], context: str, candidates: Sequence[str],
                          i, j, *, progress=None) -> list[Judgement]:
        """Judge the same pairs under ``K`` templates sharing their prefix, as one batched job.

        The templates must render the same text up to candidate A (chat header,
        instruction before the context, the context, the text before ``{a}``),
        the same label words and answer prefix; they may differ after ``{a}``
        (ZEPO's instruction after the candidates). On a decoder the shared
        prefix is encoded once into one key/value cache, candidate A extends it
        once per distinct text, and the ``K x R`` remaining parts run in batches
        together (:func:`plan_batches`): the cost of the prefix is paid once
        instead of ``K`` times. Each result equals
        ``self.with_template(t).compare(context, candidates, i, j)``.

        Args:
            templates: the ``K`` candidate templates.
            context, candidates, i, j: as :meth:`compare`.
            progress: optional callable told of every finished batch (comparisons).

        Returns:
            ``K`` :class:`Judgement`, in the order of ``templates``.

        Raises:
            ValueError: no template, templates whose prefix, labels or answer
                prefix differ from the first's (names the template), or bad pairs.
        """
        return compare_templates(self, templates, context, candidates, i, j, progress)