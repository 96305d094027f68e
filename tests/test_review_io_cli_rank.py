"""Review of ``jaxrank rank``: an --output that cannot be written is refused before the file is read or scored
(no file left behind); a context whose comparisons all have weight 0 has no P(A); an INPUT that cannot be read
is a usage error (exit status 2), as jaxrank.cli._errors says."""

from pathlib import Path

import pytest

from jaxrank.cli import main
from jaxrank.cli import rank as rank_cli


def _never(*args, **kw):
    raise AssertionError("scored although --output cannot be written")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no file can be made")
def test_an_output_that_cannot_be_written_is_refused_before_scoring(tmp_path, monkeypatch):
    f = tmp_path / "ok.csv"
    f.write_text("item_a,item_b,p\nx,y,0.7\ny,z,0.4\n")
    monkeypatch.setattr(rank_cli, "_score", _never)
    with pytest.raises(SystemExit, match=r"--output /proc/jaxrank-review/s\.csv: no file can be written in /proc") as e:
        main(["rank", str(f), "--no-compilation-cache", "-o", "/proc/jaxrank-review/s.csv"])
    assert e.value.code not in (0, 2)


def test_a_writable_output_check_leaves_no_file(tmp_path):
    out = tmp_path / "new" / "s.csv"
    rank_cli._check_writable(out, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_context_of_weight_0_rows_has_no_p_a(tmp_path, capsys):
    f = tmp_path / "w0.csv"
    f.write_text("item_a,item_b,p,weight,context\nx,y,0.9,1,c1\ny,x,0.2,1,c1\nx,y,0.7,0,c2\n")
    main(["rank", str(f), "--no-compilation-cache"])
    out = capsys.readouterr().out
    assert "context 'c2': 2 items, P(A) = n/a" in out
    assert "context 'c1': 2 items, P(A) = 0." in out


def test_an_input_that_cannot_be_read_is_a_usage_error(tmp_path, monkeypatch, capsys):
    f = tmp_path / "locked.csv"
    f.write_text("item_a,item_b,p\nx,y,0.7\n")

    def denied(path, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("jaxrank.io.read_comparisons", denied)
    with pytest.raises(SystemExit, match=r"locked\.csv: cannot be read \(Permission denied\)") as e:
        main(["rank", str(f), "--no-compilation-cache"])
    assert e.value.code == 2
