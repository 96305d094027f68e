"""Packed rows in the BERT encoder and the similarity judge (issue 33): several texts to a row, each attending
only to itself with its own positions, equal to each text encoded alone (by transformers' PyTorch BertModel)."""

import itertools
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file  # noqa: E402

from jaxrank.judges import similarity  # noqa: E402
from jaxrank.judges.similarity import SimilarityJudge  # noqa: E402
from jaxrank.models import bert  # noqa: E402

TINY = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=24, type_vocab_size=2, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(3)
    tm = transformers.BertModel(transformers.BertConfig(**TINY)).eval()
    with torch.no_grad():
        for n, p in tm.named_parameters():
            if "LayerNorm" in n:
                p.add_(0.2 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("bert") / "tiny"
    tm.save_pretrained(d)
    cfg = bert.BertConfig.from_hf(json.loads((Path(d) / "config.json").read_text()))
    return tm, bert.load_state_dict(cfg, load_file(str(Path(d) / "model.safetensors")))


def _pack(texts, rows, length):
    """ids and segment ids of ``rows`` (lists of indices into ``texts``), each row padded with 0."""
    ids = np.zeros((len(rows), length), np.int32)
    seg = np.zeros((len(rows), length), np.int32)
    for r, row in enumerate(rows):
        at = 0
        for s, k in enumerate(row):
            ids[r, at:at + len(texts[k])], seg[r, at:at + len(texts[k])] = texts[k], s + 1
            at += len(texts[k])
    return ids, seg


def _torch_alone(tm, x):
    """Last hidden state [n, H] of one text encoded alone (no padding) by transformers."""
    with torch.no_grad():
        return tm(input_ids=torch.tensor([x])).last_hidden_state[0].double().numpy()


def test_segment_positions_restart_at_each_text():
    rng = np.random.default_rng(0)
    seg = np.sort(rng.integers(0, 5, (4, 30)), axis=1)[:, ::-1].copy()      # runs of equal ids, 0s (padding) last
    seg[seg > 0] = 5 - seg[seg > 0]                                          # texts 1, 2, ... in order
    expected = np.zeros_like(seg)
    for b in range(seg.shape[0]):
        for t in range(1, seg.shape[1]):
            expected[b, t] = expected[b, t - 1] + 1 if seg[b, t] == seg[b, t - 1] else 0
    np.testing.assert_array_equal(np.asarray(bert.segment_positions(jnp.asarray(seg))), expected)


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "mean_sqrt_len"])
def test_packed_rows_equal_each_text_alone_in_torch(tiny, pooling):
    tm, m = tiny
    rng = np.random.default_rng(1)
    lens = [5, 17, 3, 9, 24, 2, 11, 6]
    texts = [rng.integers(1, TINY["vocab_size"], n).tolist() for n in lens]
    rows = [[0, 1], [2, 3, 5, 7], [4], [6]]                  # row length 24 = the position table's size
    ids, seg = _pack(texts, rows, 24)
    h, _ = m(jnp.asarray(ids), segment_ids=jnp.asarray(seg))
    e = np.asarray(bert.embed_packed(m, jnp.asarray(ids), jnp.asarray(seg), num_segments=4, pooling=pooling))
    assert e.shape == (4, 4, TINY["hidden_size"])
    for r, row in enumerate(rows):
        for s, k in enumerate(row):
            ref_h = _torch_alone(tm, texts[k])
            np.testing.assert_allclose(np.asarray(h)[r][seg[r] == s + 1], ref_h, atol=1e-4)
            pooled = {"mean": ref_h.mean(0), "cls": ref_h[0], "max": ref_h.max(0),
                      "mean_sqrt_len": ref_h.sum(0) / np.sqrt(len(ref_h))}[pooling]
            np.testing.assert_allclose(e[r, s], pooled / np.linalg.norm(pooled), atol=1e-4)
        assert not np.any(e[r, len(row):])                   # no text there: zeros


def test_a_text_does_not_see_its_row_mates(tiny):
    _, m = tiny
    rng = np.random.default_rng(2)
    texts = [rng.integers(1, TINY["vocab_size"], n).tolist() for n in (7, 9, 6)]
    alone = np.asarray(bert.embed(m, jnp.asarray([texts[0]]), jnp.ones((1, 7), jnp.int32)))[0]
    for mates in ([1], [2], [1, 2]):
        ids, seg = _pack(texts, [[0, *mates]], 24)
        e = np.asarray(bert.embed_packed(m, jnp.asarray(ids), jnp.asarray(seg), num_segments=3))
        np.testing.assert_allclose(e[0, 0], alone, atol=1e-6)
    with pytest.raises(ValueError, match="mask or segment_ids"):
        m(jnp.asarray(ids), jnp.ones(ids.shape, jnp.int32), segment_ids=jnp.asarray(seg))
    with pytest.raises(ValueError, match="unknown mode"):
        bert.pool_segments(jnp.zeros((1, 4, 2)), jnp.ones((1, 4), jnp.int32), 1, "median")


