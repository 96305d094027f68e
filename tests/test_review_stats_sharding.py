"""Review fix in jaxrank.sharding: a per-context list option is split with the contexts like an array; a
per-context tuple (static) that the scorer refuses on a device's share names the option."""

import os
import subprocess
import sys
from pathlib import Path


def four_device_checks():
    import jax
    import numpy as np
    import pytest

    import jaxrank as jr
    from jaxrank import sharding as S

    assert len(jax.devices()) == 4
    rng = np.random.default_rng(0)
    n, b, r = 4, 6, 10                                  # 6 contexts on 4 devices: padded too
    i = rng.integers(0, n, (b, r))
    j = (i + rng.integers(1, n, (b, r))) % n
    p = rng.uniform(0.05, 0.95, (b, r)).astype(np.float32)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    th = [float(x) for x in rng.uniform(0.3, 0.7, b)]
    got = np.asarray(S.shard_contexts(jr.win_ratio, c, threshold=th))
    for k in range(b):                                   # each context alone, with its own threshold
        ck = jr.Comparisons.from_pairs(i[k], j[k], p[k], num_items=n)
        np.testing.assert_allclose(got[k], np.asarray(jr.win_ratio(ck, threshold=th[k])), atol=1e-6)
    with pytest.raises(ValueError, match=r"option threshold is a tuple of one value per context.*np.asarray"):
        S.shard_contexts(jr.win_ratio, c, threshold=tuple(th))
    print("4 devices: OK")


def test_per_context_sequences_on_four_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip())
    res = subprocess.run([sys.executable, "-c", "import test_review_stats_sharding as t; t.four_device_checks()"],
                         cwd=Path(__file__).parent, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "4 devices: OK" in res.stdout, res.stdout + res.stderr[-5000:]
