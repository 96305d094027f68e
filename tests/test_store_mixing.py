"""The ``jaxrank assess`` report speaks of this run's judgements only (jaxrank.cli.assess).

Its Truncation and label-mass paragraphs read the store's records; a store
shared by two data files with the same ids (an article edited between runs)
holds judgements of the old texts too, and those are not this run's. Checked
with the real MiniLM judge (a 256-token window) on a long and a short article.
"""

import csv

from jaxrank.cli import main

LONG = " ".join(["The council met on Monday to discuss the new budget for roads and schools."] * 60)
SHORT = "The council met on Monday to discuss the budget."
CANDS = [("a", "The council discussed the budget.", 3), ("b", "Cats sleep a lot.", 1),
         ("c", "A meeting on Monday.", 2)]


def _write(path, article):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["context_id", "context", "candidate_id", "candidate", "score"])
        for cid, text, score in CANDS:
            w.writerow(["q1", article, cid, text, score])
    return path


def _report(folder):
    (md,) = [p for p in folder.glob("*.md")]
    return md.read_text()


def test_the_truncation_paragraph_ignores_judgements_of_other_texts_under_the_same_ids(minilm, tmp_path, capsys):
    store = tmp_path / "s.jsonl"
    v1, v2 = _write(tmp_path / "v1.csv", LONG), _write(tmp_path / "v2.csv", SHORT)
    main(["assess", "--data", str(v1), "--store", str(store), "--output", str(tmp_path / "out1"), "--no-progress"])
    first = _report(tmp_path / "out1")
    assert "**Truncation.** In 1 of 1 contexts" in first          # the long article was cut at 256 tokens
    main(["assess", "--data", str(v2), "--store", str(store), "--output", str(tmp_path / "out2"), "--no-progress"])
    second = _report(tmp_path / "out2")
    assert sum(1 for line in open(store) if line.strip()) == 12    # both articles' judgements in one store
    assert "**Truncation.**" not in second                         # v2's short article was read whole
    # and back to v1: its own (stored) judgements still say it was cut
    main(["assess", "--data", str(v1), "--store", str(store), "--output", str(tmp_path / "out3"), "--no-progress"])
    assert "**Truncation.** In 1 of 1 contexts" in _report(tmp_path / "out3")
