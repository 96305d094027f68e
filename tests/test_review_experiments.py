"""Review fixes in the experiment scripts, each checked against an independent computation (SciPy / NumPy)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from jaxrank import data
from jaxrank.assessment.store import JudgementStore

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        spec = importlib.util.spec_from_file_location(f"_rev_{name}", ROOT / "experiments" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    return mod


@pytest.mark.parametrize("debias", ["none", "permutation"])
def test_assess_store_keeps_only_the_judged_candidates(tmp_path, debias):
    """A store that judged 4 of an article's 16 summaries is assessed on those 4: its average-probability
    Spearman per context is SciPy's over the 4 (not a correlation diluted by 12 tied, never-judged ones)."""
    lm = data.label_matrix(data.load_dataset("summeval"), "coherence")
    rng = np.random.default_rng(1)
    picks = (1, 6, 10, 15)                           # spread over the 16, not the first four
    recs, want = [], {}
    for ctx in ("A0", "A1", "A2"):
        row = lm.context_ids.index(ctx)
        assert int(lm.mask[row].sum()) == 16
        ids = [lm.candidate_ids[row][k] for k in picks]
        human = np.asarray(lm.labels[row])[list(picks)]
        wins = {c: [] for c in ids}
        for x in range(4):
            for y in range(4):
                if x != y:
                    p = float(1 / (1 + np.exp(-(human[x] - human[y] + rng.normal(0, 1.5)))))
                    recs.append(dict(judge="toy", template="t", context=ctx, a=ids[x], b=ids[y], p=p))
                    wins[ids[x]].append(p), wins[ids[y]].append(1 - p)
        score = [np.mean(wins[c]) for c in ids]      # average probability of winning, both positions
        want[ctx] = stats.spearmanr(score, human)[0]
    path = tmp_path / "store.jsonl"
    JudgementStore(path).append(recs)
    a, judge = _script("_common").assess_store(path, data="summeval", aspect="coherence", debias=debias,
                                               methods=("average_probability",))
    assert judge == "toy" and list(a.contexts) == ["A0", "A1", "A2"]
    got = np.asarray(a.spearman["average_probability"], float)
    np.testing.assert_allclose(got, [want[c] for c in a.contexts], atol=1e-5)
    assert float(a.mean["average_probability"]) == pytest.approx(np.mean(list(want.values())), abs=1e-5)
