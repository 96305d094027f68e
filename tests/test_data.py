"""Tests for jaxrank.data: loaders of the real human-annotated data sets in shared/data.

Expected shapes and means come from shared/data/SOURCES.md; values are cross-checked
against the raw files read independently here with plain json.
"""

import json
from collections import Counter

import numpy as np
import pytest

from jaxrank.data import ASPECTS, DATASETS, LabelMatrix, data_dir, label_matrix, load_dataset


@pytest.fixture(scope="module")
def real_dir():
    try:
        return data_dir()
    except FileNotFoundError:
        pytest.skip("real data folder (shared/data) not available")


@pytest.fixture(scope="module")
def loaded(real_dir):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = load_dataset(name, path=real_dir)
        return cache[name]

    return get


# name -> (contexts, {candidates per context: number of contexts}, rows)
EXPECTED = {
    "summeval": (100, {16: 100}, 1600),
    "topicalchat": (60, {6: 60}, 360),
    "hanna": (96, {11: 96}, 1056),
    "newsroom": (60, {7: 60}, 420),
    "webnlg2017": (223, {10: 55, 9: 143, 8: 25}, 2037),      # 193 missing outputs left out
    "webnlg2020": (178, {17: 176, 16: 2}, 3024),             # 1 empty output left out
    "personachat": (60, {5: 60}, 300),
}


