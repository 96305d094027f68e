"""Peak host memory of loading each registered model, against the size of its weights.

One fresh subprocess per (model, dtype) case imports JAX, records its peak
RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) as the baseline, loads the
model with :func:`jaxrank.models.load_model` (tokenizer off: weights only) and
records the peak again. Reported: ``peak - baseline`` against the weights'
size in the loaded dtype (``sum(param.nbytes)``), as a ratio (1.0 would be the
weights alone; a lean loader adds one stacked parameter and one float32 tensor
in flight), and the load time. ``--source DIR`` imports jaxrank from another
checkout (e.g. the main branch, for the "before" rows). Registered models
that are not installed are skipped (and the report says so). ``--smoke``
loads only the smallest installed model in float32, once.

    python benchmarks/model_loading.py [--models a,b] [--dtypes float32,bfloat16]
                                       [--source DIR] [--tag before] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # _report.py beside this file
from _report import Report, load_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp
jnp.zeros(1).block_until_ready()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
from jaxrank.models import load_model
from flax import nnx
t0 = time.perf_counter()
lm = load_model(sys.argv[2], dtype=getattr(jnp, sys.argv[3]), tokenizer=False)
leaves = jax.tree.leaves(nnx.state(lm.model, nnx.Param))
jax.block_until_ready(leaves)
took = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"base": base, "peak": peak, "weights": sum(x.nbytes for x in leaves), "seconds": took,
                  "file": str(lm.path)}))
"""


def installed(name: str) -> bool:
    from jaxrank.models import registry

    try:
        registry.resolve(name)
        return True
    except FileNotFoundError:
        return False


def measure(source: str, model: str, dtype: str, timeout: float = 900) -> dict:
    """One case in a fresh process; ``{"error": ...}`` when it fails or is killed."""
    r = subprocess.run([sys.executable, "-c", CHILD, source, model, dtype], capture_output=True, text=True,
                       timeout=timeout, cwd=source)
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    from jaxrank.models import registry

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(registry.MODELS))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--source", default=str(ROOT), help="jaxrank checkout the subprocesses import")
    ap.add_argument("--tag", default=None, help="results name suffix (model_loading_TAG)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    dtypes = [d for d in args.dtypes.split(",") if d]
    rep = Report("model_loading" + (f"_{args.tag}" if args.tag else ""), smoke=args.smoke)
    missing = [m for m in models if not installed(m)]
    models = [m for m in models if m not in missing]
    if args.smoke:
        models, dtypes = models[:1], ["float32"]
    rep.say(f"# Peak RSS of loading each model (one fresh process per case), jaxrank from {args.source}")
    rep.say()
    if missing:
        rep.say(f"Not installed, skipped: {', '.join(missing)} "
                f"({'; '.join(registry.MODELS[m].install_command() for m in missing)}).")
        rep.say()
    rows = []
    for m in models:
        for d in dtypes:
            r = measure(args.source, m, d)
            if "error" in r:
                rows.append((m, d, "-", "-", "-", "-", r["error"][:80], load_line()))
                rep.row(model=m, dtype=d, error=r["error"])
                continue
            extra = (r["peak"] - r["base"]) / 2**20
            w = r["weights"] / 2**20
            rows.append((m, d, f"{w:.0f}", f"{extra:.0f}", f"{extra / w:.2f}", f"{r['seconds']:.1f}", "",
                         load_line()))
            rep.row(model=m, dtype=d, weights_mib=w, peak_minus_jax_mib=extra, ratio=extra / w,
                    seconds=r["seconds"], jax_baseline_mib=r["base"] / 2**20, load=os.getloadavg()[0])
    rep.table(("model", "dtype", "weights MiB", "peak RSS - JAX baseline, MiB", "ratio", "load s", "error",
               "load avg 1/5/15"), rows)
    rep.write()


if __name__ == "__main__":
    main()
