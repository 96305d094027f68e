"""Embedding-similarity judge (jaxrank.judges.similarity) on the real MiniLM-L6 against torch."""

from pathlib import Path

import numpy as np
import pytest

from jaxrank.judges.similarity import SimilarityJudge

CTX = "The city council voted on Tuesday to close the old river bridge for a year of repairs starting in May."
CANDS = ["The council will close the river bridge for repairs from May.",
         "A bridge closes.",
         "Football scores from the weekend matches.",
         "Repairs to the old bridge, approved by the council, will take a year."]


@pytest.fixture(scope="module")
def judge(minilm):
    return SimilarityJudge(minilm, batch_size=4)


def _torch_cos(path: Path, texts, max_length=256):
    """Cosine of each text to the first one: transformers BertModel, masked mean pooling, L2 norm."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    m = transformers.BertModel.from_pretrained(str(path)).eval()
    with torch.no_grad():
        h = m(**enc).last_hidden_state
    mask = enc["attention_mask"][..., None].float()
    e = torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1).double().numpy()
    return e[1:] @ e[0]


def test_p_equals_sigmoid_of_torch_cosine_gap(judge, minilm):
    ref = _torch_cos(minilm.path, [CTX, *CANDS])
    np.testing.assert_allclose(judge.scores(CTX, CANDS), ref, atol=1e-4)
    i, j = np.array([0, 1, 2, 3, 0, 2]), np.array([1, 0, 3, 2, 2, 0])
    jd = judge.compare(CTX, CANDS, i, j)
    expected = 1 / (1 + np.exp(-judge.k * (ref[i] - ref[j])))
    np.testing.assert_allclose(jd.p, expected, atol=1e-4)
    assert np.all((jd.p > 0) & (jd.p < 1)) and not jd.truncated
    assert jd.p[4] > 0.9                                   # on-topic beats off-topic
    np.testing.assert_allclose(np.exp(jd.logits[:, 0]) / np.exp(jd.logits).sum(1), jd.p, atol=1e-6)


def test_antisymmetric_and_cached(judge, monkeypatch):
    n = len(CANDS)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    jd = judge.compare(CTX, CANDS, i, j)
    back = judge.compare(CTX, CANDS, j, i)
    np.testing.assert_allclose(jd.p, 1 - back.p, atol=1e-6)
    # every pair of a new context: one embedding pass over context + candidates, then none
    calls = []
    real = judge.embed
    monkeypatch.setattr(judge, "embed", lambda texts: calls.append(len(texts)) or real(texts))
    other = [c + " Indeed." for c in CANDS]
    for a, b in zip(i, j):
        judge.compare(CTX, other, [a], [b])
    assert calls == [n + 1]
    assert judge.scores(CTX, other).shape == (n,) and calls == [n + 1]


def test_truncation_buckets_and_errors(judge, minilm):
    long_ctx = " ".join([CTX] * 30)
    with pytest.warns(UserWarning, match="cut"):
        jd = judge.compare(long_ctx, CANDS, [0], [1])
    assert jd.truncated
    ref = _torch_cos(minilm.path, [long_ctx, *CANDS[:2]])        # torch truncates at 256 tokens too
    np.testing.assert_allclose(judge.scores(long_ctx, CANDS)[:2], ref, atol=1e-4)
    assert judge._plan([256, 10, 12, 40, 11]) == [(2, [[0], [3, 2, 4, 1]])]     # two packed rows of 256
    with pytest.raises(ValueError, match="outside"):
        judge.compare(CTX, CANDS, [0], [4])
    with pytest.raises(ValueError, match="empty"):
        judge.compare(CTX, ["a", ""], [0], [1])
    assert judge.compare(CTX, CANDS, [], []).p.shape == (0,)
    assert judge.name == "minilm-l6-cos-k20"
    with pytest.raises(ValueError, match="k must"):
        SimilarityJudge(minilm, k=0)
    with pytest.raises(ValueError, match="max_length"):
        SimilarityJudge(minilm, max_length=10_000)


def test_rejects_decoders():
    from tiny_lm import tiny_lm

    with pytest.raises(ValueError, match="BERT"):
        SimilarityJudge(tiny_lm())
