"""Review of the readers of your own texts (jaxrank.data.read_records) and of template files
(jaxrank.assessment.zepo.load_template): semicolon/tab CSV, a pretty-printed JSON object, a field named twice,
long fields, a template file that is not UTF-8."""

import csv

import pytest

from jaxrank.assessment.zepo import load_template
from jaxrank.data import read_records

HEADER = ["context_id", "context", "candidate_id", "candidate"]


@pytest.mark.parametrize("sep, name", [(";", "semicolons"), ("\t", "tabs")])
def test_a_csv_separated_by_semicolons_or_tabs_says_so(tmp_path, sep, name):
    path = tmp_path / "r.csv"
    path.write_text(sep.join(HEADER) + f"\nq1{sep}Q{sep}a{sep}A\nq1{sep}Q{sep}b{sep}B\n")
    with pytest.raises(ValueError, match=rf"r\.csv: line 1: the header is separated by {name}, not commas"):
        read_records(path)


def test_a_pretty_printed_json_object_is_one_record(tmp_path):
    path = tmp_path / "one.json"
    path.write_text('{\n "context_id": "q1", "context": "Q", "candidate_id": "a", "candidate": "A"\n}\n')
    # read as one record: the error is about its content (one candidate), not "not valid JSON"
    with pytest.raises(ValueError, match=r"one\.json: record 0: context 'q1' has one candidate \('a'\)"):
        read_records(path)


def test_a_json_record_naming_a_field_twice_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"context_id": "q", "context": "Q", "candidate_id": "a", "candidate": "A", "candidate": "A2"}\n'
                    '{"context_id": "q", "context": "Q", "candidate_id": "b", "candidate": "B"}\n')
    with pytest.raises(ValueError, match=r"r\.jsonl: line 1: field 'candidate' appears twice in one record"):
        read_records(path)
    array = tmp_path / "r.json"
    array.write_text('[{"context_id": "q", "context": "Q", "context": "R", "candidate_id": "a", "candidate": "A"}]')
    with pytest.raises(ValueError, match=r"r\.json: field 'context' appears twice in one record"):
        read_records(array)


def test_a_text_longer_than_pythons_csv_limit_is_read(tmp_path):
    long = "word " * (csv.field_size_limit() // 5 + 10)
    path = tmp_path / "long.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        w.writerows([["q1", "Q", "a", long], ["q1", "Q", "b", "short"]])
    before = csv.field_size_limit()
    ds = read_records(path)
    assert ds["candidate"] == [long, "short"]
    assert csv.field_size_limit() == before


def test_a_template_file_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "lat.txt"
    path.write_bytes("Which summary is more coherent? café {context} {a} {b}\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"lat\.txt, line 1: not UTF-8 text \(byte 0xe9"):
        load_template(path)


def test_a_spreadsheet_csv_with_empty_unnamed_columns_and_empty_rows(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_text(",".join(HEADER) + ",,\r\nq1,Q,a,A,,\r\nq1,Q,b,B,,\r\n,,,,,\r\n", newline="")
    ds = read_records(path)
    assert ds["candidate_id"] == ["a", "b"] and ds.column_names == [*HEADER, "reference"]
    path.write_text(",".join(HEADER) + ",\nq1,Q,a,A,\nq1,Q,b,B,note\n")
    with pytest.raises(ValueError, match=r"excel\.csv: line 3: a value in column 5, which has no name"):
        read_records(path)
