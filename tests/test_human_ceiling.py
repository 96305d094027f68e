"""Per-rater scores, systems and the human ceiling, recomputed by hand from the raw files (csv, json,
zipfile and scipy.stats only)."""

import csv
import json
import zipfile

import numpy as np
import pytest
from scipy import stats

from reference import scipy_correlation

from jaxrank.data import ASPECTS, label_matrix, load_dataset
from jaxrank.data.loaders import data_dir
from jaxrank.data.raters import (MEANS_ONLY, NO_SYSTEMS, PER_RATER, human_ceiling, rater_scores, system_ids)
from _fixtures_experiments import load_script

try:
    DATA = data_dir()
    HAVE = all((DATA / f).is_file() for f in ("hanna/hanna_metric_scores_llm.csv", "webnlg2020/en.zip",
                                               "personachat_usr/topicalchat_usr.json", "summeval/summeval.jsonl"))
except FileNotFoundError:
    DATA, HAVE = None, False
needs_data = pytest.mark.skipif(not HAVE, reason="data not present")


def _by_hand(contexts, name):
    """``contexts``: per context, per candidate, the list of its ratings. Mean over contexts of the mean over
    raters of corr(rater k, mean of the others)."""
    per_context = []
    for cands in contexts:
        k_max = max(len(r) for r in cands)
        vals = []
        for k in range(k_max):
            x = [r[k] for r in cands if len(r) > k and len(r) > 1]
            y = [np.mean(r[:k] + r[k + 1:]) for r in cands if len(r) > k and len(r) > 1]
            v = scipy_correlation(name, x, y)
            if not np.isnan(v):
                vals.append(v)
        per_context.append(np.mean(vals) if vals else np.nan)
    return float(np.nanmean(per_context)), np.array(per_context)


@needs_data
@pytest.mark.parametrize("name,aspect", [("hanna", "coherence"), ("personachat", "overall"),
                                         ("webnlg2020", "fluency")])
def test_rater_means_are_the_loaders_scores(name, aspect):
    rs = rater_scores(name, aspect)
    lm = label_matrix(load_dataset(name), aspect)
    assert rs.context_ids == lm.context_ids and rs.candidate_ids == lm.candidate_ids
    mean = np.where(lm.mask, np.nanmean(np.where(lm.mask[..., None], rs.scores, 0), -1), 0)
    np.testing.assert_allclose(mean, lm.labels, atol=1e-4)
    assert np.isfinite(rs.scores[lm.mask]).any(-1).all()


@needs_data
def test_means_only_and_no_systems_are_said():
    for name in MEANS_ONLY:
        with pytest.raises(ValueError, match="only the mean"):
            human_ceiling(name, ASPECTS[name][0])
    assert set(MEANS_ONLY) | set(PER_RATER) == set(ASPECTS)
    for name in NO_SYSTEMS:
        assert system_ids(name) is None
    sys = system_ids("topicalchat")
    assert len(set(sys.values())) == 6 and all(cand == s for (_, cand), s in sys.items())
    hanna = system_ids("hanna")
    assert len(hanna) == 1056 and len(set(hanna.values())) == 11


@needs_data
def test_personachat_ceiling_by_hand():
    records = json.loads((DATA / "personachat_usr" / "topicalchat_usr.json").read_text())
    contexts = [[list(map(float, r["Overall"])) for r in rec["responses"]] for rec in records]
    h = human_ceiling("personachat", "overall", num_bootstrap=200)
    for m in ("spearman", "kendall_tau", "pearson"):
        want, per = _by_hand(contexts, m)
        assert h.mean[m] == pytest.approx(want, abs=1e-5)
        np.testing.assert_allclose(h.per_context[m], per, atol=1e-5)
        lo, hi = h.interval[m]
        assert lo < h.mean[m] < hi
    # system level: per model, the mean of rater k against the mean of the others' means; mean over k
    models = sorted({r["model"] for rec in records for r in rec["responses"]})
    vals = []
    for k in range(3):
        x = [np.mean([r["Overall"][k] for rec in records for r in rec["responses"] if r["model"] == s])
             for s in models]
        y = [np.mean([np.mean(r["Overall"][:k] + r["Overall"][k + 1:]) for rec in records
                      for r in rec["responses"] if r["model"] == s]) for s in models]
        vals.append(stats.pearsonr(x, y)[0])
    assert h.num_systems == 5 and h.system["pearson"] == pytest.approx(np.mean(vals), abs=1e-5)


@needs_data
def test_hanna_ceiling_by_hand_from_the_release_csv():
    """Per prompt, the 11 stories are the 11 rows of the release CSV: no system matching needed."""
    csv.field_size_limit(1 << 30)
    with open(DATA / "hanna" / "hanna_metric_scores_llm.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cols = [[json.loads(r[f"Human {k} CH"]) for k in (1, 2, 3)] for r in rows]        # [S][3][96]
    contexts = [[[float(c[k][p]) for k in range(3)] for c in cols] for p in range(96)]
    h = human_ceiling("hanna", "coherence", num_bootstrap=200)
    want, _ = _by_hand(contexts, "spearman")
    assert h.mean["spearman"] == pytest.approx(want, abs=1e-5)
    assert h.num_systems == 11 and np.isfinite(h.system["spearman"])


@needs_data
def test_webnlg2020_ceiling_by_hand_on_some_contexts():
    with zipfile.ZipFile(DATA / "webnlg2020" / "en.zip") as z:
        teams = {p.split("/")[1]: json.loads(z.read(p)) for p in z.namelist() if p.endswith("/primary.json")}
    lm = label_matrix(load_dataset("webnlg2020"), "correctness")
    pick = lm.context_ids[:12]
    cands = [lm.candidate_ids[k][:9] for k in range(12)]
    contexts = [[[float(w["Correctness"]) for w in teams[t][ctx].values()] for t in cs] for ctx, cs in zip(pick, cands)]
    h = human_ceiling("webnlg2020", "correctness", contexts=pick, candidates=cands, num_bootstrap=200)
    for m in ("spearman", "kendall_tau"):
        want, per = _by_hand(contexts, m)
        assert h.mean[m] == pytest.approx(want, abs=1e-5)
        np.testing.assert_allclose(h.per_context[m], per, atol=1e-5)
    assert h.contexts == pick and h.num_systems == len({t for cs in cands for t in cs})


@needs_data
def test_unknown_names_refused():
    with pytest.raises(ValueError, match="aspect"):
        human_ceiling("hanna", "fluency")
    with pytest.raises(ValueError, match="contexts"):
        human_ceiling("personachat", "overall", contexts=["nope"])


@needs_data
def test_experiment_smoke_writes_its_tables(tmp_path):
    """experiments/human_ceiling.py --smoke: one aspect per data set, the HANNA LLM raters beside the ceiling."""
    mod = load_script("experiments/human_ceiling.py", "human_ceiling_script")
    assert mod.main(["--smoke", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "human_ceiling_smoke.md").read_text()
    rows = list(csv.DictReader(open(tmp_path / "human_ceiling_smoke.csv")))
    ceil = {r["dataset"]: r for r in rows if r["who"] == "human ceiling"}
    assert set(ceil) == set(PER_RATER)
    h = human_ceiling("personachat", ASPECTS["personachat"][0], num_bootstrap=50)
    assert float(ceil["personachat"]["spearman"]) == pytest.approx(h.mean["spearman"], abs=1e-6)
    assert sum(r["who"] != "human ceiling" for r in rows) == 5                  # the five HANNA LLM raters
    assert "summeval: no human ceiling: means only" in text and "summary_id is a position" in text
