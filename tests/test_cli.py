"""The `jaxrank rank` command (the file reader itself: test_io.py; start-up without JAX: test_startup.py)."""

import csv
import json
import re

import numpy as np
import pytest

import jaxrank as jr
from jaxrank.cli import main
from jaxrank.io import read_comparisons


def _write_csv(path, rows, header):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def test_rank_csv_probabilities_matches_api(tmp_path, capsys):
    f = tmp_path / "c.csv"
    rows = [("x", "y", 0.8), ("y", "z", 0.7), ("z", "x", 0.2), ("y", "x", 0.3)]
    _write_csv(f, rows, ["item_a", "item_b", "p"])
    out = tmp_path / "s.csv"
    main(["rank", str(f), "--method", "poe_gaussian", "--output", str(out)])
    got = {r["item"]: float(r["score"]) for r in csv.DictReader(out.open())}
    c = jr.Comparisons.from_pairs([0, 1, 2, 1], [1, 2, 0, 0], [0.8, 0.7, 0.2, 0.3], num_items=3)
    expect = np.asarray(jr.poe_gaussian(c))
    np.testing.assert_allclose([got["x"], got["y"], got["z"]], expect, atol=1e-5)
    assert "rank" in capsys.readouterr().out


def test_rank_jsonl_outcomes_with_contexts_and_weights(tmp_path):
    f = tmp_path / "c.jsonl"
    rows = [{"context": "q1", "a": "m1", "b": "m2", "winner": "a", "weight": 2},
            {"context": "q1", "a": "m2", "b": "m3", "winner": "tie", "weight": 1},
            {"context": "q2", "a": "m9", "b": "m1", "winner": "b", "weight": 1}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = read_comparisons(f)
    assert t.contexts == ["q1", "q2"] and t.items == [["m1", "m2", "m3"], ["m9", "m1"]]
    np.testing.assert_allclose(t.comparisons.p[0, :2], [1.0, 0.5])
    np.testing.assert_allclose(t.comparisons.weight[0, :2], [2.0, 1.0])
    out = tmp_path / "s.jsonl"
    main(["rank", str(f), "--method", "win_ratio", "--debias", "threshold", "-o", str(out)])
    rec = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["context"] for r in rec} == {"q1", "q2"} and len(rec) == 5


@pytest.mark.parametrize("rows, header, match", [
    ([("x", "y", "abc")], ["item_a", "item_b", "p"], r"bad.csv, line 2: field 'p' = 'abc' is not a number"),
    ([("x", "y", "0.5"), ("x", "", "0.5")], ["item_a", "item_b", "p"], r"bad.csv, line 3: field 'item_b' is empty"),
    ([("x", "y", "maybe")], ["item_a", "item_b", "outcome"], r"bad.csv, line 2: field 'outcome'"),
    ([("x", "y")], ["item_a", "item_b"], "bad.csv: no probability or outcome column"),
    ([("x", "y", "0.5")], ["first", "second", "p"], "bad.csv: no column for item_a"),
])
def test_malformed_files_name_file_line_and_field(tmp_path, rows, header, match):
    # the reader's own cases are in test_io.py; here: the command line reports them and exits
    f = tmp_path / "bad.csv"
    _write_csv(f, rows, header)
    with pytest.raises(SystemExit, match=match):
        main(["rank", str(f)])


def test_missing_file_and_bad_option_combinations(tmp_path):
    with pytest.raises(SystemExit, match="not found"):
        main(["rank", str(tmp_path / "nope.csv")])
    f = tmp_path / "c.csv"
    _write_csv(f, [("x", "y", 0.8)], ["item_a", "item_b", "p"])
    for argv, match in ((["--method", "poe_gaussian", "--debias", "learn"], "learn applies to poe_bradley_terry"),
                        (["--method", "win_ratio", "--debias", "mean"], "mean applies to the PoE methods"),
                        (["--method", "win_ratio", "--score-prior", "1"], "score-prior applies to poe_bradley_terry"),
                        (["--score-prior", "-1"], "score-prior must be a finite number >= 0"),
                        (["--score-prior", "inf"], "score-prior must be a finite number >= 0"),
                        (["--score-prior", "nan"], "score-prior must be a finite number >= 0"),
                        (["--top", "-1"], "top must be >= 0")):
        with pytest.raises(SystemExit, match=match):
            main(["rank", str(f)] + argv)


@pytest.mark.parametrize("argv,match", [(["--batch-size", "0"], "--batch-size must be >= 1"),
                                        (["--candidates", "-2"], "--candidates must be >= 1"),
                                        (["--budget", "0"], "--budget must be >= 1")])
def test_judge_and_assess_refuse_non_positive_counts_before_loading_anything(argv, match):
    for command in ("judge", "assess"):
        with pytest.raises(SystemExit, match=match):
            main([command, "--judge", "no-such-model"] + argv)


