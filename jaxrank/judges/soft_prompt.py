"""Gradient-tuned soft prompts for the decoder prompt judges (issue 12, beyond ZEPO).

The judges are our own differentiable Flax models, so instead of searching over
instruction *texts* (ZEPO) we can learn ``k`` continuous input vectors
``V in R^{k x D}`` (prompt tuning) that make the frozen judge fairer on
unlabelled pairs:

* :class:`SoftPrompt` -- the vectors (a pytree; ``position`` static) placed
  ``"before_question"`` (after candidate B, before the question) or
  ``"prepend"`` (at the start of each comparison's own tokens, right after the
  article's cached prefix). Either way the vectors come after the shared prefix,
  so the article's key/value cache is computed once, stays constant and needs
  no gradient. Saved and loaded with safetensors; used by
  ``PromptJudge(..., soft_prompt=...)`` in its ordinary ``compare`` path.
* :func:`fairness_loss` -- the differentiable fairness loss over a batch holding
  both orders of every pair (eq. SP-1 below).
* :func:`train_soft_prompt` -- adam (optax) on that loss through the frozen
  model: one jitted step, fixed padded shapes (no recompilation per step).

Only Llama-family decoders are supported; T5 judges raise ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from safetensors.numpy import load_file, save_file

from jaxrank.judges.pairwise import PromptJudge, bucket, plan_batches
from jaxrank.judges.reading import TOP_K, read_continuations
from jaxrank.models.llama import extend_with_vectors

__all__ = ["SoftPrompt", "POSITIONS", "IDENTITY", "judge_identity", "fairness_loss", "train_soft_prompt",
           "TrainingResult", "comparison_row", "question_tokens"]

POSITIONS = ("before_question", "prepend")
"""Where the vectors go in each comparison's own tokens (both after the article's prefix)."""


IDENTITY = ("model_fingerprint", "chat", "answer_prefix", "template_key")
"""What a soft prompt records of the judge it was trained for (:meth:`SoftPrompt.save`), checked on use."""


def judge_identity(judge: PromptJudge) -> tuple[tuple[str, str], ...]:
    """The :data:`IDENTITY` of a decoder judge as ``(field, value)`` strings: its model's fingerprint, its
    template key (template, labels, answer prefix, system message), chat wrapping and answer prefix."""
    return (("model_fingerprint", judge.lm.fingerprint), ("chat", str(judge.chat)),
            ("answer_prefix", judge.template.answer_prefix), ("template_key", judge.template_key))


@dataclasses.dataclass(frozen=True)
class SoftPrompt:
    """``k`` learnt input vectors for a decoder judge.

    Attributes:
        vectors: ``[k, D]`` finite floating-point array (``D`` the model's hidden size); ``k = 0`` is the
            plain judge. A list or NumPy array is converted to a float32 ``jax.Array``.
        position: ``"before_question"`` or ``"prepend"`` (:data:`POSITIONS`).
        trained_for: the :func:`judge_identity` of the judge the vectors were trained for (set by
            :func:`train_soft_prompt` and :meth:`load`), or ``None`` (not checked). A judge given these
            vectors must match it (:meth:`check_judge`).
        source: the file the vectors were read from (named in errors), or ``None``.

    Raises:
        ValueError: an unknown position, or vectors that are not a finite floating ``[k, D]`` array.
    """

    vectors: jax.Array
    position: str = "before_question"
    trained_for: tuple[tuple[str, str], ...] | None = dataclasses.field(default=None, compare=False)
    source: str | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        if self.position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {self.position!r}")
        v = self.vectors
        concrete = isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)
        if not (concrete or isinstance(v, (list, tuple, np.ndarray, str, int, float))):
            return                                  # tracers and placeholders of pytree transforms
        a = np.asarray(v)
        if a.ndim != 2:
            raise ValueError(f"vectors must be [k, D], got shape {a.shape}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise ValueError(f"vectors must be a floating-point array, got dtype {a.dtype}")
        if not np.isfinite(a.astype(np.float32)).all():
            raise ValueError("vectors must be finite: they hold NaN or infinity")
        if not concrete:
            object.__setattr__(self, "vectors", jnp.asarray(a, jnp.float32))

    @property
    def length(self) -> int:
        """``k``, the number of vectors."""
        return int(self.vectors.shape[0])

    @property
    def key(self) -> str:
        """A stable id: ``soft-<position>-k<k>-<hash of the float32 vectors>``."""
        h = hashlib.sha1(np.asarray(self.vectors, np.float32).tobytes() + self.position.encode()).hexdigest()[:8]
        return f"soft-{self.position}-k{self.length}-{h}"

    # ---------------------------------------------------------------- making
    @classmethod
    def from_text(cls, lm, text: str, position: str = "before_question") -> "SoftPrompt":
        """Vectors initialised to the input embeddings of the real tokens of ``text``.

        Args:
            lm: a :class:`~jaxrank.models.loading.LoadedModel` (Llama family).
            text: the initialisation text; ``k`` is its number of tokens.
            position: :data:`POSITIONS`.
        """
        ids = list(lm.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
        embed = lm.model.weights()["embed"]
        vectors = rows_of(embed, jnp.asarray(ids, jnp.int32)) if ids else \
            jnp.zeros((0, embed.shape[1]), jnp.float32)
        return cls(vectors.astype(jnp.float32), position)

    # ----------------------------------------------------------- safetensors
    def save(self, path: str | os.PathLike, judge: PromptJudge | None = None, **metadata: str) -> None:
        """Write the vectors to a safetensors file: tensor ``vectors``; as string metadata the position,
        the :data:`IDENTITY` of the judge they were trained for, and ``metadata``.

        Args:
            path: the file.
            judge: the judge the vectors were trained for (checked with :meth:`check_judge`); ``None``:
                :attr:`trained_for` (set by :func:`train_soft_prompt`).
            **metadata: free notes (their names must not be :data:`IDENTITY` fields or ``position``).

        Raises:
            ValueError: no judge and no :attr:`trained_for`, ``judge`` does not fit the vectors, or
                ``metadata`` names a reserved field.
        """
        if judge is not None:
            self.check_judge(judge)
        ident = judge_identity(judge) if judge is not None else self.trained_for
        if ident is None:
            raise ValueError("judge: pass the judge the vectors were trained for (save(path, judge)); these "
                             "vectors record none")
        clash = sorted(set(metadata) & {*IDENTITY, "position", "format"})
        if clash:
            raise ValueError(f"metadata: {clash} are written by save itself")
        meta = {"position": self.position, "format": "jaxrank-soft-prompt-2", **dict(ident)}
        meta.update({k: str(v) for k, v in metadata.items()})
        save_file({"vectors": np.ascontiguousarray(np.asarray(self.vectors, np.float32))}, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | os.PathLike, *, check: bool = True) -> "SoftPrompt":
        """Read a file written by :meth:`save`.

        The vectors keep the identity of the judge they were trained for, and a
        judge given them (``PromptJudge(..., soft_prompt=...)``) must match it:
        model fingerprint, template key, chat wrapping and answer prefix
        (:meth:`check_judge`). ``check=False`` drops that record, so the vectors
        apply to any decoder judge of their hidden size (at your own risk).
        Files saved by older jaxrank (format ``jaxrank-soft-prompt-1``, without
        these fields) load with a ``UserWarning`` and are not checked.

        Raises:
            ValueError: the file does not exist, is not a safetensors file, lacks
                the ``vectors`` tensor or the ``position`` metadata, or holds
                vectors that are not a finite ``[k, D]`` array (the message names the file).
        """
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"soft prompt file {path!r} does not exist")
        try:
            tensors = load_file(path)
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                meta = json.loads(f.read(n)).get("__metadata__", {})
        except Exception as e:  # safetensors raises its own error types
            raise ValueError(f"{path}: not a safetensors soft prompt ({e})") from None
        if "vectors" not in tensors or "position" not in meta:
            raise ValueError(f"{path}: a soft prompt file needs tensor 'vectors' and metadata 'position'")
        ident = tuple((k, meta[k]) for k in IDENTITY) if all(k in meta for k in IDENTITY) else None
        if ident is None and check:
            named = f" (its metadata names model {meta['model']!r})" if "model" in meta else ""
            warnings.warn(f"{path}: saved without the model and template it was trained for (an older "
                          f"jaxrank){named}; it is applied to any judge of its hidden size unchecked",
                          UserWarning, stacklevel=2)
        try:
            return cls(np.asarray(tensors["vectors"]), meta["position"], ident if check else None, path)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    # ------------------------------------------------------------ the judge's hook
    def check_judge(self, judge: PromptJudge) -> None:
        """Raise ``ValueError`` unless ``judge`` is a decoder with hidden size ``D`` matching
        :attr:`trained_for` (when set): model fingerprint, chat wrapping, and once the judge's answer prefix
        is resolved (``"auto"`` waits for :meth:`~jaxrank.judges.pairwise.PromptJudge.prepare`) its template
        key and answer prefix. The message names the file and the field."""
        if not judge.decoder:
            raise ValueError(f"soft_prompt: {judge.lm.architecture} judges are not supported (decoders only)")
        d = judge.lm.config.hidden_size
        if self.vectors.shape[1] != d:
            raise ValueError(f"soft_prompt: vectors of size {self.vectors.shape[1]}, the model's hidden size is {d}")
        if self.trained_for is None:
            return
        have = {"model_fingerprint": lambda: judge.lm.fingerprint, "chat": lambda: str(judge.chat)}
        if not (judge._auto_prefix and judge.answer_prefix_choice is None):
            have.update(template_key=lambda: judge.template_key, answer_prefix=lambda: judge.template.answer_prefix)
        for field, saved in self.trained_for:
            if field in have and have[field]() != saved:
                where = f" {self.source}" if self.source else ""
                raise ValueError(f"soft_prompt{where}: trained for {field} {saved!r}, the judge has "
                                 f"{have[field]()!r}; use the judge it was trained for, or "
                                 "SoftPrompt.load(path, check=False) to apply it anyway")

    def logits(self, judge: PromptJudge, pairs, progress=None):
        """The label log-probabilities ``[R, 2]`` and the top next tokens ``[R, k]`` (ids, probabilities) of
        ``(prefix, a_part, b_part)`` token triples of one context.

        The prefix is encoded once into a cache; every comparison runs its own
        tokens with the vectors inserted (:func:`comparison_row`) against it, in
        batches cut by :func:`~jaxrank.judges.pairwise.plan_batches`. The labels
        are read at the last position, full vocabulary: the log-probability of
        their first differing token after their shared tokens (which ``b_part``
        ends with), :func:`~jaxrank.judges.reading.read_continuations`.
        """
        self.check_judge(judge)                   # again: an "auto" answer prefix is resolved by now
        # judge.runner off a mesh; on a mesh its ShardedLlama.extend takes no vectors, so the model itself
        model = judge.lm.model
        prefix = pairs[0][0]
        if any(p != prefix for p, _, _ in pairs):
            raise ValueError("comparisons of one call must share their prefix")
        cache = model.prefill(*_pad_prefix(prefix, judge.lm.pad_token_id), cache_dtype=judge.cache_dtype)
        q = question_tokens(judge)
        rows = [comparison_row(a, b, q, self.position, self.length) for _, a, b in pairs]
        order = sorted(range(len(rows)), key=lambda r: len(rows[r][0]))
        vectors = jnp.asarray(self.vectors, model.weights()["embed"].dtype)
        n = len(rows)
        logp, top_ids, top_probs = np.zeros((n, 2), np.float32), np.zeros((n, TOP_K), np.int32), \
            np.zeros((n, TOP_K), np.float32)
        for start, stop, b in plan_batches([len(rows[r][0]) for r in order], judge.batch_size):
            idx = order[start:stop]
            ids, mask, slots = _padded([rows[r] for r in idx], b, bucket(len(rows[idx[-1]][0])),
                                       judge.lm.pad_token_id)
            last = model.extend(cache, ids, mask, vectors=vectors, vector_index=slots).last_hidden
            tgt = np.broadcast_to(np.asarray(judge._label_ids, np.int32).reshape(2, 1), (b, 2, 1))
            lp, ti, tp = read_continuations(model.logits_at(last)[:, None], tgt, np.ones((b, 2, 1), bool))
            logp[idx], top_ids[idx], top_probs[idx] = (np.asarray(x)[:stop - start] for x in (lp, ti, tp))
            if progress is not None:
                progress(stop - start)
        return logp, top_ids, top_probs


jax.tree_util.register_dataclass(SoftPrompt, data_fields=["vectors"],
                                 meta_fields=["position", "trained_for", "source"])


# ---------------------------------------------------------------------- rows
def question_tokens(judge: PromptJudge) -> list[int]:
    """The tokens of the question and answer header after candidate B (as the judge reads them)."""
    rest = judge._frame[2]
    return judge._encode(rest[rest.index("\ue001") + 1:], False) + list(judge._common)


def comparison_row(a_part: Sequence[int], b_part: Sequence[int], question: Sequence[int], position: str,
                   k: int) -> tuple[list[int], list[int]]:
    """``(ids, slots)`` of one comparison's own tokens with ``k`` vector slots inserted.

    ``"prepend"`` puts the slots before ``a_part``; ``"before_question"`` where
    the question starts in ``b_part``: after its longest common suffix with
    ``question`` is removed (the question is tokenised with the rest of
    ``b_part``, so the row's real tokens are exactly the plain judge's). ``slots``
    is ``m`` at the ``m``-th vector, ``-1`` at real tokens; the ids of the
    vector slots are 0 (never read).
    """
    a_part, b_part = list(a_part), list(b_part)
    if position == "prepend":
        cut = 0
        toks = a_part + b_part
    elif position == "before_question":
        s = 0
        while s < min(len(b_part), len(question)) and b_part[-1 - s] == question[-1 - s]:
            s += 1
        toks = a_part + b_part
        cut = len(a_part) + len(b_part) - s
    else:
        raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
    ids = toks[:cut] + [0] * k + toks[cut:]
    slots = [-1] * cut + list(range(k)) + [-1] * (len(toks) - cut)
    return ids, slots


def _pad_prefix(prefix, pad_id):
    plen = bucket(len(prefix))
    ids = np.full((1, plen), pad_id, np.int32)
    mask = np.zeros((1, plen), bool)
    ids[0, :len(prefix)] = prefix
    mask[0, :len(prefix)] = True
    return ids, mask


def _padded(rows, b, length, pad_id):
    """``[b, length]`` ids, mask, slots; rows past ``len(rows)`` copy row 0 (static shapes)."""
    ids = np.full((b, length), pad_id, np.int32)
    mask = np.zeros((b, length), bool)
    slots = np.full((b, length), -1, np.int32)
    for r, (x, s) in enumerate(rows):
        ids[r, :len(x)], mask[r, :len(x)], slots[r, :len(s)] = x, True, s
    ids[len(rows):], mask[len(rows):], slots[len(rows):] = ids[0], mask[0], slots[0]
    return ids, mask, slots


# ---------------------------------------------------------------------- loss
def rows_of(table, ids) -> jax.Array:
    """Rows ``ids`` of an embedding table ``[V, D]``, float32 or kept quantised
    (:class:`~jaxrank.models.llama.QuantisedWeight`: the packed rows gathered, then dequantised)."""
    if hasattr(table, "dequantise"):
        return table.map(lambda a: jnp.take(a, ids, axis=-2)).dequantise()
    return jnp.take(table, ids, axis=0)


def fairness_loss(logits: jax.Array, weight: jax.Array | None = None, *,
                  calibration_weight: float = 1.0) -> jax.Array:
    """Differentiable fairness loss of a batch holding both orders of every pair (eq. SP-1).

    ``L = (mean_r p_r - 1/2)^2 + lambda * (mean_r (log p_r - log(1 - p_r)))^2``,
    ``p_r = softmax(l_r)[0]`` from the label logits ``l_r = (l_A, l_B)``, so
    ``log p_r - log(1 - p_r) = l_A - l_B``. The first term is the squared gap
    between the mean ``P(A)`` and the uniform prior (a smooth stand-in for
    ZEPO's fairness ``|P(A) - 1/2|``, whose decisions are not differentiable);
    the second is ZEPO's batch calibration ``|mean(log pA - log pB)|``,
    **squared** so that it is smooth at its minimum. A judge that is fair to
    positions has both terms zero over both orders of a pair set; a judge that
    ignores its input (``p = 1/2`` everywhere) also has, which is why the study
    checks agreement with humans rather than the loss alone.

    Args:
        logits: ``[R, 2]`` label logits.
        weight: ``[R]`` optional 0/1 mask of real rows.
        calibration_weight: ``lambda``.
    """
    logits = jnp.asarray(logits, jnp.float32)
    w = jnp.ones(logits.shape[:1], jnp.float32) if weight is None else jnp.asarray(weight, jnp.float32)
    n = jnp.maximum(jnp.sum(w), 1.0)
    p = jax.nn.softmax(logits, axis=-1)[:, 0]
    gap = jnp.sum(w * p) / n - 0.5
    calib = jnp.sum(w * (logits[:, 0] - logits[:, 1])) / n
    return gap ** 2 + calibration_weight * calib ** 2


# ------------------------------------------------------------------ training
@dataclasses.dataclass(frozen=True)
class TrainingResult:
    """What :func:`train_soft_prompt` returns.

    Attributes:
        soft_prompt: the learnt :class:`SoftPrompt`.
        history: one dict per step: ``step``, ``context`` (index), ``loss`` (eq. SP-1
            on that step's batch, before the update), ``mean_p``, ``p_a`` (fraction
            of ``p > 1/2``).
        compilations: how many times the training step was compiled (1: fixed shapes).
    """

    soft_prompt: SoftPrompt
    history: list
    compilations: int


def train_soft_prompt(judge: PromptJudge, contexts: Sequence[tuple[str, Sequence[str]]], init: SoftPrompt, *,
                      steps: int = 20, pairs_per_step: int = 4, learning_rate: float = 1e-2,
                      calibration_weight: float = 1.0, seed: int = 0,
                      callback: Callable[[dict], None] | None = None) -> TrainingResult:
    """Learn the vectors of ``init`` on unlabelled pairs with adam, the judge's model frozen.

    Each step takes one context (in turn) and ``pairs_per_step`` random pairs
    of its candidates in both orders, runs the ``2 * pairs_per_step`` rows with
    the vectors inserted against the context's prefix cache (computed once,
    constant: no gradient), reads the label logits ``l = h_last . E[label]``
    (the output embedding rows of the two label tokens; soft-capped,
    ``c * tanh(l / c)``, where the model caps its logits, as Gemma 2 does) and takes one adam step
    on :func:`fairness_loss`. The model's weights enter through
    ``jax.lax.stop_gradient``; only the vectors are differentiated. Rows are
    padded to one length and the prefix caches to one capacity, so the jitted
    step compiles once.

    Args:
        judge: a plain decoder :class:`~jaxrank.judges.pairwise.PromptJudge`
            (its template, chat wrapping and label words are used).
        contexts: ``(context text, candidate texts)`` per context (unlabelled).
        init: the starting vectors and position (e.g. :meth:`SoftPrompt.from_text`).
        steps, pairs_per_step: optimisation steps and pairs per step.
        learning_rate: adam's step size.
        calibration_weight: ``lambda`` of eq. SP-1.
        seed: the pair sampler's seed.
        callback: called with each step's history dict (to log as it goes).

    A judge with ``answer_prefix="auto"`` is prepared on the first context first
    (:meth:`~jaxrank.judges.pairwise.PromptJudge.prepare`), so training reads the
    prompts the judge will. The learnt vectors record the judge
    (:attr:`SoftPrompt.trained_for`).

    Raises:
        ValueError: a judge with a soft prompt already, a T5 judge, no contexts,
            a context with fewer than two candidates, bad counts, or rows that do
            not fit the model's window.
    """
    init.check_judge(judge)
    if judge.soft_prompt is not None:
        raise ValueError("judge: train on a plain judge (soft_prompt=None); the vectors are init")
    if steps < 1 or pairs_per_step < 1:
        raise ValueError(f"steps and pairs_per_step must be >= 1, got {steps} and {pairs_per_step}")
    if not contexts:
        raise ValueError("contexts: need at least one context")
    for c, (ctx, cands) in enumerate(contexts):
        if len(cands) < 2:
            raise ValueError(f"contexts[{c}]: needs at least two candidates, got {len(cands)}")
    judge.prepare(*contexts[0])            # answer_prefix="auto": train on the prompts the judge will read
    init.check_judge(judge)
    model, k = judge.lm.model, init.length
    q = question_tokens(judge)
    prepared = []
    for ctx, cands in contexts:
        parts = [judge.token_ids(ctx, x, x) for x in cands]
        prepared.append((parts[0][0], [p[1] for p in parts], [p[2] for p in parts]))
    cap = max(bucket(len(p)) for p, _, _ in prepared)
    length = bucket(max(max(map(len, a)) + max(map(len, b)) for _, a, b in prepared) + k)
    if cap + length > judge.max_length:
        raise ValueError(f"contexts: prefix ({cap}) + comparison ({length}) tokens exceed the window "
                         f"{judge.max_length}; shorten the contexts")
    caches = [model.prefill(*_pad_prefix(p, judge.lm.pad_token_id), capacity=cap, cache_dtype=judge.cache_dtype)
              for p, _, _ in prepared]
    caches = jax.tree.map(lambda *x: jnp.stack(x), *caches)
    weights = model.weights()
    cfg = model.config
    labels = jnp.asarray(judge._label_ids)
    opt = optax.adam(learning_rate)

    def loss_fn(vectors, weights, cache, ids, mask, slots):
        frozen = jax.lax.stop_gradient(weights)
        out = extend_with_vectors(cfg, frozen, cache, ids, mask, vectors, slots, remat=True)
        table = rows_of(frozen["lm_head"] if "lm_head" in frozen else frozen["embed"], labels)
        logits = jnp.einsum("bd,ld->bl", out.last_hidden, table, preferred_element_type=jnp.float32)
        if cfg.final_softcap is not None:     # Gemma 2: the judge reads c * tanh(z / c), so training must too
            logits = cfg.final_softcap * jnp.tanh(logits / cfg.final_softcap)
        return fairness_loss(logits, calibration_weight=calibration_weight), logits

    @jax.jit
    def step(vectors, opt_state, weights, caches, c, ids, mask, slots):
        cache = jax.tree.map(lambda x: x[c], caches)
        (loss, logits), g = jax.value_and_grad(loss_fn, has_aux=True)(vectors, weights, cache, ids, mask, slots)
        updates, opt_state = opt.update(g, opt_state, vectors)
        return optax.apply_updates(vectors, updates), opt_state, loss, logits

    vectors = jnp.asarray(init.vectors, jnp.float32)
    opt_state = opt.init(vectors)
    rng = np.random.default_rng(seed)
    history = []
    for s in range(steps):
        c = s % len(prepared)
        _, a_parts, b_parts = prepared[c]
        rows = []
        for _ in range(pairs_per_step):
            x, y = rng.choice(len(a_parts), 2, replace=False)
            rows += [comparison_row(a_parts[x], b_parts[y], q, init.position, k),
                     comparison_row(a_parts[y], b_parts[x], q, init.position, k)]
        ids, mask, slots = _padded(rows, len(rows), length, judge.lm.pad_token_id)
        vectors, opt_state, loss, logits = step(vectors, opt_state, weights, caches, jnp.int32(c), ids, mask, slots)
        p = np.asarray(jax.nn.softmax(logits, -1)[:, 0])
        rec = {"step": s, "context": c, "loss": float(loss), "mean_p": float(p.mean()), "p_a": float((p > 0.5).mean())}
        history.append(rec)
        if callback is not None:
            callback(rec)
    if not np.isfinite(np.asarray(vectors)).all():
        raise ValueError(f"learning_rate: training diverged (the vectors are not finite after {steps} steps, "
                         f"learning_rate {learning_rate}); lower it")
    return TrainingResult(SoftPrompt(vectors, init.position, judge_identity(judge)), history,
                          step._cache_size())
