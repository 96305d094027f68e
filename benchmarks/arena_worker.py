"""arena-rank's Bradley-Terry in its own process, for ``benchmarks/arena_scale.py``.

arena-rank turns on ``jax_enable_x64`` for the whole process when it is
imported, so ``arena_scale.py`` runs this file with another Python (an
environment where ``pip install arena-rank`` was done, e.g.
``python3 -m venv /work/arena-venv && /work/arena-venv/bin/pip install arena-rank``)
and passes the data in an ``.npz`` file:

* ``a``, ``b``: int item indices of the two sides of every raw comparison;
* ``outcome``: 1.0 if ``a`` won, 0.0 if ``b`` won, 0.5 for a draw;
* ``n_items``; ``ftol``, ``gtol``, ``max_iter``: L-BFGS settings of
  ``arena_rank.models.bradley_terry.BradleyTerry``; ``repeats``.

What is timed, inside this process (interpreter start-up, imports and building
the pandas DataFrame from the arrays are not): arena-rank's own count
aggregation, ``PairDataset.from_pandas`` (unique ``(a, b, outcome)`` rows with
counts; the outcome column is numeric and mapped with a dict, pandas' vectorised
path), then ``BradleyTerry(n).fit(dataset)`` up to ``block_until_ready``. The
first repeat includes JAX compilation; later repeats are steady state.

Writes JSON: ``scores`` (natural-log strengths, ``params["ratings"]``), one
``{"aggregate_s", "fit_s", "total_s", "rows"}`` per repeat, versions.

    python arena_worker.py DATA.npz OUT.json
"""

from __future__ import annotations

import json
import sys
import time


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise SystemExit("usage: arena_worker.py DATA.npz OUT.json")
    import numpy as np

    data = np.load(argv[0])
    import jax
    import pandas as pd
    from importlib.metadata import version

    from arena_rank.models.bradley_terry import BradleyTerry
    from arena_rank.utils.data_utils import PairDataset

    n = int(data["n_items"])
    df = pd.DataFrame({"model_a": data["a"].astype(np.int64), "model_b": data["b"].astype(np.int64),
                       "winner": data["outcome"].astype(np.float64)})
    outcome_map = {1.0: 1.0, 0.0: 0.0, 0.5: 0.5}
    runs, scores, iters = [], None, None
    for _ in range(int(data["repeats"])):
        t0 = time.perf_counter()
        ds = PairDataset.from_pandas(df, competitor_cols=["model_a", "model_b"], outcome_col="winner",
                                     outcome_map=outcome_map)
        jax.block_until_ready(ds.opt_weights)
        t1 = time.perf_counter()
        model = BradleyTerry(n, ftol=float(data["ftol"]), gtol=float(data["gtol"]),
                             max_iter=int(data["max_iter"]))
        model.fit(ds)
        r = jax.block_until_ready(model.params["ratings"])
        t2 = time.perf_counter()
        if ds.competitors != list(range(n)):
            raise SystemExit(f"arena_worker: expected competitors 0..{n - 1}, got {ds.competitors[:5]}...")
        scores = np.asarray(r, np.float64)
        runs.append({"aggregate_s": t1 - t0, "fit_s": t2 - t1, "total_s": t2 - t0, "rows": int(ds.n_pairs)})
    out = {"scores": scores.tolist(), "runs": runs, "arena_rank": version("arena-rank"), "jax": jax.__version__,
           "x64": bool(jax.config.jax_enable_x64)}
    with open(argv[1], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
