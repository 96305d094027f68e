"""jaxrank.compilation.clear_caches: compiled programs give their memory maps back, and still run after."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrank.compilation import ExportedProgram, clear_caches

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/maps")


def _maps() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


def test_kept_programs_release_their_maps_and_run_again(tmp_path):
    clear_caches()
    programs = [ExportedProgram(lambda x, k=k: (jnp.cumsum(x) * (k + 1.0),), name=f"clear-test-{k}",
                                directory=tmp_path / "exported", executables=tmp_path / "compiled")
                for k in range(40)]
    before = _maps()
    firsts = [np.asarray(p(jnp.arange(k + 3.0))[0]) for k, p in enumerate(programs)]
    grown = _maps() - before
    assert grown > 40 * 4, f"40 compiled programs added only {grown} maps: the premise of the test does not hold"
    clear_caches()
    assert _maps() - before < grown / 4
    for k, (p, first) in enumerate(zip(programs, firsts)):          # loaded again from the files
        again = np.asarray(p(jnp.arange(k + 3.0))[0])
        np.testing.assert_array_equal(again, np.cumsum(np.arange(k + 3.0)) * (k + 1.0))
        np.testing.assert_array_equal(again, first)


def test_plain_jit_programs_are_released_too():
    clear_caches()
    fns = [jax.jit(lambda x, k=k: jnp.sin(x) + k) for k in range(40)]
    before = _maps()
    for k, f in enumerate(fns):
        f(jnp.ones(k + 1)).block_until_ready()
    grown = _maps() - before
    assert grown > 40 * 4
    clear_caches()
    assert _maps() - before < grown / 4
