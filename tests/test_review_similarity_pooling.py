"""SimilarityJudge pools as its sentence-transformers folder says (``1_Pooling/config.json``).

A tiny random BERT saved by transformers with a CLS-pooling sentence-transformers folder (as BGE / GTE
models have): the judge's embeddings against torch (BertModel's CLS token, L2-normalised), an explicit
pooling that differs from the folder's warns, the pooling is in the store key, and MiniLM keeps its key.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from jaxrank.judges.similarity import SimilarityJudge

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["The council approved a park.", "A completely different sentence about rivers and the spring.", "Hi"]


def _folder(tmp: Path, minilm, modes: dict) -> tuple:
    d = tmp / "st"
    (d / "1_Pooling").mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "modules.json"):
        if (Path(minilm.path) / f).exists():
            shutil.copy(Path(minilm.path) / f, d)
    (d / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **modes}))
    cfg = transformers.BertConfig(vocab_size=minilm.config.vocab_size, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=48, max_position_embeddings=512)
    torch.manual_seed(0)
    m = transformers.BertModel(cfg).eval()
    m.save_pretrained(d)
    return m, d


def _torch(m, d, pooling):
    tok = transformers.AutoTokenizer.from_pretrained(d)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = m(**enc).last_hidden_state
    if pooling == "cls":
        e = h[:, 0]
    else:
        mm = enc["attention_mask"][..., None].float()
        e = (h * mm).sum(1) / mm.sum(1)
    return torch.nn.functional.normalize(e, dim=-1).numpy()


@pytest.fixture(scope="module")
def cls_folder(tmp_path_factory, minilm):
    return _folder(tmp_path_factory.mktemp("cls"), minilm,
                   {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})


def test_default_pooling_is_the_folders_cls(cls_folder):
    m, d = cls_folder
    judge = SimilarityJudge(str(d))
    assert judge.pooling == "cls"
    e, _ = judge.embed(TEXTS)
    np.testing.assert_allclose(e, _torch(m, d, "cls"), atol=2e-5)
    assert np.abs(e - _torch(m, d, "mean")).max() > 1e-2        # mean pooling would be another embedding


def test_explicit_pooling_that_differs_warns_and_is_used(cls_folder):
    m, d = cls_folder
    with pytest.warns(UserWarning, match="pooling='mean' differs from .*'cls'"):
        judge = SimilarityJudge(str(d), pooling="mean")
    e, _ = judge.embed(TEXTS)
    np.testing.assert_allclose(e, _torch(m, d, "mean"), atol=2e-5)
    assert judge.fingerprint.endswith("-mean") and SimilarityJudge(str(d)).fingerprint.endswith("-cls")


def test_minilm_default_is_mean_and_keeps_its_key(minilm, recwarn):
    judge = SimilarityJudge(minilm)
    assert judge.pooling == "mean"
    assert judge.fingerprint == f"{minilm.fingerprint}-L256-mean"
    assert not [w for w in recwarn if "pooling" in str(w.message)]


def test_folder_with_several_modes_needs_an_explicit_pooling(tmp_path, minilm):
    _, d = _folder(tmp_path, minilm, {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True})
    with pytest.raises(ValueError, match="pooling"):
        SimilarityJudge(str(d))
    with pytest.warns(UserWarning, match="cannot be read"):
        assert SimilarityJudge(str(d), pooling="cls").pooling == "cls"
