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


def _st_folder(tmp: Path, minilm, modules=("Transformer", "Pooling", "Normalize"), pooling=None, sbert=None,
               max_positions=512):
    """A tiny random BERT saved by transformers, with MiniLM's tokenizer, as a sentence-transformers folder."""
    import json
    import shutil

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (Path(minilm.path) / f).exists():
            shutil.copy(Path(minilm.path) / f, tmp)
    mods = [{"idx": i, "name": str(i), "path": {"Pooling": "1_Pooling"}.get(t, f"{i}_{t}" if i else ""),
             "type": f"sentence_transformers.models.{t}"} for i, t in enumerate(modules)]
    (tmp / "modules.json").write_text(json.dumps(mods))
    (tmp / "1_Pooling").mkdir(exist_ok=True)
    (tmp / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False, **(pooling or {})}))
    if sbert is not None:
        (tmp / "sentence_bert_config.json").write_text(json.dumps(sbert))
    torch.manual_seed(0)
    m = transformers.BertModel(transformers.BertConfig(
        vocab_size=minilm.config.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=max_positions)).eval()
    m.save_pretrained(tmp)
    return tmp


def test_default_max_length_is_the_folders_max_seq_length(tmp_path, minilm):
    d = _st_folder(tmp_path / "a", minilm, sbert={"max_seq_length": 16})
    judge = SimilarityJudge(str(d))
    assert judge.max_length == 16 and "-L16-" in judge.fingerprint
    long = " ".join([CTX] * 3)                               # about 70 tokens
    ref = _torch_cos(d, [long, *CANDS[:2]], max_length=16)   # torch cut at the folder's 16 tokens
    with pytest.warns(UserWarning, match="cut"):
        np.testing.assert_allclose(judge.scores(long, CANDS[:2]), ref, atol=1e-4)
    assert np.abs(ref - _torch_cos(d, [long, *CANDS[:2]], max_length=64)).max() > 1e-3   # 16 matters
    assert SimilarityJudge(str(d), max_length=64).max_length == 64                       # given: kept
    # at most the position table; 256 without a sentence_bert_config.json
    d = _st_folder(tmp_path / "b", minilm, sbert={"max_seq_length": 100}, max_positions=64)
    assert SimilarityJudge(str(d)).max_length == 64
    assert SimilarityJudge(str(_st_folder(tmp_path / "c", minilm))).max_length == 256


def test_minilm_default_max_length_is_its_256(judge, minilm):
    assert judge.max_length == 256 and judge.fingerprint == f"{minilm.fingerprint}-L256-mean"


def test_folder_with_a_dense_module_is_refused(tmp_path, minilm):
    d = _st_folder(tmp_path, minilm, ("Transformer", "Pooling", "Dense", "Normalize"))
    for pooling in (None, "mean"):                           # no pooling makes up for the missing projection
        with pytest.raises(ValueError, match="'sentence_transformers.models.Dense' module"):
            SimilarityJudge(str(d), pooling=pooling)


def test_folder_with_lasttoken_pooling_is_named(tmp_path, minilm):
    d = _st_folder(tmp_path, minilm, pooling={"pooling_mode_lasttoken": True})      # mean + lasttoken
    with pytest.raises(ValueError, match="pooling_mode_lasttoken.*pass pooling="):
        SimilarityJudge(str(d))
    with pytest.warns(UserWarning, match="cannot be read.*pooling_mode_lasttoken"):
        assert SimilarityJudge(str(d), pooling="mean").pooling == "mean"