def _optimum_rows(lengths, cap, most):
    """The fewest rows of ``cap`` tokens and ``most`` texts holding all ``lengths`` (brute force)."""
    n = len(lengths)
    for k in range(1, n + 1):
        for assign in itertools.product(range(k), repeat=n):
            load, count = [0] * k, [0] * k
            for x, r in zip(lengths, assign):
                load[r] += x
                count[r] += 1
            if max(load) <= cap and max(count) <= most:
                return k
    return n


def test_pack_holds_every_text_once_within_the_row(minilm):
    judge = SimilarityJudge(minilm, batch_size=4, max_length=64)   # rows of 64 tokens, at most 16 texts
    assert (judge.row_length, judge.texts_per_row) == (64, 16)
    rng = np.random.default_rng(4)
    for trial in range(30):
        lengths = rng.integers(2, 65, rng.integers(1, 8)).tolist()
        rows = judge._pack(lengths)
        assert sorted(k for row in rows for k in row) == list(range(len(lengths)))
        assert all(sum(lengths[k] for k in row) <= 64 for row in rows)
        opt = _optimum_rows(lengths, 64, 16)
        assert opt <= len(rows) <= 11 / 9 * opt + 6 / 9          # best-fit decreasing's bound (Dosa, 2007)
    rows = judge._pack([3] * 40)                                   # the cap on texts, not tokens, binds
    assert [len(r) for r in rows] == [16, 16, 8]
    with pytest.raises(ValueError, match="does not fit"):
        judge._pack([65])
    assert judge._plan([]) == []
    # passes: batch_size rows each, the last one filled up; a small job, a power of two of rows
    plan = judge._plan([64] * 9)
    assert [nb for nb, _ in plan] == [4, 4, 4] and [len(p) for _, p in plan] == [4, 4, 1]
    assert [nb for nb, _ in judge._plan([64] * 3)] == [4] and [nb for nb, _ in judge._plan([64])] == [1]


def _torch_embeddings(path, texts, max_length=256):
    """transformers' BertModel, a text a row (padded, masked): the mean of each text's last hidden states
    over its own tokens, L2-normalised (sentence-transformers' Pooling(mean) + Normalize)."""
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    tm = transformers.BertModel.from_pretrained(str(path)).eval()
    enc = tok(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = tm(**enc).last_hidden_state.double().numpy()
    m = enc["attention_mask"].numpy()[..., None]
    mean = (h * m).sum(1) / m.sum(1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


def test_judge_packs_texts_of_many_lengths_into_one_compiled_shape(minilm):
    words = ("the council closed the old river bridge for a year of repairs after the flood while traffic "
             "went round by the ring road and shops on the high street said trade fell").split()
    rng = np.random.default_rng(5)
    texts = [" ".join(rng.choice(words, n)) for n in (*rng.integers(1, 60, 40), 300, 120, 2)]
    judge = SimilarityJudge(minilm, batch_size=3)            # a shape no other test compiles: 3 x 256
    before = similarity._encode._cache_size()
    e, truncated = judge.embed(texts)
    assert truncated and judge.stats.shapes == {(3, 256)} and judge.stats.passes >= 2
    assert similarity._encode._cache_size() == before + 1      # one shape, one compile
    # each embedding is the text's own: jaxrank's unpacked encoder and PyTorch, a text a row (padding masked)
    enc = minilm.tokenizer(texts, truncation=True, max_length=256, padding="max_length", return_tensors="np")
    unpacked = bert.embed(minilm.model, jnp.asarray(enc["input_ids"]), jnp.asarray(enc["attention_mask"]))
    np.testing.assert_allclose(e, np.asarray(unpacked), atol=2e-6)
    short = [k for k, t in enumerate(texts) if len(t.split()) < 60]        # PyTorch pads them to 60-odd tokens
    np.testing.assert_allclose(e[short], _torch_embeddings(minilm.path, [texts[k] for k in short]), atol=1e-5)
    more = SimilarityJudge(minilm, batch_size=3)
    more.embed([t + " again" for t in texts])                  # other texts, the same shape: no compile
    assert similarity._encode._cache_size() == before + 1
    with pytest.raises(ValueError, match="pooling"):
        SimilarityJudge(minilm, pooling="median")


def test_texts_with_the_same_tokens_tie_exactly(minilm):
    # the uncased tokenizer reads these alike; packed apart, rounding would set them ~1e-7 apart (24 of the main
    # job's 24,000 decisions were such ties broken), so they share one embedding: p = 0.5 exactly, as unpacked
    a, b = "The Bridge is closed for repairs.", "the bridge  is closed for REPAIRS."
    assert minilm.tokenizer(a)["input_ids"] == minilm.tokenizer(b)["input_ids"]
    judge = SimilarityJudge(minilm, batch_size=2)
    told = []
    judge.prefetch([a, "A long day of rain.", "Football results from the weekend matches.", b], progress=told.append)
    assert sum(told) == 4 and judge.stats.texts == 4
    e, _ = judge.embed([a, b])
    np.testing.assert_array_equal(e[0], e[1])
    jd = judge.compare("The council closed the bridge.", [a, "Football results.", b], [0, 2], [2, 0])
    assert jd.p.tolist() == [0.5, 0.5]
