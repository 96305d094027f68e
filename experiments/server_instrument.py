"""The instrument check of a server judge: its ``p`` beside the in-process judge's on the same prompts (issue 32).

Before a judge behind a server (:class:`~jaxrank.judges.server.ServerJudge`, llama.cpp's
``llama_cpp.server`` serving a registry GGUF) is put on the efficiency protocol, check that it reads
what the in-process judge (:class:`~jaxrank.judges.PromptJudge`, the same GGUF dequantised to float32,
Flax) reads:

* the text: the server request's prompt (the model's chat template rendered by the client, the answer
  prefix) equals :meth:`PromptJudge.prompt_text`;
* the token ids: the server's tokenisation of that text (``/extras/tokenize``, llama.cpp's tokenizer)
  equals the in-process judge's prompt row (:meth:`PromptJudge.prompt_rows`, the Hugging Face tokenizer);
* ``p = P(L_A) / (P(L_A) + P(L_B))`` (LCA eq. 3) of both on the same comparisons: max and median
  ``|p_server - p_flax|``, and each one's label mass ``P(L_A) + P(L_B)`` (the server's among its top-20
  alternatives: a lower bound, METHODS.md §1); also against the store the in-process judge wrote.

The two are independent implementations (llama.cpp's Q4_K_M kernels with 8-bit quantised activations,
jaxrank's float32 Flax network), so ``p`` agrees within a tolerance, not exactly.

    python -m llama_cpp.server --model $(python -c "from jaxrank.models.registry import resolve; \\
        print(resolve('qwen2.5-coder-1.5b'))") --model_alias qwen2.5-coder-1.5b --port 8731 --n_ctx 2048 \\
        --n_threads 2 --logits_all true &
    python experiments/server_instrument.py --base-url http://127.0.0.1:8731/v1 --contexts 0:1

Writes ``server_instrument_<data>_<judge>.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="topicalchat")
    ap.add_argument("--aspect", default="coherence")
    ap.add_argument("--judge", default="qwen2.5-coder-1.5b", help="registry name (in process) = served model alias")
    ap.add_argument("--base-url", required=True, help="the server's OpenAI API, e.g. http://127.0.0.1:8731/v1")
    ap.add_argument("--answer-prefix", default="Response")
    ap.add_argument("--contexts", default="0:1", help="contexts compared (every ordered pair of each)")
    ap.add_argument("--max-candidates", type=int, default=None)
    ap.add_argument("--store", default=None, help="the in-process judge's store, compared too")
    ap.add_argument("--template", default=None, help="template key of the in-process judgements in --store")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    return ap.parse_args(argv)


def server_tokens(base_url: str, text: str) -> list[int]:
    """llama.cpp's token ids of ``text`` (``/extras/tokenize`` of llama_cpp.server; special tokens parsed)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(root + "/extras/tokenize", data=json.dumps({"input": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return list(json.loads(r.read())["tokens"])


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import jax.numpy as jnp

    from jaxrank.assessment.run import contexts_of, plan_pairs
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.judges.server import ServerJudge
    from jaxrank.models.loading import load_model

    cs = contexts_of(load_dataset(args.data), aspect=args.aspect, contexts=args.contexts,
                     max_candidates=args.max_candidates)
    template = pairwise_template(args.data, args.aspect)
    t0 = time.time()
    lm = load_model(args.judge, dtype=jnp.float32)
    print(f"loaded {lm.name} in {time.time() - t0:.0f} s; load {os.getloadavg()[0]:.1f}", flush=True)
    flax = PromptJudge(lm, template, answer_prefix=args.answer_prefix, batch_size=8)
    srv = ServerJudge(args.base_url, args.judge, template, answer_prefix=args.answer_prefix,
                      chat_template=lm.chat_template, max_concurrency=1, logprobs=True, min_label_mass=0.0)
    stored = {}
    if args.store:
        for line in open(args.store):
            r = json.loads(line)
            if args.template is None or r["template"] == args.template:
                stored[(r["context"], r["a"], r["b"])] = r["p"]
    fk = f"{flax.template.key}"
    rows, same_text, same_ids, n_tok = [], 0, 0, []
    t_f = t_s = 0.0
    for k in range(len(cs.ids)):
        ctx, cands, cid = cs.texts[k], cs.candidates[k], cs.candidate_ids[k]
        i, j = plan_pairs(len(cands))
        flax.prepare(ctx, cands)
        texts = [flax.prompt_text(ctx, cands[a], cands[b]) for a, b in zip(i, j)]
        same_text += sum(srv.request_prompt(ctx, cands[a], cands[b])["prompt"] == t for a, b, t in zip(i, j, texts))
        frows, _ = flax.prompt_rows(ctx, cands, i, j)
        for t, fr in zip(texts, frows):
            st = server_tokens(args.base_url, t)
            same_ids += st == list(fr)
            n_tok.append(len(st))
        t1 = time.time()
        a = flax.compare(ctx, cands, i, j)
        t_f += time.time() - t1
        t1 = time.time()
        b = srv.compare(ctx, cands, i, j)
        t_s += time.time() - t1
        for r in range(len(i)):
            rows.append((cs.ids[k], cid[i[r]], cid[j[r]], float(a.p[r]), float(b.p[r]), float(a.label_mass[r]),
                         float(b.label_mass[r]), stored.get((cs.ids[k], cid[i[r]], cid[j[r]]), np.nan)))
        print(f"context {cs.ids[k]}: {len(i)} comparisons; load {os.getloadavg()[0]:.1f}", flush=True)
    p_f, p_s, m_f, m_s, p_st = (np.array([r[c] for r in rows]) for c in (3, 4, 5, 6, 7))
    d = np.abs(p_f - p_s)
    n = len(rows)
    agree = float(np.mean((p_f > 0.5) == (p_s > 0.5)))
    rho = float(np.corrcoef(p_f, p_s)[0, 1])
    lines = [f"# Instrument check: {args.judge} behind llama.cpp's server vs in process ({args.data} {args.aspect})",
             "", "Generated by `experiments/server_instrument.py` "
             f"(`--contexts {args.contexts} --answer-prefix {args.answer_prefix}`).", "",
             f"- Server judge: `{srv.name}`, template key `{srv.template_key}` ({srv.reading.note}).",
             f"- In-process judge: `{flax.name}` (float32 Flax), template key `{flax.template_key}` "
             f"(template `{fk}`, answer prefix {args.answer_prefix!r}).",
             f"- {n} comparisons ({len(cs.ids)} contexts x every ordered pair); prompts of "
             f"{min(n_tok)}-{max(n_tok)} tokens.",
             f"- Same prompt text (client-rendered chat template = `PromptJudge.prompt_text`): {same_text}/{n}; "
             f"same token ids (llama.cpp `/extras/tokenize` = `PromptJudge.prompt_rows`): {same_ids}/{n}.",
             f"- |p_server - p_flax|: max {d.max():.4f}, median {np.median(d):.4f}, mean {d.mean():.4f}; "
             f"same side of 1/2: {agree:.3f}; Pearson r {rho:.4f}.",
             f"- Label mass P(L_A) + P(L_B): in process min {m_f.min():.4f} median {np.median(m_f):.4f}; "
             f"server (top-20) min {m_s.min():.4f} median {np.median(m_s):.4f}; max |difference| "
             f"{np.abs(m_f - m_s).max():.4f}.",
             f"- Time for these comparisons: in process {t_f:.0f} s, server {t_s:.0f} s (load at the end "
             f"{os.getloadavg()[0]:.1f}, 2 cores shared).", ""]
    if np.isfinite(p_st).any():
        ok = np.isfinite(p_st)
        lines.insert(-1, f"- In process now vs the store (`{Path(args.store).name}`): max |p - p_store| "
                         f"{np.abs(p_f[ok] - p_st[ok]).max():.2e} over {int(ok.sum())} comparisons.")
    lines += ["| context | A | B | p in process | p server | mass in process | mass server |",
              "|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {c} | {a} | {b} | {pf:.4f} | {ps:.4f} | {mf:.4f} | {ms:.4f} |"
              for c, a, b, pf, ps, mf, ms, _ in rows]
    out = Path(args.out) / f"server_instrument_{args.data}_{args.judge}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]), flush=True)


if __name__ == "__main__":
    main()
