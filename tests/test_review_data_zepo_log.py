"""Review fixes of the ZEPO search log (jaxrank.assessment.zepo, its SearchLog): a log is resumed only by a
search of the same sample (candidates, texts, pairs) and token limit; the latest matching proposals are
read back; a last event that lost its newline is kept."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from tiny_lm import ByteTokenizer

from jaxrank.assessment import zepo
from jaxrank.assessment._zepo_log import SearchLog
from jaxrank.assessment.run import ContextSet
from jaxrank.judges.pairwise import Judgement
from jaxrank.judges.prompts import pairwise_template

SEED = pairwise_template("summeval", "coherence", style="zepo")
WORDS = ["park", "river", "council", "spring", "city", "rain", "open", "new"]


class HashJudge:
    """Deterministic p from a CRC of the template and the two texts."""

    name = "hash"

    def __init__(self):
        self.lm = type("LM", (), {"tokenizer": ByteTokenizer()})()

    def compare_templates(self, templates, context, candidates, i, j, progress=None):
        out = []
        for t in templates:
            p = np.array([zlib.crc32(f"{t.text}|{candidates[a]}|{candidates[b]}".encode()) % 1000 / 1000
                          for a, b in zip(i, j)], np.float32)
            out.append(Judgement(p, False, np.zeros((len(p), 2), np.float32)))
        return out


class Para:
    """Proposes numbered paraphrases that keep the aspect and labels; counts its calls."""

    name, temperature, seed = "list", 0.0, 0

    def __init__(self, tag="x"):
        self.calls, self.tag = 0, tag

    def propose(self, instruction, n, epoch):
        self.calls += 1
        return [f"Say which summary has better coherence ({self.tag}{epoch}.{k}): A or B." for k in range(n)]


class NoPara(Para):
    def propose(self, instruction, n, epoch):
        raise AssertionError("the logged proposals were not read back")


def _contexts(m, edit=None):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 12)) for _ in range(4)]
    cands = [[" ".join(rng.choice(WORDS, 5)) + f" {k}" for k in range(8)] for _ in range(4)]
    if edit is not None:
        cands[edit[0]][edit[1]] += " (edited)"
    return ContextSet([f"c{k}" for k in range(4)], texts, [[f"s{x}" for x in range(m)] for _ in range(4)],
                      [c[:m] for c in cands])


def _sample(m=8, edit=None, pairs=3, seed=0):
    return zepo.sample_pairs(_contexts(m, edit), num_contexts=2, pairs_per_context=pairs, seed=seed)


def _search(tmp_path, sample, para=None, **kw):
    kw = dict(epochs=1, population=2) | kw
    return zepo.zepo_search(HashJudge(), para or Para(), SEED, sample, "coherence", store=tmp_path / "s.jsonl",
                            log=tmp_path / "log.jsonl", **kw)


def test_the_same_search_resumes(tmp_path):
    first = _search(tmp_path, _sample())
    para = Para()
    again = _search(tmp_path, _sample(), para)
    assert first.judged > 0 and again.judged == 0 and para.calls == 0
    assert again.best == first.best


@pytest.mark.parametrize("other", [
    dict(m=5),                 # --candidates 5 instead of 8: same contexts and comparison count, other pairs
    dict(edit=(2, 0)),         # one candidate text edited
    dict(edit=(3, 7)),
])
def test_a_log_of_another_sample_is_refused(tmp_path, other):
    base, changed = _sample(), _sample(**other)
    assert changed.ids == base.ids and changed.size == base.size       # what the config held before
    _search(tmp_path, base)
    before = (tmp_path / "log.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"log\.jsonl is the log of another search \(sample: .*pairs differ"):
        _search(tmp_path, changed)
    assert (tmp_path / "log.jsonl").read_bytes() == before               # nothing mixed in


def test_a_log_of_another_token_limit_is_refused(tmp_path):
    _search(tmp_path, _sample(), max_instruction_tokens=160)
    with pytest.raises(ValueError, match=r"log\.jsonl is the log of another search \(max_instruction_tokens: "
                                         r"160 in the log, 20 now\)"):
        _search(tmp_path, _sample(), max_instruction_tokens=20)


def test_sample_digest_covers_candidates_texts_and_pairs():
    base = zepo.sample_digest(_sample())
    assert zepo.sample_digest(_sample()) == base                       # rebuilt from the same data
    for other in (dict(m=5), dict(edit=(2, 0)), dict(pairs=2), dict(seed=1)):
        assert zepo.sample_digest(_sample(**other)) != base, other
    s = _sample()
    flipped = zepo.SearchSample(s.ids, s.texts, s.candidate_ids, s.candidates, [p[::-1] for p in s.pairs])
    assert zepo.sample_digest(flipped) != base                         # the pairs' order counts too


def _events(path):
    return [json.loads(x) for x in path.read_text().split("\n") if x.strip()]


def test_resume_reads_the_proposals_of_the_current_best_not_a_stale_one(tmp_path):
    first = _search(tmp_path, _sample())
    log = tmp_path / "log.jsonl"
    lines = log.read_text().split("\n")
    stale = {"event": "proposals", "epoch": 1, "from": "an older best instruction",
             "instructions": ["Stale: which summary has better coherence, A or B?"] * 2}
    log.write_text("\n".join([lines[0], json.dumps(stale)] + lines[1:]))       # before the real proposals
    again = _search(tmp_path, _sample(), NoPara())
    assert again.judged == 0 and again.best == first.best


def test_resume_reads_the_latest_proposals(tmp_path):
    _search(tmp_path, _sample(), Para("old"))
    log = tmp_path / "log.jsonl"
    seed_instruction = zepo.instruction_of(SEED)
    newer = {"event": "proposals", "epoch": 1, "from": seed_instruction,
             "instructions": [f"Tell which summary has better coherence (new {k}): A or B." for k in range(2)]}
    with open(log, "a") as f:
        f.write(json.dumps(newer) + "\n")
    res = _search(tmp_path, _sample(), NoPara())
    assert [c["instruction"] for c in res.candidates if c["epoch"] == 1] == newer["instructions"]


def test_a_last_event_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "log.jsonl"
    cfg = {"a": 1}
    SearchLog(path, cfg).write({"event": "epoch", "epoch": 0})
    path.write_bytes(path.read_bytes().rstrip(b"\n"))                   # the whole event, its newline lost
    lg = SearchLog(path, cfg)
    assert len(lg.events) == 2
    lg.write({"event": "epoch", "epoch": 1})
    events = [json.loads(x) for x in path.read_bytes().split(b"\n") if x.strip()]
    assert events == [{"event": "config", "a": 1}, {"event": "epoch", "epoch": 0}, {"event": "epoch", "epoch": 1}]
    assert len(SearchLog(path, cfg).events) == 3


def test_a_torn_last_event_is_still_cut(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"event": "config", "a": 1}\n{"event": "epoch", "ep')
    lg = SearchLog(path, {"a": 1})
    assert lg.events == [{"event": "config", "a": 1}]
    assert path.read_bytes() == b'{"event": "config", "a": 1}\n'
