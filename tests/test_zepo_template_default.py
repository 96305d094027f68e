"""``jaxrank zepo``'s default seed ``--template zepo`` is the built-in style even beside a file named ``zepo``; the
command prints a template path that ``--template`` reads as a file (``./NAME`` for a bare name)."""

from jaxrank.cli import _common as common
from jaxrank.cli import build_parser
from jaxrank.cli.zepo import _as_path


def test_default_seed_is_the_builtin_beside_a_file_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["zepo", "--data", "summeval", "--aspect", "coherence"])
    assert isinstance(args.template, common.DefaultName)
    builtin = common.template_option(args)             # no file yet: the built-in style
    (tmp_path / "zepo").write_text("not a template {context} {a} {b}")
    beside = common.template_option(args)              # no ambiguity error for a default the user did not write
    assert beside == builtin


def test_printed_template_path_is_read_as_a_file():
    assert _as_path("zepo") == "./zepo"
    assert _as_path("out.json") == "out.json"
    assert _as_path("results/zepo/x.json") == "results/zepo/x.json"
