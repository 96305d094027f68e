"""A ZEPO search log is resumed only by the search that wrote it (jaxrank.assessment.zepo).

Its config used to hold the judge's name and the seed's key but not what the
judge and the paraphraser are: a search with other judge weights (same name),
another answer reading, or a paraphraser sampling other lengths or nuclei
resumed the first search's proposals and scores as its own. Real SmolLM2-135M
(float32 and quantised weights); ``epochs=0`` scores the seed only, so the
paraphraser never has to generate.
"""

import json

import pytest

import jaxrank as jr
from jaxrank.assessment import zepo
from jaxrank.assessment.run import contexts_of
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template

SEED = pairwise_template("summeval", "coherence", style="zepo")


@pytest.fixture(scope="module")
def sample():
    rows = [{"context_id": "q1", "context": "It rained all day in Paris on Monday.", "candidate_id": c,
             "candidate": t} for c, t in [("a", "Rain fell in Paris all day."), ("b", "Tokyo was sunny."),
                                         ("c", "Paris had rain.")]]
    return zepo.sample_pairs(contexts_of(jr.data.from_records(rows)), num_contexts=1, pairs_per_context=1, seed=0)


def _search(judge, para, sample, tmp_path):
    return zepo.zepo_search(judge, para, SEED, sample, "coherence", store=tmp_path / "z.jsonl",
                            log=tmp_path / "log.jsonl", epochs=0, population=1)


def test_the_same_search_resumes_its_log_and_judges_nothing(smollm2, sample, tmp_path):
    judge = PromptJudge(smollm2, SEED, answer_prefix="")
    first = _search(judge, zepo.Paraphraser(smollm2, "coherence", max_new_tokens=40), sample, tmp_path)
    again = _search(judge, zepo.Paraphraser(smollm2, "coherence", max_new_tokens=40), sample, tmp_path)
    assert first.judged == sample.size + 2 and again.judged == 0      # + the content-free pair, both orders
    config = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])
    assert config["judge_fingerprint"] == judge.fingerprint
    assert config["paraphraser_fingerprint"] == smollm2.fingerprint
    assert config["reading"] == judge.template_key
    assert (config["max_new_tokens"], config["top_p"]) == (40, 1.0)


@pytest.mark.parametrize("change, field", [
    (dict(max_new_tokens=12), "max_new_tokens"),
    (dict(top_p=0.5), "top_p"),
])
def test_a_paraphraser_sampling_otherwise_does_not_resume_the_log(smollm2, sample, tmp_path, change, field):
    judge = PromptJudge(smollm2, SEED, answer_prefix="")
    _search(judge, zepo.Paraphraser(smollm2, "coherence", max_new_tokens=40), sample, tmp_path)
    before = (tmp_path / "log.jsonl").read_bytes()
    settings = dict(max_new_tokens=40) | change
    with pytest.raises(ValueError, match=f"log of another search .*{field}"):
        _search(judge, zepo.Paraphraser(smollm2, "coherence", **settings), sample, tmp_path)
    assert (tmp_path / "log.jsonl").read_bytes() == before


def test_another_reading_of_the_answer_does_not_resume_the_log(smollm2, sample, tmp_path):
    para = zepo.Paraphraser(smollm2, "coherence", max_new_tokens=40)
    _search(PromptJudge(smollm2, SEED, answer_prefix=""), para, sample, tmp_path)
    with pytest.raises(ValueError, match="log of another search .*reading"):
        _search(PromptJudge(smollm2, SEED, answer_prefix="Summary"), para, sample, tmp_path)


def test_other_judge_and_paraphraser_weights_do_not_resume_the_log(smollm2, sample, tmp_path):
    from jaxrank.models import load_model

    try:
        quantised = load_model("smollm2-135m", weights="quantised")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert quantised.name == smollm2.name and quantised.fingerprint != smollm2.fingerprint
    _search(PromptJudge(smollm2, SEED, answer_prefix=""), zepo.Paraphraser(smollm2, "coherence"), sample,
            tmp_path)
    with pytest.raises(ValueError, match="log of another search .*judge_fingerprint"):
        _search(PromptJudge(quantised, SEED, answer_prefix=""), zepo.Paraphraser(smollm2, "coherence"), sample,
                tmp_path)
    with pytest.raises(ValueError, match="log of another search .*paraphraser_fingerprint"):
        _search(PromptJudge(smollm2, SEED, answer_prefix=""), zepo.Paraphraser(quantised, "coherence"), sample,
                tmp_path)
