"""The judges' label probabilities against PyTorch ``transformers`` on the same GGUF and the same token ids.

``transformers`` dequantises the GGUF itself (``from_pretrained(gguf_file=...)``) and runs its own
modeling code: an implementation independent of jaxrank's loader and Flax model. Both read the ids of
the whole rendered SummEval prompt; the labels' log-probabilities, ``p`` and the label mass must agree.
Needs torch (the test extra); each model needs its registry package (skipped when it is missing).
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import load_model_or_skip
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from jaxrank.models.registry import resolve

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DATA = Path(os.environ.get("JAXRANK_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _two_prompts():
    rows = [json.loads(x) for x in open(DATA / "summeval" / "summeval.jsonl")]
    rows = [r for r in rows if r["article_id"] == "A1"][:3]
    return " ".join(rows[0]["article"].split()[:150]), [r["summary"] for r in rows]


@pytest.mark.parametrize("name", ["smollm2-135m", "qwen2.5-coder-0.5b"])
def test_label_probabilities_equal_pytorch_transformers(name):
    lm = load_model_or_skip(name)
    path = resolve(name)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                            dtype=torch.float32)
    ref.eval()
    ctx, cands = _two_prompts()
    for prefix in ("", "Summary"):       # the labels right after the assistant header, and after a prefix
        _check(lm, ref, ctx, cands, prefix)


def _check(lm, ref, ctx, cands, prefix):
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"), answer_prefix=prefix, min_label_mass=0.0)
    i, j = [0, 2], [1, 0]
    res = judge.compare(ctx, cands, i, j)
    rows, _ = judge.prompt_rows(ctx, cands, i, j)
    a_ids, b_ids = judge.reading.ids
    assert len(a_ids) == len(b_ids) == 1                      # "A"/"B" (" A"/" B" after the prefix): one token
    for r in range(len(i)):
        with torch.no_grad():
            logits = ref(torch.tensor([rows[r]])).logits[0, -1].double()
        lp = torch.log_softmax(logits, -1).numpy()
        want = np.array([lp[a_ids[0]], lp[b_ids[0]]])
        np.testing.assert_allclose(res.logits[r], want, atol=2e-3)
        np.testing.assert_allclose(res.p[r], 1 / (1 + np.exp(want[1] - want[0])), atol=5e-4)
        np.testing.assert_allclose(res.label_mass[r], np.exp(want).sum(), rtol=5e-3, atol=1e-5)
        assert int(res.top_ids[r][0]) == int(np.argmax(lp))  # the same answer token
