"""learnt_experts.py --merge (review): one data set's row rerun alone, the stored rows of the others kept."""

import csv

import pytest

from _fixtures_experiments import load_experiment

INTRO = ["# Learnt experts: fixed PoE-g / PoE-BT vs learnt judge calibration, held-out contexts\n",
         "Held-out Spearman x100 (mean over test contexts of the mean over 20 random subsets), ...\n"]


def _row(data, judge="judge 1", method="PoE-g", budget=24, spearman=0.5):
    return dict(data=data, judge=judge, method=method, budget=budget, fraction=0.1, spearman=spearman, lo=0.4,
                hi=0.6, delta=0.0, delta_lo=0.0, delta_hi=0.0, test_contexts=50, subsets=20)


def _store(stem, rows, bullets):
    stem.with_suffix(".md").write_text("\n".join(INTRO + bullets + ["\nTotal time 1.0s.", "\n### x", "",
                                                                     "## Findings", "", "- summeval, judge 1: x"])
                                       + "\n")
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_merge_keeps_the_other_data_sets_rows_and_bullets(tmp_path):
    le = load_experiment("learnt_experts")
    stem = tmp_path / "learnt_experts"
    old = [_row("summeval"), _row("summeval", "judge 2", spearman=0.25), _row("hanna"),
           _row("summeval-relevance m", spearman=0.125)]
    _store(stem, old, ["- summeval judge 1: accuracy 0.677", "- summeval: 100 contexts", "- hanna judge 1: a",
                       "- hanna: 96 contexts", "- summeval-relevance m: judgement store /tmp/gone.jsonl",
                       "- summeval-relevance m: 100 contexts, old"])
    new = [_row("summeval-relevance m", spearman=0.375)]
    lines, rows, kept = le.merge_stored(stem, INTRO + ["- summeval-relevance m: judgement store stores/s.jsonl",
                                                      "- summeval-relevance m: 100 contexts, new"], new)
    assert kept == ["summeval", "hanna"]
    assert [(r["data"], r["judge"], r["spearman"]) for r in rows] == [
        ("summeval", "judge 1", 0.5), ("summeval", "judge 2", 0.25), ("hanna", "judge 1", 0.5),
        ("summeval-relevance m", "judge 1", 0.375)]
    assert isinstance(rows[0]["budget"], int) and isinstance(rows[0]["lo"], float)
    assert lines[2:] == ["- summeval judge 1: accuracy 0.677", "- summeval: 100 contexts", "- hanna judge 1: a",
                         "- hanna: 96 contexts", "- summeval-relevance m: judgement store stores/s.jsonl",
                         "- summeval-relevance m: 100 contexts, new"]


def test_merge_refuses_other_settings_or_no_stored_results(tmp_path):
    le = load_experiment("learnt_experts")
    stem = tmp_path / "learnt_experts"
    with pytest.raises(SystemExit, match="no stored"):
        le.merge_stored(stem, INTRO, [_row("x")])
    _store(stem, [_row("summeval")], ["- summeval: 100 contexts"])
    other = [INTRO[0], INTRO[1].replace("20 random", "5 random")]
    with pytest.raises(SystemExit, match="other settings"):
        le.merge_stored(stem, other, [_row("x")])