def test_batch_size_defaults_to_auto_and_takes_an_integer(capsys):
    from jaxrank.cli import build_parser

    with pytest.raises(SystemExit):
        main(["judge", "--judge", "no-such-model", "--batch-size", "many"])
    assert "--batch-size: expected 'auto' or an integer, got 'many'" in capsys.readouterr().err

    for command in ("judge", "assess"):
        assert build_parser().parse_args([command]).batch_size == "auto"
        assert build_parser().parse_args([command, "--batch-size", "16"]).batch_size == 16
        assert build_parser().parse_args([command, "--batch-size", "auto"]).batch_size == "auto"


def test_evalica_and_arena_files_rank_without_options(tmp_path):
    # win ratio by hand: a win counts 1, a tie 1/2, over the games an item played
    ev = tmp_path / "evalica.csv"
    _write_csv(ev, [("Pizza", "Sushi", "left"), ("Burger", "Pasta", "right"), ("Tacos", "Pizza", "left"),
                    ("Sushi", "Burger", "tie"), ("Pasta", "Pizza", "right")], ["left", "right", "winner"])
    out = tmp_path / "ev.csv"
    main(["rank", str(ev), "--method", "win_ratio", "-o", str(out)])
    got = {r["item"]: float(r["score"]) for r in csv.DictReader(out.open())}
    assert got == pytest.approx({"Pizza": 2 / 3, "Sushi": 0.25, "Burger": 0.25, "Pasta": 0.5, "Tacos": 1.0})
    ar = tmp_path / "battles.csv"
    _write_csv(ar, [("gpt-4", "claude", "model_a"), ("claude", "llama", "model_b"), ("gpt-4", "llama", "tie"),
                    ("llama", "gpt-4", "tie (bothbad)"), ("llama", "claude", "model_a")],
               ["model_a", "model_b", "winner"])
    main(["rank", str(ar), "--method", "win_ratio", "-o", str(out)])
    got = {r["item"]: float(r["score"]) for r in csv.DictReader(out.open())}
    assert got == pytest.approx({"gpt-4": 2 / 3, "claude": 0.0, "llama": 0.75})


def test_output_has_a_context_column_only_when_the_input_does(tmp_path):
    f = tmp_path / "c.csv"
    _write_csv(f, [("x", "y", 0.8), ("y", "z", 0.6), ("z", "x", 0.3)], ["item_a", "item_b", "p"])
    for name in ("s.csv", "s.jsonl"):
        main(["rank", str(f), "--method", "average_probability", "-o", str(tmp_path / name)])
    with (tmp_path / "s.csv").open() as fh:
        assert next(csv.reader(fh)) == ["rank", "item", "score", "stderr", "games"]
    rec = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [set(r) for r in rec] == [{"rank", "item", "score", "stderr", "games"}] * 3
    g = tmp_path / "g.csv"
    _write_csv(g, [("q", "x", "y", 0.8), ("q", "y", "x", 0.6)], ["context", "item_a", "item_b", "p"])
    main(["rank", str(g), "--method", "average_probability", "-o", str(tmp_path / "g_out.csv")])
    with (tmp_path / "g_out.csv").open() as fh:
        assert next(csv.reader(fh))[0] == "context"


@pytest.mark.parametrize("debias", ["none", "learn"])
def test_rank_poe_bt_scores_and_stderr_match_the_api_unpadded(tmp_path, debias):
    # the command line pads shapes to shared sizes; the real items' numbers must not change
    rows = [("a", "b", 0.9), ("b", "c", 0.7), ("c", "d", 0.6), ("d", "a", 0.2), ("a", "c", 0.8), ("b", "d", 0.65),
            ("c", "a", 0.3), ("e", "a", 0.4), ("e", "d", 0.55)]
    f = tmp_path / "c.csv"
    _write_csv(f, rows, ["item_a", "item_b", "p"])
    out = tmp_path / "s.csv"
    main(["rank", str(f), "--debias", debias, "-o", str(out)])
    got = {r["item"]: (float(r["score"]), float(r["stderr"])) for r in csv.DictReader(out.open())}
    names = ["a", "b", "c", "d", "e"]
    pos = {n: k for k, n in enumerate(names)}
    c = jr.Comparisons.from_pairs([pos[a] for a, _, _ in rows], [pos[b] for _, b, _ in rows],
                                  [p for _, _, p in rows], num_items=5)
    mode = debias == "learn" and "learn"
    post = jr.laplace_bradley_terry(c, debias=mode)
    np.testing.assert_allclose([got[n][0] for n in names], np.asarray(post.mean), atol=2e-4)
    np.testing.assert_allclose([got[n][1] for n in names], np.asarray(post.stderr), rtol=2e-3)


