"""Server judge throughput: the SmolLM2 judge behind llama.cpp's OpenAI-compatible server, 1/4/16 requests in flight,
side by side with the in-process Flax PromptJudge on the same model, in one process.

The same comparisons on both sides: SummEval coherence, ``--articles`` articles x ``--candidates`` summaries, all
ordered pairs, the coherence prompt in the model's chat template with the answer prefix "Summary" (labels " A"/" B").

(a) in process: :class:`~jaxrank.judges.PromptJudge` (float32 weights dequantised from the GGUF, the article's
    key/value cache shared, batches of ``--batch-size``); its first call (compilation) is reported apart.
(b) through the server: ``python -m llama_cpp.server`` (llama-cpp-python, the GGUF's own Q4_1 kernels,
    ``--server-threads`` threads) on 127.0.0.1 and a free port, started here and stopped at the end;
    :class:`~jaxrank.judges.ServerJudge` on the completions endpoint (the client renders the chat template),
    one request per comparison, ``max_concurrency`` 1, 4 and 16. A fresh judge per repeat (a judge keeps its
    answers, so a second call would pay nothing).

The sides run interleaved, ``--repeats`` times, each repeat with the machine's load average; reported are the
median rate [min, max] in comparisons per second and the ratio to the in-process rate of the same repeat.
Writes ``benchmarks/results/server_throughput.{md,csv}`` (``--smoke``: ``server_throughput_smoke.*``).

    python benchmarks/server_throughput.py [--articles 3] [--candidates 4] [--concurrency 1,4,16]
                                           [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _report import Report, load_line, machine, spread  # noqa: E402


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(gguf: Path, alias: str, threads: int, log: Path, timeout: float = 180.0):
    """Start llama.cpp's OpenAI-compatible server on 127.0.0.1 and wait until it lists its model.

    Args:
        gguf: the model file.
        alias: the model name it serves.
        threads: llama.cpp's threads.
        log: where its output goes.
        timeout: seconds to wait for it.

    Returns:
        ``(process, base_url)``.

    Raises:
        SystemExit: it exited or did not answer in time (with the end of its log).
    """
    port = free_port()
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
                             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads",
                             str(threads), "--logits_all", "true", "--verbose", "false"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"llama_cpp.server did not answer within {timeout:.0f} s: {log.read_text()[-2000:]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="smollm2-135m")
    ap.add_argument("--articles", type=int, default=3, help="SummEval articles (the first ones)")
    ap.add_argument("--candidates", type=int, default=4, help="summaries per article (all ordered pairs)")
    ap.add_argument("--concurrency", default="1,4,16", help="requests in flight, comma-separated")
    ap.add_argument("--batch-size", type=int, default=8, help="the in-process judge's batch size")
    ap.add_argument("--server-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="1 article x 3 summaries, 1 and 4 in flight, one repeat")
    ap.add_argument("--out", default=None, help="path stem of the results (default benchmarks/results/...)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.articles, args.candidates, args.repeats, args.concurrency = 1, min(args.candidates, 3), 1, "1,4"
    levels = [int(x) for x in args.concurrency.split(",")]
    try:
        import llama_cpp
        import llama_cpp.server  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"server_throughput needs llama-cpp-python with its server extra "
                         f"(pip install -e '.[server-test]'): {e}")

    from jaxrank.assessment.run import contexts_of, plan_pairs
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.judges.server import ServerJudge
    from jaxrank.models.loading import load_model

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=f"0:{args.articles}",
                     max_candidates=args.candidates)
    work = [(cs.texts[k], cs.candidates[k], *plan_pairs(len(cs.candidates[k]))) for k in range(len(cs.ids))]
    n = sum(len(i) for *_, i, _ in work)
    lm = load_model(args.judge)
    template = pairwise_template("summeval", "coherence")
    flax = PromptJudge(lm, template, answer_prefix="Summary", batch_size=args.batch_size)

    rep = Report("server_throughput", smoke=args.smoke, out=args.out)
    rep.say(f"# Server judge throughput: {lm.name} through llama.cpp's server vs in process")
    rep.say()
    rep.say(f"SummEval coherence, {len(work)} article(s) x {args.candidates} summaries, {n} ordered comparisons per "
            f"side and repeat; prompt in the model's chat template, answer prefix \"Summary\".")
    rep.say(f"Machine: {machine()}.")
    rep.say(f"Server: llama-cpp-python {llama_cpp.__version__} (`python -m llama_cpp.server`, the GGUF's Q4_1 "
            f"kernels, {args.server_threads} thread(s), n_ctx 2048) on 127.0.0.1; client: ServerJudge, completions "
            "endpoint, one request per comparison (max_tokens 1, top_logprobs 20), httpx. In process: PromptJudge, "
            f"float32 weights dequantised from the same GGUF, batch size {args.batch_size}.")
    rep.say()

    def run_flax():
        return np.concatenate([flax.compare(c, cands, i, j).p for c, cands, i, j in work])

    t0 = time.perf_counter()
    p_flax = run_flax()
    first = time.perf_counter() - t0

    log = Path(tempfile.mkdtemp()) / "llama_server.log"
    proc, url = start_server(lm.path, lm.name, args.server_threads, log)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # killed: still stop the server (finally)
    try:
        def run_server(level):
            judge = ServerJudge(url, lm.name, template, answer_prefix="Summary", chat_template=lm.chat_template,
                                logprobs=True, max_concurrency=level, timeout=600.0, min_label_mass=0.0)
            p = np.concatenate([judge.compare(c, cands, i, j).p for c, cands, i, j in work])
            assert judge.usage.requests == n and judge.usage.retries == 0, judge.usage.line()
            return p, judge.usage

        ServerJudge(url, lm.name, template, answer_prefix="Summary", chat_template=lm.chat_template,   # warm-up
                    logprobs=True, timeout=600.0, min_label_mass=0.0).compare(*work[0][:2], [0], [1])
        rates = {"in process": []}
        rates.update({lv: [] for lv in levels})
        ratios = {lv: [] for lv in levels}
        gaps, loads, tokens, p_by_level = {}, [], {}, {}
        for r in range(args.repeats):
            loads.append(load_line())
            t0 = time.perf_counter()
            again = run_flax()
            rf = n / (time.perf_counter() - t0)
            assert np.array_equal(again, p_flax)
            rates["in process"].append(rf)
            for lv in levels:
                t0 = time.perf_counter()
                p, usage = run_server(lv)
                rs = n / (time.perf_counter() - t0)
                rates[lv].append(rs)
                ratios[lv].append(rs / rf)
                p_by_level[lv] = p
                gaps[lv] = (float(np.max(np.abs(p - p_flax))), float(np.median(np.abs(p - p_flax))))
                tokens[lv] = usage.prompt_tokens / n
                rep.row(repeat=r, side=f"server, {lv} in flight", concurrency=lv, comparisons=n,
                        comparisons_per_s=rs, ratio_to_in_process=rs / rf, max_abs_p_gap=gaps[lv][0],
                        median_abs_p_gap=gaps[lv][1], load=loads[-1])
            rep.row(repeat=r, side="in process", concurrency="", comparisons=n, comparisons_per_s=rf,
                    ratio_to_in_process=1.0, max_abs_p_gap=0.0, median_abs_p_gap=0.0, load=loads[-1])
            print(f"repeat {r + 1}/{args.repeats} (load {loads[-1]}): " +
                  ", ".join(f"{k} {v[-1]:.3f}/s" for k, v in rates.items()), flush=True)
    finally:
        proc.kill()
        proc.wait()

    rep.say(f"Comparisons per second, median [min, max] over {args.repeats} interleaved repeat(s); ratio = the "
            "server's rate / the in-process rate of the same repeat.")
    rep.say()
    rows = [["in process (PromptJudge), first call incl. compilation", f"{n / first:.3f}", "", "", ""],
            ["in process (PromptJudge), steady", spread(rates["in process"]), "1", "0", "0"]]
    rows += [[f"server, {lv} request(s) in flight", spread(rates[lv]), spread(ratios[lv], fmt="{:.2f}") + "x",
              f"{gaps[lv][0]:.3f}", f"{gaps[lv][1]:.3f}"] for lv in levels]
    rep.table(["side", "comparisons / s", "ratio to in process", "max abs p gap", "median abs p gap"], rows)
    rep.say("p gap: |p through the server - p in process| per comparison (the same prompt text: llama.cpp "
            "multiplies with the GGUF's Q4_1 blocks and 8-bit-quantised activations, the in-process judge with "
            "float32 weights dequantised from them). The server's p at the different settings differ by at most "
            f"{max(float(np.max(np.abs(p - p_by_level[levels[0]]))) for p in p_by_level.values()):.1e}.")
    rep.say(f"Prompt tokens per request (the server's count): {np.mean(list(tokens.values())):.0f}. "
            "Load (1/5/15 min) before each repeat: " + "; ".join(loads) + ".")
    best = max(levels, key=lambda lv: np.median(rates[lv]))
    rep.say(f"Fastest server setting: {best} in flight, {np.median(rates[best]):.3f} comparisons/s, "
            f"{np.median(ratios[best]):.2f}x the in-process rate. llama-cpp-python's server evaluates one request "
            "at a time (its model sits behind a lock), reusing the key/value cache of the previous prompt's common "
            "prefix; requests in flight overlap only the HTTP and client work.")
    rep.write()


if __name__ == "__main__":
    main()