def _read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_names_and_aspects():
    assert set(DATASETS) == set(EXPECTED) == set(ASPECTS)
    assert ASPECTS["webnlg2020"] == ("correctness", "data_coverage", "fluency", "relevance",
                                     "text_structure")
    assert "maintains_context" in ASPECTS["personachat"]
    assert "uses_knowledge" in ASPECTS["personachat"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shapes_and_schema(loaded, name):
    ds = loaded(name)
    n_ctx, per_ctx, n_rows = EXPECTED[name]
    assert len(ds) == n_rows
    assert ds.column_names == ["context_id", "context", "candidate_id", "candidate",
                               "reference", *ASPECTS[name]]
    ctx_ids = ds["context_id"]
    counts = Counter(ctx_ids)
    assert len(counts) == n_ctx
    assert dict(Counter(counts.values())) == per_ctx
    # Rows are grouped by context: each context id forms one contiguous block.
    blocks = [c for k, c in enumerate(ctx_ids) if k == 0 or ctx_ids[k - 1] != c]
    assert len(blocks) == n_ctx
    # Candidate ids are unique within a context; texts are strings.
    assert len(set(zip(ctx_ids, ds["candidate_id"]))) == n_rows
    assert all(isinstance(t, str) for t in ds["candidate"])
    for aspect in ASPECTS[name]:
        values = np.asarray(ds[aspect], dtype=float)
        assert np.isfinite(values).all()
    lm = label_matrix(ds, ASPECTS[name][0])
    assert lm.labels.shape == (n_ctx, max(per_ctx))
    assert int(lm.mask.sum()) == n_rows


def test_summeval_means_match_sources(loaded, real_dir):
    raw = _read_jsonl(real_dir / "summeval" / "summeval.jsonl")
    expected = {"coherence": 3.41, "consistency": 4.66, "fluency": 4.67, "relevance": 3.78}
    ds = loaded("summeval")
    for aspect, mean in expected.items():
        raw_mean = sum(r[aspect] for r in raw) / len(raw)
        assert abs(raw_mean - mean) < 0.01
        assert abs(float(np.mean(ds[aspect])) - raw_mean) < 1e-9
    assert ds["context_id"][:16] == ["A0"] * 16
    assert ds["candidate_id"][:16] == [f"S{k}" for k in range(16)]


def test_webnlg2020_label_matrix_padding_and_values(loaded, real_dir):
    raw = _read_jsonl(real_dir / "webnlg2020" / "webnlg2020_en_humeval_merged.jsonl")
    ds = loaded("webnlg2020")
    lm = label_matrix(ds, "data_coverage")
    assert isinstance(lm, LabelMatrix)
    assert lm.labels.dtype == np.float32 and lm.mask.dtype == np.bool_
    assert lm.labels.shape == lm.mask.shape == (178, 17)

    kept = [r for r in raw if r["text"] is None or r["text"].strip()]     # the one empty output is left out
    assert len(raw) - len(kept) == 1
    per_sample = Counter(str(r["sample_id"]) for r in kept)
    short = sorted(s for s, n in per_sample.items() if n == 16)
    assert len(short) == 2
    for s in short:
        row = lm.context_ids.index(s)
        assert lm.mask[row].tolist() == [True] * 16 + [False]
        assert lm.labels[row, 16] == 0.0
    assert lm.mask.sum(axis=1).tolist() == [per_sample[c] for c in lm.context_ids]
    assert [len(c) for c in lm.candidate_ids] == lm.mask.sum(axis=1).tolist()

    # Contexts in order of first appearance in the file.
    first_seen = list(dict.fromkeys(str(r["sample_id"]) for r in raw))
    assert lm.context_ids == first_seen

    # Spot checks against the raw file.
    for k in (0, 1, 500, 1777, len(kept) - 1):
        r = kept[k]
        i = lm.context_ids.index(str(r["sample_id"]))
        j = lm.candidate_ids[i].index(r["submission_id"])
        assert lm.mask[i, j]
        assert lm.labels[i, j] == np.float32(r["scores"]["DataCoverage"])

    # The reference system has no text in the file: its candidate is references[0].
    ref = next(r for r in raw if r["submission_id"] == "WebNLG-2020-reference")
    row = next(x for x in ds if x["context_id"] == str(ref["sample_id"])
               and x["candidate_id"] == "WebNLG-2020-reference")
    assert row["candidate"] == ref["references"][0]
    assert row["reference"] == "\n".join(ref["references"])
    assert row["context"] == "\n".join(ref["triples"])


def test_topicalchat_and_personachat_fields(loaded, real_dir):
    with open(real_dir / "topicalchat" / "topical_chat.json", encoding="utf-8") as f:
        tc = json.load(f)
    ds = loaded("topicalchat")
    assert ds["context_id"][0] == "C0" and ds["context_id"][-1] == "C59"
    first = ds[0]
    assert first["context"] == tc[0]["source"]
    assert first["reference"] == tc[0]["context"]
    assert first["candidate_id"] == tc[0]["system_id"]
    assert first["overall"] == tc[0]["scores"]["overall"]

    with open(real_dir / "personachat_usr" / "topicalchat_usr.json", encoding="utf-8") as f:
        pc = json.load(f)
    ds = loaded("personachat")
    resp = pc[3]["responses"][2]
    row = ds[3 * 5 + 2]
    assert row["context_id"] == "C3"
    assert row["candidate_id"] == resp["model"]
    assert row["reference"] == pc[3]["fact"]
    assert row["maintains_context"] == pytest.approx(sum(resp["Maintains Context"]) / 3)
    assert row["uses_knowledge"] == pytest.approx(sum(resp["Uses Knowledge"]) / 3)


def test_webnlg2017_context_and_missing_texts_left_out(loaded):
    ds = loaded("webnlg2017")
    assert not any("<br>" in c for c in ds["context"])
    assert any("\n" in c for c in ds["context"])
    assert not any(t.strip() in ("", "null") for t in ds["candidate"])    # 193 missing outputs left out
    teams = Counter(ds["candidate_id"])
    assert teams["tilburg-pipe"] == 223 - 25 and teams["vietnam"] == 223 - 168 and teams["webnlg"] == 223


def _write_tiny_summeval(folder, lines):
    (folder / "summeval").mkdir(parents=True)
    (folder / "summeval" / "summeval.jsonl").write_text("\n".join(lines) + "\n")


def _row(article, summary, score):
    return json.dumps({"article_id": article, "summary_id": summary, "article": f"text {article}",
                       "summary": f"sum {summary}", "coherence": score, "consistency": 1.0,
                       "fluency": 2.0, "relevance": 3.0})


def test_env_override(tmp_path, monkeypatch):
    _write_tiny_summeval(tmp_path, [_row("A1", "S0", 1.0), _row("A0", "S0", 2.0),
                                    _row("A1", "S1", 3.0)])
    monkeypatch.setenv("JAXRANK_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    ds = load_dataset("summeval")
    assert ds["context_id"] == ["A1", "A1", "A0"]
    assert ds["candidate_id"] == ["S0", "S1", "S0"]
    lm = label_matrix(ds, "coherence")
    assert lm.context_ids == ["A1", "A0"]
    assert lm.candidate_ids == [["S0", "S1"], ["S0"]]
    np.testing.assert_array_equal(lm.labels, [[1.0, 3.0], [2.0, 0.0]])
    np.testing.assert_array_equal(lm.mask, [[True, True], [True, False]])


def test_env_override_missing_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_DATA", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="JAXRANK_DATA"):
        data_dir()


def test_unknown_name_and_aspect(tmp_path):
    with pytest.raises(ValueError, match="summeval"):
        load_dataset("nope", path=tmp_path)
    _write_tiny_summeval(tmp_path, [_row("A0", "S0", 1.0)])
    ds = load_dataset("summeval", path=tmp_path)
    with pytest.raises(ValueError, match="coherence"):
        label_matrix(ds, "engagingness")
    with pytest.raises(ValueError):
        label_matrix(ds, "candidate")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hanna\.jsonl.*JAXRANK_DATA"):
        load_dataset("hanna", path=tmp_path)


def test_malformed_line(tmp_path):
    _write_tiny_summeval(tmp_path, [_row("A0", "S0", 1.0), "{not json"])
    with pytest.raises(ValueError, match=r"summeval\.jsonl.*line 2"):
        load_dataset("summeval", path=tmp_path)
