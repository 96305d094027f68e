"""The peers of ``judge_speed.py``: the same judge prompts run by PyTorch (transformers) and llama.cpp.

Every peer reads the same token ids (:meth:`PromptJudge.prompt_rows`: the whole prompt text tokenised whole, split into prefix,
candidate A part, candidate B + question part) and returns ``p = softmax(logit_A,
logit_B)[0]`` from the two label-token logits at the last prompt position
(METHODS.md §1), so its ``p`` can be compared with jaxrank's number by number.

* :class:`TorchJudge` ``.cached``: the strongest plain use of transformers we
  know for this workload, batched as jaxrank batches it: the prefix (chat header,
  instruction, article) is run once into a ``DynamicCache``; per candidate in
  position A a copy of the prefix cache is extended by A's tokens;
  the comparisons with that A run their B part as right-padded batches (rows
  sorted by length, padded to the longest row of the batch: eager PyTorch has no
  shapes to recompile) against the A cache expanded (copied) to the batch, with an
  attention mask over cache + batch and explicit position ids; the final hidden
  state at each row's last real token is projected onto the two label rows of
  the (tied) output embedding only. ``torch.inference_mode``, all CPU threads.
* :class:`TorchJudge` ``.full_prompt``: the naive loop: one forward pass of the
  whole prompt per comparison, logits at the last position.
* :class:`LlamaCppJudge`: llama.cpp through ``llama-cpp-python`` on the GGUF
  file itself (its own quantised kernels): the prefix is evaluated once; per
  candidate A the KV cache is rewound to the prefix and A evaluated; per
  comparison the cache is rewound to prefix + A (``n_tokens`` set back: the next
  ``eval`` removes the later cells from the KV cache, no state copy) and B evaluated.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from jaxrank.judges.reading import shared_split


def comparison_groups(judge, context, candidates, i, j):
    """``(prefix, [(a_ids, [(row, b_ids), ...]), ...])``: the comparisons grouped by their A part."""
    rows, _ = judge.prompt_rows(context, candidates, i, j)          # the whole text's ids, as jaxrank reads them
    pairs = shared_split(rows, list(np.asarray(i).tolist()))
    groups: dict[tuple, list] = {}
    for r, (_, a, b) in enumerate(pairs):
        groups.setdefault(tuple(a), []).append((r, b))
    return pairs[0][0], [(list(a), rows) for a, rows in groups.items()]


def p_from_logits(logits) -> np.ndarray:
    """``softmax(logits)[:, 0]`` in float64 (logits ``[R, 2]``)."""
    z = np.asarray(logits, np.float64)
    return 1.0 / (1.0 + np.exp(z[:, 1] - z[:, 0]))


class TorchJudge:
    """transformers' ``LlamaForCausalLM`` with the GGUF's weights (dequantised to float32 by transformers)."""

    def __init__(self, path, label_ids, batch_size: int = 8):
        import torch
        import transformers
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        cfg = transformers.LlamaConfig(**load_gguf_checkpoint(str(path))["config"])
        try:
            from transformers.initialization import no_init_weights
        except ImportError:  # pragma: no cover
            no_init_weights = contextlib.nullcontext
        with no_init_weights():
            m = transformers.LlamaForCausalLM(cfg).eval()
        sd = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=m)["tensors"]
        m.load_state_dict(sd, strict=False)
        m.tie_weights()
        self.torch, self.model, self.batch_size = torch, m, int(batch_size)
        self.set_threads(os.cpu_count() or 1)
        self.labels = torch.tensor(np.asarray(label_ids, np.int64))
        self.head = m.lm_head.weight[self.labels].detach().clone()       # [2, D]
        self.dtype = str(m.lm_head.weight.dtype).replace("torch.", "")

    def set_threads(self, n: int):
        """Intra-op threads of PyTorch's CPU kernels."""
        self.torch.set_num_threads(n)
        self.threads = n

    def full_prompt(self, judge, context, candidates, i, j) -> np.ndarray:
        """One forward pass of the whole prompt per comparison (no cache, no batching)."""
        torch = self.torch
        logits = np.zeros((len(i), 2))
        with torch.inference_mode():
            rows, _ = judge.prompt_rows(context, candidates, i, j)
            for r, row in enumerate(rows):
                ids = torch.tensor([row])
                logits[r] = self.model(ids, logits_to_keep=1).logits[0, -1, self.labels].double().numpy()
        return p_from_logits(logits)

    def cached(self, judge, context, candidates, i, j) -> np.ndarray:
        """Prefix cache once, prefix + A cache once per A, right-padded B batches against it."""
        torch = self.torch
        from transformers import DynamicCache

        prefix, groups = comparison_groups(judge, context, candidates, i, j)
        body = self.model.model
        logits = np.zeros((len(i), 2))
        with torch.inference_mode():
            cache = DynamicCache()
            body(input_ids=torch.tensor([prefix]), past_key_values=cache, use_cache=True)
            kv_pre = [(layer.keys, layer.values) for layer in cache.layers]
            n_pre = len(prefix)
            for a_ids, rows in groups:
                cache = DynamicCache(ddp_cache_data=kv_pre)               # the prefix cache, A appended to it
                body(input_ids=torch.tensor([a_ids]), past_key_values=cache, use_cache=True,
                     position_ids=torch.arange(n_pre, n_pre + len(a_ids))[None])
                kv_a = [(layer.keys, layer.values) for layer in cache.layers]
                n_past = n_pre + len(a_ids)
                rows = sorted(rows, key=lambda x: len(x[1]))
                for s in range(0, len(rows), self.batch_size):
                    chunk = rows[s:s + self.batch_size]
                    m, t = len(chunk), max(len(b) for _, b in chunk)
                    ids = torch.zeros((m, t), dtype=torch.long)
                    mask = torch.zeros((m, n_past + t), dtype=torch.long)
                    mask[:, :n_past] = 1
                    lens = torch.tensor([len(b) for _, b in chunk])
                    for k, (_, b) in enumerate(chunk):
                        ids[k, :len(b)] = torch.tensor(b)
                        mask[k, n_past:n_past + len(b)] = 1
                    kv = DynamicCache(ddp_cache_data=[(k_.expand(m, -1, -1, -1), v_.expand(m, -1, -1, -1))
                                                      for k_, v_ in kv_a])
                    pos = torch.arange(n_past, n_past + t).expand(m, t)
                    hid = body(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=kv,
                               use_cache=True).last_hidden_state
                    last = hid[torch.arange(m), lens - 1]                 # [m, D] at each row's last real token
                    logits[[r for r, _ in chunk]] = (last @ self.head.T).double().numpy()
        return p_from_logits(logits)


