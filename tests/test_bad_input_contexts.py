"""Small bad inputs: ``contexts_of(max_candidates=)`` below 2 (0 used to keep every candidate, -1 to drop the
last silently) and ``Comparisons.from_pairs`` of empty lists (it used to say the empty ``i`` held floats)."""

import numpy as np
import pytest

import jaxrank as jr
from jaxrank import scorer_table
from jaxrank.assessment.run import contexts_of

ROWS = [{"context_id": f"q{k}", "context": f"Article {k}.", "candidate_id": f"c{n}", "candidate": f"Summary {n}.",
         "score": float(n)} for k in range(2) for n in range(4)]


@pytest.mark.parametrize("bad", [0, 1, -1, True, 2.5, "3"])
def test_max_candidates_below_two_or_not_an_int_is_refused(bad):
    with pytest.raises(ValueError, match=r"max_candidates must be an int >= 2 .*got " + repr(bad).replace(".", r"\.")):
        contexts_of(jr.data.from_records(ROWS), max_candidates=bad)


@pytest.mark.parametrize("n, want", [(2, 2), (3, 3), (4, 4), (9, 4), (None, 4)])
def test_max_candidates_keeps_the_first_n(n, want):
    cs = contexts_of(jr.data.from_records(ROWS), aspect="score", max_candidates=n)
    assert cs.candidate_ids == [[f"c{m}" for m in range(want)]] * 2
    for lab in cs.labels:
        np.testing.assert_array_equal(lab, np.arange(want, dtype=np.float32))


def test_cli_candidates_below_two_is_a_usage_error_naming_the_option(tmp_path):
    import csv

    from jaxrank.cli import main

    data = tmp_path / "d.csv"
    with open(data, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(ROWS[0]))
        w.writeheader()
        w.writerows(ROWS)
    for n in ("0", "1", "-1"):
        with pytest.raises(SystemExit, match=f"--candidates must be >= [12].*{n}"):   # cli's own check
            main(["judge", "--data", str(data), "--candidates", n, "--store", str(tmp_path / "s.jsonl"),
                  "--no-progress"])
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("empty", [[], np.zeros(0, np.int32)])
def test_from_pairs_of_no_comparisons_is_an_empty_set(empty):
    c = jr.Comparisons.from_pairs(empty, empty, [] if isinstance(empty, list) else np.zeros(0), num_items=3)
    assert c.num_comparisons == 0 and c.batch_shape == () and c.i.dtype == np.int32
    np.testing.assert_array_equal(c.games(), np.zeros(3))                  # nobody played
    np.testing.assert_array_equal(c.components(), [0, 1, 2])               # each item alone
    for name, entry in scorer_table.SCORERS.items():                        # every scorer: the neutral score
        s = np.asarray(entry.load()(c, **entry.keywords()))
        neutral = 0.5 if name in ("win_ratio", "average_probability") else 0.0
        np.testing.assert_allclose(s, np.full(3, neutral), atol=1e-6, err_msg=name)


def test_from_pairs_still_refuses_float_indices():
    with pytest.raises(ValueError, match="i must hold integer item indices, got dtype float64"):
        jr.Comparisons.from_pairs([0.0], [1], [0.5], num_items=3)
