"""A file that is not a judgement store is refused by every store entry point and left byte for byte as it
was (jaxrank.assessment.store): ``repair_store`` used to move every line of a CSV to ``.damaged`` and leave
the CSV empty; ``check_store`` suggested that repair."""

import json

import pytest

from jaxrank.assessment.store import JudgementStore, NotAStoreError, check_store, merge_stores, repair_store
from jaxrank.cli import main

CSV = ("context_id,context,candidate_id,candidate,score\n"
       + "".join(f'q{k},"An article, number {k}.",c{n},"Summary {n} of {k}.",{n}\n'
                 for k in range(20) for n in range(4)))


def _csv(tmp_path):
    path = tmp_path / "mydata.csv"
    path.write_text(CSV)
    return path


@pytest.mark.parametrize("entry", [repair_store, check_store, JudgementStore])
def test_a_csv_is_refused_and_left_byte_identical(tmp_path, entry):
    path = _csv(tmp_path)
    before = path.read_bytes()
    with pytest.raises(NotAStoreError, match=r"mydata\.csv is not a judgement store"):
        entry(path)
    assert path.read_bytes() == before
    assert not (tmp_path / "mydata.csv.damaged").exists()
    assert not (tmp_path / "mydata.csv.lock").exists()


def test_a_csv_shard_is_refused_by_merge(tmp_path):
    path = _csv(tmp_path)
    with pytest.raises(NotAStoreError, match="mydata.csv"):
        merge_stores(tmp_path / "out.jsonl", [path])
    assert path.read_text() == CSV


@pytest.mark.parametrize("action", ["repair", "check"])
def test_store_cli_refuses_a_csv_naming_it_and_suggests_no_repair(tmp_path, capsys, action):
    path = _csv(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["store", action, str(path)])
    msg = str(e.value.code) + capsys.readouterr().out
    assert f"{path} is not a judgement store" in msg
    assert "jaxrank store repair" not in msg
    assert path.read_text() == CSV
    assert not (tmp_path / "mydata.csv.damaged").exists()


def test_a_store_with_a_damaged_line_is_still_repaired(tmp_path):
    """The refusal is only for files with no record at all: a store's damage is still moved aside."""
    rec = {"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y", "p": 0.25}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(rec) + "\nnot json at all\n")
    scan = repair_store(path)
    assert [d.line for d in scan.damaged] == [2]
    assert path.read_text() == json.dumps(rec) + "\n"
    # a torn record alone (a writer killed on its first line) is damage too, not a foreign file
    torn = tmp_path / "t.jsonl"
    torn.write_text('{"judge": "j", "templ')
    assert [d.line for d in repair_store(torn).damaged] == [1]
    assert torn.read_text() == ""
