"""Review of ``assess``'s report file names (jaxrank.cli._common.report_stem): two judges that are folders of one
name in two places, or one model behind two servers, write two reports; a registered judge keeps its plain name."""

from jaxrank.cli import build_parser
from jaxrank.cli._common import report_stem

DEFAULT = ("win_ratio", "average_probability")


def _stem(*argv):
    return report_stem(build_parser().parse_args(["assess", *argv]), DEFAULT, DEFAULT, active=False)


def test_two_checkpoints_of_one_name_write_two_reports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for run in ("exp1", "exp2"):
        (tmp_path / "runs" / run / "checkpoint-500").mkdir(parents=True)
    one, two = (_stem("--judge", f"runs/{run}/checkpoint-500") for run in ("exp1", "exp2"))
    assert one != two
    assert one.startswith("assess-summeval-relevance-checkpoint-500-")
    assert two.startswith("assess-summeval-relevance-checkpoint-500-")
    # the same folder written two ways is one judge
    assert _stem("--judge", str(tmp_path / "runs" / "exp1" / "checkpoint-500")) == one


def test_one_model_behind_two_servers_writes_two_reports():
    one = _stem("--judge", "server:qwen", "--base-url", "http://10.0.0.1:8000/v1")
    two = _stem("--judge", "server:qwen", "--base-url", "http://10.0.0.2:8000/v1")
    assert one != two and one.startswith("assess-summeval-relevance-server:qwen-")


def test_a_registered_judge_keeps_its_plain_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _stem() == "assess-summeval-relevance-minilm-l6"
    assert _stem("--judge", "smollm2-135m") == "assess-summeval-relevance-smollm2-135m"
