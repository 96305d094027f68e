"""Prompt-based pairwise classifier: ``p = P(A better)`` from label-word logits (METHODS.md §1).

``p = softmax(logit_A, logit_B)[0] = sigmoid(logit_A - logit_B)`` with the
logits of the two label words' first differing token, read at the last real
position only (llm-comparative-assessment eq. 3): the output projection is a
``[2, D]`` slice of the head, never the full vocabulary over every position.

Decoders (Llama family) share the context: the prompt is cut before candidate
A, the prefix (chat header, instruction, article) is encoded once per context
into a key/value cache, and every comparison of that context runs only its
own tokens (candidates, question, assistant header) against the shared cache,
in batches padded to a few length buckets so shapes do not recompile, cut
where they run the fewest padded tokens (:func:`plan_batches`).
Encoder-decoders (T5) encode each prompt (bidirectional attention cannot share
a prefix) and run one decoder step.

Prompts longer than the model's context window keep the candidates and the
question whole and truncate the context (the article) from its end; the
judgement then carries ``truncated=True`` and a warning says so once.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.judges._truncation import fit_context
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.models.loading import load_model

__all__ = ["PromptJudge", "Judgement", "bucket", "plan_batches", "ACCELERATOR_BATCH_COST"]

_SENT_A, _SENT_B, _SENT_CUT = "\ue000", "\ue001", "\ue002"
BUCKETS = (16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
           1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336,
           16384, 20480, 24576, 28672, 32768)
"""Padded lengths (steps of at most 1.25x above 64 tokens): few compiled shapes, little padding."""


def bucket(n: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket length ``>= n`` (multiples of the largest bucket beyond it)."""
    for b in buckets:
        if n <= b:
            return b
    top = buckets[-1]
    return -(-n // top) * top


def batch_sizes(batch_size: int) -> tuple[int, ...]:
    """The padded batch sizes a judge compiles for: powers of two below ``batch_size``, and ``batch_size``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return tuple(sorted({min(batch_size, 1 << k) for k in range(batch_size.bit_length() + 1)}))


ACCELERATOR_BATCH_COST = 2048
"""Tokens' worth of fixed cost per forward call that :class:`PromptJudge` charges on a GPU or TPU
(``batch_cost="auto"``), so batches are few and full. Measured on an H100
(``benchmarks/judge_gpu.py``, 240 comparisons per SummEval article): planned for padded tokens
alone (batch 16), an article took about 130 calls of ~2 rows and Qwen2.5-1.5B's shapes judged 131
comparisons/s; with this cost (batch 240), 6 calls and 271/s (Llama-3-8B's: 63 -> 101/s at batch
48; 133/s at batch 120 with bfloat16 caches). On a
CPU the cost is the tokens alone (0)."""


def plan_batches(lengths: Sequence[int], batch_size: int,
                 buckets: Sequence[int] = BUCKETS, *, batch_cost: int = 0) -> list[tuple[int, int, int]]:
    """Cut rows sorted by length into consecutive batches that run the fewest padded tokens.

    A batch of rows ``start:stop`` runs ``b * bucket(lengths[stop - 1])`` tokens,
    ``b`` the smallest of :func:`batch_sizes` holding its ``stop - start`` rows
    (the rest are filler copies). Dynamic programming over the cut points
    minimises the sum, ``C(e) = min_{s} C(s) + b(e - s) * bucket(lengths[e - 1]) + batch_cost``,
    ties going to fewer batches; fixed chunks of ``batch_size`` instead pad a
    long row's bucket onto every row of its chunk and fill a short last chunk
    (41% more tokens than real on a SummEval article, against 8% planned; the
    cost per token of a forward pass hardly depends on the batch size on CPU).

    Args:
        lengths: ``[n]`` row lengths, ascending.
        batch_size: most rows per batch.
        buckets: the padded lengths (:func:`bucket`).
        batch_cost: tokens' worth of fixed cost charged per batch (a forward
            call's overhead; 0: padded tokens alone).

    Returns:
        ``[(start, stop, b), ...]`` covering ``0:n`` in order.

    Raises:
        ValueError: ``lengths`` not ascending, ``batch_size < 1`` or ``batch_cost < 0``.
    """
    if batch_cost < 0:
        raise ValueError(f"batch_cost must be >= 0, got {batch_cost}")
    sizes = batch_sizes(batch_size)
    n = len(lengths)
    if any(lengths[k] > lengths[k + 1] for k in range(n - 1)):
        raise ValueError("lengths must be sorted ascending")
    cost = [(0, 0)] + [None] * n           # (padded tokens, batches) of the best plan of rows 0:e
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)
    for e in range(1, n + 1):
        t = bucket(lengths[e - 1], buckets)
        for s in range(max(0, e - batch_size), e):
            b = next(x for x in sizes if x >= e - s)
            c = (cost[s][0] + b * t + batch_cost, cost[s][1] + 1)
            if cost[e] is None or c < cost[e]:
                cost[e], cut[e] = c, (s, b)
    plan, e = [], n
    while e:
        s, b = cut[e]
        plan.append((s, e, b))
        e = s
    return plan[::-1]


def check_pairs(candidates: Sequence[str], i, j) -> tuple[np.ndarray, np.ndarray]:
    """``(i, j)`` as int arrays after checking them against ``candidates`` (shared by every judge).

    Raises:
        ValueError: ``i`` and ``j`` of different lengths, an index out of range,
            or an empty candidate text among those compared.
    """
    i = np.asarray(i, np.int64).reshape(-1)
    j = np.asarray(j, np.int64).reshape(-1)
    if i.shape != j.shape:
        raise ValueError(f"i and j must have the same length, got {i.shape} and {j.shape}")
    n = len(candidates)
    for name, idx in (("i", i), ("j", j)):
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{name} has indices outside [0, {n})")
    empty = sorted(k for k in set(i.tolist()) | set(j.tolist()) if not str(candidates[k]).strip())
    if empty:
        raise ValueError(f"candidates {empty} are empty; an empty text cannot be judged")
    return i, j


@dataclasses.dataclass(frozen=True)
class Judgement:
    """Probabilities for a list of comparisons of one context.

    Attributes:
        p: ``[R]`` ``P(A better)`` per comparison.
        truncated: whether the context had to be shortened to fit the model.
        logits: ``[R, 2]`` the two label logits (for calibration studies).
    """

    p: np.ndarray
    truncated: bool
    logits: np.ndarray


class PromptJudge:
    """A pairwise LLM judge (prompt-based classifier).

    Args:
        model: a :class:`~jaxrank.judges.loading.LoadedModel` or anything
            :func:`~jaxrank.judges.load_model` takes (``"smollm2-135m"``, a path).
        template: the comparative prompt (:func:`~jaxrank.judges.pairwise_template`).
        chat: wrap the prompt in the model's chat template (default: when it has one).
        system: optional system message for the chat template.
        batch_size: comparisons per forward pass (at most).
        batch_cost: tokens' worth of fixed cost per forward call when planning
            batches (:func:`plan_batches`); ``"auto"``: 0 on a CPU,
            :data:`ACCELERATOR_BATCH_COST` on an accelerator (few, full batches).
        cache_dtype: dtype of the key/value caches (decoders); ``"auto"``: the
            weights' dtype when they are low precision and the judge runs on an
            accelerator (bfloat16 halves the cache there), else float32 (on a CPU
            bfloat16 elementwise work is emulated).
        max_length: context window to respect (default: the model's
            ``max_position_embeddings``; 512 for T5).
        soft_prompt: optional learnt input vectors
            (:class:`~jaxrank.judges.soft_prompt.SoftPrompt`, decoders only),
            inserted into every comparison; the judge's name then carries their key.

    Raises:
        ValueError: a model without a tokenizer, an architecture that is not a
            generative judge (BERT), or label words whose tokenisations do not differ.
    """

    def __init__(self, model, template: PairwiseTemplate, *, chat: bool | None = None, system: str | None = None,
                 batch_size: int = 8, max_length: int | None = None, soft_prompt=None, batch_cost="auto",
                 cache_dtype="auto"):
        if not hasattr(model, "model"):
            model = load_model(model)
        if model.tokenizer is None:
            raise ValueError(f"model {model.name} has no tokenizer; a prompt judge needs one")
        if model.architecture not in ("llama", "mistral", "qwen2", "t5"):
            raise ValueError(f"{model.architecture} models are not generative; use SimilarityJudge for encoders")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_cost == "auto":
            batch_cost = 0 if jax.default_backend() == "cpu" else ACCELERATOR_BATCH_COST
        if isinstance(batch_cost, bool) or not isinstance(batch_cost, (int, np.integer)) or batch_cost < 0:
            raise ValueError(f"batch_cost must be 'auto' or an int >= 0, got {batch_cost!r}")
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
        self.lm = model
        self.template = template
        self.decoder = model.architecture != "t5"
        self.chat = bool(model.chat_template) if chat is None else bool(chat)
        if self.chat and not model.chat_template:
            raise ValueError(f"model {model.name} has no chat template; use chat=False")
        self.system = system
        self.batch_size = int(batch_size)
        default_len = getattr(model.config, "max_position_embeddings", None) or 512
        self.max_length = int(max_length or default_len)
        self._warned = False
        self._frame = self._render_frame()
        self._common, self._label_ids = self._label_tokens()
        self.soft_prompt = soft_prompt
        if soft_prompt is not None:
            soft_prompt.check_judge(self)

    # ------------------------------------------------------------------ naming
    @property
    def name(self) -> str:
        """Judge id for the store: the model name (plus ``-nochat`` when a chat model is used raw)."""
        name = self.lm.name + ("" if self.chat or not self.lm.chat_template else "-nochat")
        return name if self.soft_prompt is None else f"{name}+{self.soft_prompt.key}"

    # --------------------------------------------------------------- rendering
    def _render_frame(self) -> tuple[str, str, str]:
        """``(before_context, between_context_and_a, rest)``; ``rest`` holds the A/B sentinels."""
        t = self.template
        msg = t.text.replace("{context}", _SENT_CUT).replace("{a}", _SENT_A).replace("{b}", _SENT_B)
        if self.chat:
            msgs = ([{"role": "system", "content": self.system}] if self.system else []) + \
                [{"role": "user", "content": msg}]
            full = self.lm.tokenizer.apply_chat_template(msgs, chat_template=self.lm.chat_template,
                                                         add_generation_prompt=True, tokenize=False)
        else:
            full = (self.system + "\n\n" if self.system else "") + msg + "\n\n"
        full = full + t.answer_prefix
        before, rest = full.split(_SENT_CUT) if self.has_context else ("", full)
        between, rest = rest.split(_SENT_A, 1)
        if not self.has_context:
            before, between = between, ""
        return before, between, _SENT_A + rest

    @property
    def has_context(self) -> bool:
        """Whether the template shows the context (HANNA's story templates do not)."""
        return "{context}" in self.template.text

    def _encode(self, text: str, first: bool) -> list[int]:
        special = first and self.decoder and not self.chat   # chat templates write their own; T5 gets </s> at the end
        return list(self.lm.tokenizer(text, add_special_tokens=special)["input_ids"]) if text else []

    def _label_tokens(self):
        tok = self.lm.tokenizer
        rest = self._frame[2]
        # The answer follows the prompt's last character: no space after a newline
        # (chat assistant header), " A" after "Answer:".
        lead = " " if (self.decoder and not rest[-1].isspace()) else ""
        ids = [list(tok(lead + w, add_special_tokens=False)["input_ids"]) for w in self.template.labels]
        eos = set(self.lm.eos_token_ids) | ({tok.eos_token_id} if tok.eos_token_id is not None else set())
        ids = [[t for t in x if t not in eos] for x in ids]
        d = 0
        while d < min(map(len, ids)) and ids[0][d] == ids[1][d]:
            d += 1
        if d == min(map(len, ids)):
            raise ValueError(f"label words {self.template.labels!r} tokenise to {ids[0]} and {ids[1]}: "
                             "no differing token to compare; choose other label words")
        if d and not self.decoder:
            raise ValueError(f"label words {self.template.labels!r} share leading tokens; an encoder-decoder "
                             "judge reads only the first decoder token: choose words that differ at once")
        return ids[0][:d], np.array([ids[0][d], ids[1][d]], np.int32)

    def prompt_text(self, context: str, a: str, b: str) -> str:
        """The exact text judged for one comparison, label-word prefix included (for inspection)."""
        before, between, rest = self._frame
        text = before + (context if self.has_context else "") + between + rest
        common = self.lm.tokenizer.decode(self._common) if self._common else ""
        return text.replace(_SENT_A, a).replace(_SENT_B, b) + common

    def token_ids(self, context: str, a: str, b: str, *, max_context_tokens: int | None = None):
        """``(prefix, a_part, b_part)`` token ids of one comparison; the model reads the token after them.

        Pieces are tokenised separately (chat header and instruction; context;
        the text up to candidate A; candidate A up to candidate B; the rest), so
        the prefix is the same for every comparison of a context, ``prefix +
        a_part`` the same for every comparison with the same candidate in
        position A (two levels of key/value cache), and the context can be cut on
        a token boundary.
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
            :class:`Judgement` with ``p [R]``.

        Raises:
            ValueError: an index out of range, or an empty candidate text.
        """
        i, j = check_pairs(candidates, i, j)
        if i.size == 0:
            return Judgement(np.zeros(0, np.float32), False, np.zeros((0, 2), np.float32))
        pairs = [self.token_ids(context, candidates[a], candidates[b]) for a, b in zip(i, j)]
        longest = max(len(p) + len(x) + len(y) for p, x, y in pairs)
        longest += 0 if self.soft_prompt is None else self.soft_prompt.length
        pairs, truncated = fit_context(
            pairs, longest + 1, max_length=self.max_length,        # + 1: the label token it scores
            context_len=lambda: len(self._encode(context, False)) if self.has_context else 0,
            rebuild=lambda k: [self.token_ids(context, candidates[a], candidates[b], max_context_tokens=k)
                               for a, b in zip(i, j)],
            warn=not self._warned, kept="candidates and question",
            error_tail=": the candidates and question alone do not fit")
        self._warned = self._warned or truncated
        if self.soft_prompt is not None:      # the learnt vectors' own path (soft_prompt.py)
            logits = self.soft_prompt.logits(self, pairs, progress)
        else:
            logits = self._logits_decoder(pairs, progress) if self.decoder else self._logits_t5(pairs, progress)
        p = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1)[:, 0], np.float32)
        return Judgement(p, truncated, logits)

    def with_template(self, template: PairwiseTemplate) -> "PromptJudge":
        """The same judge (model, chat, batch size, window) with another template; nothing is reloaded."""
        other = copy.copy(self)
        other.template = template
        other._warned = False
        other._frame = other._render_frame()
        other._common, other._label_ids = other._label_tokens()
        return other

    def compare_templates(self, templates: Sequence[PairwiseTemplate], context: str, candidates: Sequence[str],
                          i, j, *, progress=None) -> list[Judgement]:
        """Judge the same pairs under ``K`` templates sharing their prefix, as one batched job.

        The templates must render the same text up to candidate A (chat header,
        instruction before the context, the context, the text before ``{a}``),
        the same label words and answer prefix; they may differ after ``{a}``
        (ZEPO's instruction after the candidates). On a decoder the shared
        prefix is encoded once into one key/value cache, candidate A extends it
        once per distinct text up to ``{b}``, and the ``K x R`` remaining parts
        run in batches together (:func:`plan_batches`): the cost of the prefix
        is paid once instead of ``K`` times. Each result equals
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
        if not templates:
            raise ValueError("templates must hold at least one template")
        i, j = check_pairs(candidates, i, j)
        judges = [self.with_template(t) for t in templates]
        first = judges[0]
        for k, jd in enumerate(judges[1:], start=1):
            t = templates[k]
            if jd._frame[:2] != first._frame[:2]:
                raise ValueError(f"templates[{k}] ({t.name}) changes the prefix before {{a}}; "
                                 "templates judged together must share it")
            if (jd._common, jd._label_ids.tolist()) != (first._common, first._label_ids.tolist()):
                raise ValueError(f"templates[{k}] ({t.name}) reads other label tokens "
                                 f"({t.labels!r}, answer prefix {t.answer_prefix!r}) than templates[0]")
        n = len(i)
        if n == 0:
            return [Judgement(np.zeros(0, np.float32), False, np.zeros((0, 2), np.float32)) for _ in judges]

        def build(max_ctx=None):
            return [jd.token_ids(context, candidates[a], candidates[b], max_context_tokens=max_ctx)
                    for jd in judges for a, b in zip(i, j)]

        pairs = build()
        longest = max(len(p) + len(x) + len(y) for p, x, y in pairs)
        pairs, truncated = fit_context(
            pairs, longest + 1, max_length=self.max_length,
            context_len=lambda: len(self._encode(context, False)) if self.has_context else 0,
            rebuild=build, warn=not self._warned, kept="candidates and question",
            error_tail=": the candidates and question alone do not fit")
        self._warned = self._warned or truncated
        logits = self._logits_decoder(pairs, progress) if self.decoder else self._logits_t5(pairs, progress)
        p = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1)[:, 0], np.float32)
        return [Judgement(p[k * n:(k + 1) * n], truncated, logits[k * n:(k + 1) * n]) for k in range(len(judges))]

    def _padded(self, rows: list[list[int]], b: int) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` right-padded to ``[b, bucket(longest)]`` ids and mask; rows past ``len(rows)`` copy row 0."""
        length = bucket(max(map(len, rows)))
        ids = np.full((b, length), self.lm.pad_token_id, np.int32)
        mask = np.zeros((b, length), bool)
        for r, x in enumerate(rows):
            ids[r, :len(x)] = x
            mask[r, :len(x)] = True
        ids[len(rows):], mask[len(rows):] = ids[0], mask[0]    # filler rows: static shapes
        return ids, mask

    def _batches(self, rows: list[list[int]]):
        """Padded ``[b, T]`` batches in order: ``T`` and ``b`` (up to ``batch_size``) rounded up to buckets."""
        bs = self.batch_size
        for start in range(0, len(rows), bs):
            chunk = rows[start:start + bs]
            yield len(chunk), *self._padded(chunk, min(bs, 1 << (len(chunk) - 1).bit_length()))

    def _logits_decoder(self, pairs, progress=None) -> np.ndarray:
        """Two cache levels: the context once, then context + candidate A once per A.

        The comparisons sharing an A run their B parts in batches cut by
        :func:`plan_batches` (rows sorted by length, fewest padded tokens). When
        calls have a cost (``batch_cost > 0``, as on a GPU) and a batch holds more
        rows than one A has comparisons (``batch_size`` at least twice the
        comparisons per A), the A parts are
        extended ``batch_size // (comparisons per A)`` at a time and their B
        parts share batches, each row reading its own A's cache
        (:meth:`~jaxrank.models.llama.KVCache.rows`); otherwise each A's batch-1
        cache is shared by its rows without a copy.
        """
        model = self.lm.model
        prefix = pairs[0][0]
        if any(p != prefix for p, _, _ in pairs):            # one context per call
            raise AssertionError("comparisons of one call must share their prefix")
        plen = bucket(len(prefix))
        alen = bucket(max(len(a) for _, a, _ in pairs))
        pid = np.full((1, plen), self.lm.pad_token_id, np.int32)
        pmask = np.zeros((1, plen), bool)
        pid[0, :len(prefix)] = prefix
        pmask[0, :len(prefix)] = True
        cache = model.prefill(pid, pmask, capacity=plen + alen, cache_dtype=self.cache_dtype)
        tokens = jnp.asarray(self._label_ids)
        out = np.zeros((len(pairs), 2), np.float32)
        groups: dict[tuple, list[int]] = {}
        for r, (_, a, _) in enumerate(pairs):
            groups.setdefault(tuple(a), []).append(r)
        # On a CPU (batch_cost 0) a call costs its tokens alone, so mixing A's gains nothing: keep each
        # A's batch-1 cache shared without copies.
        together = max(1, self.batch_size // max(1, len(pairs) // len(groups))) if self.batch_cost else 1
        items = list(groups.items())
        for g0 in range(0, len(items), together):
            chunk = items[g0:g0 + together]
            width = together                                  # a fixed A batch: one compiled shape
            aid = np.full((width, alen), self.lm.pad_token_id, np.int32)
            amask = np.zeros((width, alen), bool)
            for k, (a, _) in enumerate(chunk):
                aid[k, :len(a)] = a
                amask[k, :len(a)] = True
            aid[len(chunk):], amask[len(chunk):] = aid[0], amask[0]     # filler A rows
            base = cache if width == 1 else cache.rows(np.zeros(width, np.int32))
            cache_a = model.extend(base, aid, amask, update=True).cache
            owner = {r: k for k, (_, rows) in enumerate(chunk) for r in rows}
            rows = sorted(owner, key=lambda r: len(pairs[r][2]))    # similar lengths share a batch
            for start, stop, b in plan_batches([len(pairs[r][2]) for r in rows], self.batch_size,
                                               batch_cost=self.batch_cost):
                ids, mask = self._padded([pairs[r][2] for r in rows[start:stop]], b)
                if width == 1:
                    ca = cache_a
                else:
                    idx = np.full(b, owner[rows[start]], np.int32)          # filler rows read row 0's A
                    idx[:stop - start] = [owner[r] for r in rows[start:stop]]
                    ca = cache_a.rows(idx)
                last = model.extend(ca, ids, mask).last_hidden
                out[rows[start:stop]] = np.asarray(model.logits_at(last, token_ids=tokens))[:stop - start]
                if progress is not None:
                    progress(stop - start)
        return out

    def _logits_t5(self, pairs, progress=None) -> np.ndarray:
        model = self.lm.model
        tokens = jnp.asarray(self._label_ids)
        eos = self.lm.tokenizer.eos_token_id
        rows = [p + a + b + ([eos] if eos is not None else []) for p, a, b in pairs]
        out = []
        for real, ids, mask in self._batches(rows):
            enc = model.encode(jnp.asarray(ids), jnp.asarray(mask))
            out.append(np.asarray(model.decoder_logits_first_step(enc, jnp.asarray(mask), token_ids=tokens))[:real])
            if progress is not None:
                progress(real)
        return np.concatenate(out).astype(np.float32)