def test_bucket_sizes():
    from jaxrank._batching import bucket as _bucket   # the coarse buckets jaxrank rank pads to
    for least in (8, 16):
        sizes = [_bucket(n, least) for n in range(1, 3000)]
        for n, size in zip(range(1, 3000), sizes):
            assert size >= max(n, least)
            k = size.bit_length() - 1
            assert size in (2 ** k, 3 * 2 ** (k - 1))  # 2^k or 3 * 2^(k-1)
            assert n <= least or size < 1.5 * n
        assert sorted(set(sizes))[:4] == [least, least * 3 // 2, least * 2, least * 3]


def test_default_football_job(tmp_path, capsys):
    try:
        jr.data.data_dir()
    except FileNotFoundError:
        pytest.skip("shared data folder not found")
    out = tmp_path / "football.csv"
    main(["rank", "--top", "20", "-o", str(out)])
    text = capsys.readouterr().out
    assert "49520 comparisons, 337 items" in text
    rec = list(csv.DictReader(out.open()))
    assert len(rec) == 337 and all(np.isfinite(float(r["stderr"])) for r in rec)
    assert "context" not in rec[0]  # one unnamed context: no context column
    # the learnt positional bias is a home advantage: gamma < 0 favours position A
    assert "gamma = -" in text
    # an item with one game is printed with its (large) standard error and its game count
    one_game = [r for r in rec if float(r["games"]) == 1 and int(r["rank"]) <= 20]
    assert one_game, "the default football ranking has a one-game team in its top 20 (Asturias)"
    seasoned = np.median([float(r["stderr"]) for r in rec if float(r["games"]) >= 100])
    for r in one_game:
        assert float(r["stderr"]) > 5 * seasoned
        row = re.search(rf"^\s+{r['rank']}\s+{re.escape(r['item'])}\s+(\S+)\s+(\S+)\s+1$", text, re.M)
        assert row, f"{r['item']} is not printed with score, s.e. and games"
        assert float(row.group(2)) == pytest.approx(float(r["stderr"]), abs=1e-3)


@pytest.mark.parametrize("method, debias", [(m, "none") for m in ("win_ratio", "average_probability", "bradley_terry",
                                                                  "poe_gaussian", "poe_gaussian_hard",
                                                                  "max_likelihood_ranking")]
                         + [("average_probability", "threshold"), ("poe_gaussian", "permutation"),
                            ("poe_gaussian", "mean")])
def test_every_method_on_padded_shapes_matches_the_api_unpadded(tmp_path, method, debias):
    rows = [("a", "b", 0.9), ("b", "c", 0.7), ("c", "d", 0.6), ("d", "a", 0.2), ("a", "c", 0.8), ("b", "d", 0.65),
            ("c", "a", 0.3), ("e", "a", 0.4), ("e", "d", 0.55), ("b", "a", 0.35)]
    f = tmp_path / "c.csv"
    _write_csv(f, rows, ["item_a", "item_b", "p"])
    out = tmp_path / "s.csv"
    main(["rank", str(f), "--method", method, "--debias", debias, "-o", str(out)])
    got = {r["item"]: float(r["score"]) for r in csv.DictReader(out.open())}
    names = ["a", "b", "c", "d", "e"]
    pos = {n: k for k, n in enumerate(names)}
    c = jr.Comparisons.from_pairs([pos[a] for a, _, _ in rows], [pos[b] for _, b, _ in rows],
                                  [p for _, _, p in rows], num_items=5)
    if debias == "threshold":
        c = jr.threshold_debias(c)
    elif debias == "permutation":
        c = jr.permutation_average(c)
    kw = {"debias": True} if debias == "mean" else {}
    expect = np.asarray(jr.SCORERS[method](c, **kw))
    np.testing.assert_allclose([got[n] for n in names], expect, atol=2e-4)


def test_rank_warns_when_an_item_never_lost_and_shows_gamma_only_when_fitted(tmp_path, capsys):
    """Hard outcomes where x beats everyone: its ML score runs off (huge s.e.): a warning names the remedy;
    with --score-prior the MAP scores are finite and no warning is given. gamma appears only with a bias term."""
    f = tmp_path / "c.csv"
    rows = [("x", "y", 1.0), ("x", "z", 1.0), ("y", "z", 1.0), ("z", "y", 1.0), ("y", "x", 0.0)]
    _write_csv(f, rows, ["item_a", "item_b", "p"])
    out = tmp_path / "s.csv"
    main(["rank", str(f), "--method", "poe_bradley_terry", "--output", str(out)])
    text = capsys.readouterr().out
    assert "never lost or never won" in text and "--score-prior 1" in text and "gamma" not in text
    stderr = {r["item"]: float(r["stderr"]) for r in csv.DictReader(out.open())}
    assert stderr["x"] > 10                                                # the one that never lost
    assert {r["games"] for r in csv.DictReader(out.open())} <= {"2", "3", "4", "5"}   # counts, not 3.0
    main(["rank", str(f), "--method", "poe_bradley_terry", "--score-prior", "1"])
    assert "never lost" not in capsys.readouterr().out
    main(["rank", str(f), "--method", "poe_bradley_terry", "--debias", "learn"])
    assert "gamma = " in capsys.readouterr().out
