"""Review of the comparison-file reader (jaxrank.io): stray quotes, spaced headers, spreadsheet CSV, long fields,
tiny weights and UTF-16 files. Expected values are written by hand from the file contents."""

import csv

import numpy as np
import pytest

from jaxrank.io import comparisons_from_rows, read_comparisons


def _write(tmp_path, name, text, **kw):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, newline="", **kw)
    return path


def test_a_stray_quote_joining_rows_is_an_error_naming_its_lines(tmp_path):
    path = _write(tmp_path, "strayq.csv", 'item_a,item_b,p\nx,"y,0.7\nz,w",0.5\nw,x,0.4\ny,z,0.6\n')
    with pytest.raises(ValueError, match=r"strayq\.csv, lines 2-3: field 'item_b' .* line break"):
        read_comparisons(path)


def test_a_context_holding_a_line_break_is_an_error(tmp_path):
    path = _write(tmp_path, "ctx.csv", 'item_a,item_b,p,context\nx,y,0.7,"one\ntwo"\n')
    with pytest.raises(ValueError, match=r"ctx\.csv, lines 2-3: field 'context' .* line break"):
        read_comparisons(path)


def test_a_quoted_field_on_one_line_keeps_its_line_number(tmp_path):
    path = _write(tmp_path, "q.csv", 'item_a,item_b,p\n"x, the first",y,0.7\n\nx,y,"2"\n')
    with pytest.raises(ValueError, match=r"q\.csv, line 4: field 'p' = '2' is outside"):
        read_comparisons(path)


def test_header_names_are_read_without_their_blanks(tmp_path):
    path = _write(tmp_path, "spaces.csv", "item_a, item_b, p, weight\nx, y, 0.7, 2\ny, z, 0.4, 1\n")
    t = read_comparisons(path)
    assert t.items == [["x", "y", "z"]]
    np.testing.assert_allclose(np.asarray(t.comparisons.p)[0, :2], [0.7, 0.4], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(t.comparisons.weight)[0, :2], [2.0, 1.0])


def test_header_names_equal_once_stripped_are_duplicates(tmp_path):
    path = _write(tmp_path, "dup.csv", "item_a,item_b,p, p\nx,y,0.7,0.2\n")
    with pytest.raises(ValueError, match=r"line 1: column\(s\) \['p'\] appear more than once"):
        read_comparisons(path)


def test_spreadsheet_csv_with_empty_unnamed_columns_and_empty_rows(tmp_path):
    path = _write(tmp_path, "excel.csv", "item_a,item_b,p,,\r\nx,y,0.7,,\r\ny,x,0.4,,\r\n,,,,\r\n")
    t = read_comparisons(path)
    assert t.items == [["x", "y"]]
    assert int(np.sum(np.asarray(t.comparisons.weight) > 0)) == 2
    np.testing.assert_allclose(np.asarray(t.comparisons.p)[0, :2], [0.7, 0.4], rtol=1e-6)


def test_a_value_under_an_unnamed_column_is_an_error(tmp_path):
    path = _write(tmp_path, "excel.csv", "item_a,item_b,p,\nx,y,0.7,\ny,x,0.4,note\n")
    with pytest.raises(ValueError, match=r"excel\.csv, line 3: a value in column 4, which has no name"):
        read_comparisons(path)


def test_a_field_longer_than_pythons_csv_limit_is_read(tmp_path):
    long = "y" * (csv.field_size_limit() + 10)
    path = _write(tmp_path, "long.csv", f"item_a,item_b,p\nx,{long},0.7\n{long},x,0.4\n")
    before = csv.field_size_limit()
    t = read_comparisons(path)
    assert t.items == [["x", long]]
    assert csv.field_size_limit() == before          # the process-wide limit is left as it was


def test_a_weight_float32_cannot_hold_is_an_error(tmp_path):
    path = _write(tmp_path, "tiny.csv", "item_a,item_b,p,weight\nx,y,0.9,1\ny,z,0.8,1e-50\n")
    with pytest.raises(ValueError, match=r"tiny\.csv, line 3: field 'weight' = '1e-50' is too small"):
        read_comparisons(path)
    with pytest.raises(ValueError, match=r"weight, row 1: 1e-50 is not a finite non-negative float32 weight"):
        comparisons_from_rows(["x", "y"], ["y", "z"], [0.9, 0.8], weight=[1.0, 1e-50])


def test_a_smallest_normal_float32_weight_is_kept(tmp_path):
    tiny = float(np.finfo(np.float32).tiny)
    path = _write(tmp_path, "ok.csv", f"item_a,item_b,p,weight\nx,y,0.9,1\ny,z,0.8,{tiny!r}\nx,z,0.5,0\n")
    w = np.asarray(read_comparisons(path).comparisons.weight)[0, :3]
    assert w[1] > 0 and w[2] == 0


def test_a_utf16_file_is_named_as_utf16(tmp_path):
    path = _write(tmp_path, "u16.csv", "item_a,item_b,p\nx,y,0.7\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"u16\.csv: UTF-16 .*save it as UTF-8"):
        read_comparisons(path)