def llama_cpp_unavailable() -> str | None:
    """Why llama.cpp's Python bindings cannot be used here (``None`` when they can)."""
    try:
        import llama_cpp  # noqa: F401
    except Exception as e:  # ImportError, or a shared-library load error
        return f"llama-cpp-python not importable ({type(e).__name__}: {e})"
    return None


class LlamaCppJudge:
    """llama.cpp (``llama_cpp.Llama``) on the GGUF file, KV cache rewound instead of recomputed."""

    def __init__(self, path, label_ids, n_ctx: int = 2048, flash_attn: bool = False):
        import llama_cpp

        threads = os.cpu_count() or 1
        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512,
                                   n_threads=threads, n_threads_batch=threads, logits_all=False,
                                   flash_attn=flash_attn, verbose=False)
        self.labels = np.asarray(label_ids, np.int64)
        self.version = getattr(llama_cpp, "__version__", "?")
        self.threads = threads

    def set_threads(self, n: int):
        """Threads of llama.cpp's decoding, for single tokens and batches alike."""
        self.lib.llama_set_n_threads(self.llm.ctx, n, n)
        self.threads = n

    def _last_logits(self) -> np.ndarray:
        """The label logits of the last token of the last ``eval`` (the only row llama.cpp computed)."""
        row = self.lib.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(self.llm.n_vocab(),))[self.labels].astype(np.float64)

    def cached(self, judge, context, candidates, i, j) -> np.ndarray:
        """Prefix once, prefix + A once per A, then B per comparison from the rewound cache."""
        prefix, groups = comparison_groups(judge, context, candidates, i, j)
        llm = self.llm
        logits = np.zeros((len(i), 2))
        llm.reset()
        llm.eval(prefix)
        n_pre = llm.n_tokens
        for a_ids, rows in groups:
            llm.n_tokens = n_pre
            llm.eval(a_ids)
            n_past = llm.n_tokens
            for r, b in rows:
                llm.n_tokens = n_past
                llm.eval(b)
                logits[r] = self._last_logits()
        return p_from_logits(logits)

    def full_prompt_logits(self, tokens) -> np.ndarray:
        """The two label logits after a whole prompt evaluated from an empty cache (a check of the rewinding)."""
        self.llm.reset()
        self.llm.eval(list(tokens))
        return self._last_logits()
