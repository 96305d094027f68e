"""The answer prefix ``auto`` is chosen on one fixed sample, so every slice and process has one template key
(review of the assessment pipeline, item 1), and ``--template NAME`` with a file of that name (item 8).

The judge here mimics ``PromptJudge(answer_prefix="auto")``: its template key depends on the context it is
prepared on, as a model's greedy answers do.
"""

import csv
import hashlib
import warnings

import numpy as np
import pytest

import jaxrank as jr
from jaxrank.assessment.run import StoreMismatchWarning, contexts_of, judge_contexts
from jaxrank.assessment.store import JudgementStore
from jaxrank.cli import main
from jaxrank.judges.pairwise import Judgement

N = 4


def _rows(num_contexts=5, n=N):
    # the data set's first context is "z9", which sorts last: position 0 is what counts
    ids = ["z9"] + [f"a{k}" for k in range(1, num_contexts)]
    return [{"context_id": ids[k], "context": f"article {k}", "candidate_id": f"s{m}",
             "candidate": f"summary {k}-{m}", "score": float(m)} for k in range(num_contexts) for m in range(n)]


class AutoPrefix:
    """Chooses its 'prefix' from the texts it is prepared on; the choice is part of its template key."""
    name, batch_size = "auto", 4

    def __init__(self):
        self.prepared, self.asked, self._key = [], [], None

    def prepare(self, context, candidates):
        if self._key is None:
            self.prepared.append((context, list(candidates)))
            self._key = "tpl-" + hashlib.sha1(repr((context, list(candidates)[:3])).encode()).hexdigest()[:6]

    @property
    def template_key(self):
        if self._key is None:
            raise RuntimeError("not prepared")
        return self._key

    def compare(self, context, candidates, i, j):
        self.asked += [(context, a, b) for a, b in zip(np.asarray(i).tolist(), np.asarray(j).tolist())]
        return Judgement(np.full(len(i), 0.7, np.float32), False, np.zeros((len(i), 2)))


def _expected_key(rows):
    first = rows[0]["context_id"]                      # the data set's first context, all its candidates
    text = rows[0]["context"]
    cands = [r["candidate"] for r in rows if r["context_id"] == first]
    return "tpl-" + hashlib.sha1(repr((text, cands[:3])).encode()).hexdigest()[:6], (text, cands)


def test_every_slice_candidate_cut_and_process_share_gets_the_same_template_key(tmp_path):
    rows = _rows()
    ds = jr.data.from_records(rows)
    want, sample = _expected_key(rows)
    keys = set()
    for spec, cut, positions in (("0:2", None, None), ("3:5", None, None), ("2:5", 3, [1]), (":", None, [3]),
                                 ("4", 2, None)):
        judge = AutoPrefix()
        cs = contexts_of(ds, aspect="score", contexts=spec, max_candidates=cut)
        judge_contexts(judge, cs, tmp_path / f"s{len(keys)}-{spec.replace(':', '_')}.jsonl", progress=False,
                       positions=positions)
        assert judge.prepared == [sample]
        keys.add(judge.template_key)
    assert keys == {want}


def test_a_later_run_over_more_contexts_reuses_what_an_earlier_slice_stored(tmp_path):
    ds = jr.data.from_records(_rows())
    store = tmp_path / "p.jsonl"
    first = AutoPrefix()
    judge_contexts(first, contexts_of(ds, aspect="score", contexts="3:5"), store, progress=False)
    second = AutoPrefix()
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreMismatchWarning)
        judge_contexts(second, contexts_of(ds, aspect="score", contexts="0:5"), store, progress=False)
    assert {c for c, _, _ in second.asked} == {"article 0", "article 1", "article 2"}
    assert len(second.asked) == 3 * N * (N - 1)
    assert sum(1 for _ in open(store)) == 5 * N * (N - 1)              # not 5 x 12 + 2 x 12


def test_mismatch_warning_names_judgements_of_these_texts_under_another_template(tmp_path):
    ds = jr.data.from_records(_rows())
    cs = contexts_of(ds, aspect="score", contexts="0:2")
    store = tmp_path / "p.jsonl"
    old = AutoPrefix()
    old._key = "tpl-old"                                   # as if chosen on another context before the fix
    judge_contexts(old, cs, store, progress=False)
    with pytest.warns(StoreMismatchWarning, match=r"another template key \(tpl-old;") as rec:
        new = AutoPrefix()
        judge_contexts(new, cs, store, progress=False)
    assert f"{2 * N * (N - 1)} of these very texts" in str(rec[0].message)
    assert len(new.asked) == 2 * N * (N - 1)
    assert len(JudgementStore(store)) == 4 * N * (N - 1)


def _data_file(tmp_path):
    f = tmp_path / "mine.csv"
    rows = _rows(2)
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return f


class Loaded(Exception):
    pass


@pytest.fixture
def no_model(monkeypatch):
    import jaxrank.models.loading as loading

    def load_model(*a, **k):
        raise Loaded

    monkeypatch.setattr(loading, "load_model", load_model)


@pytest.mark.parametrize("name", ["zepo", "poe"])
def test_template_name_that_is_also_a_file_is_ambiguous(tmp_path, monkeypatch, no_model, name):
    f = _data_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text("Which is better? {context}\nA: {a}\nB: {b}\n")
    base = ["judge", "--data", str(f), "--judge", "smollm2-135m", "--store", "s.jsonl", "--no-progress"]
    with pytest.raises(SystemExit) as e:
        main(base + ["--template", name])
    assert e.value.code == 2
    msg = str(e.value)
    assert "ambiguous" in msg and f"./{name}" in msg and "\n" not in msg
    with pytest.raises(Loaded):                          # ./NAME is the file: read, then the model loads
        main(base + ["--template", f"./{name}"])
    with pytest.raises(Loaded):                          # the option's default is the built-in prompt
        main(base)


def test_active_assessment_prepares_on_the_same_sample(tmp_path):
    """The library's active loop chooses the prefix where judge_contexts does, not on the slice's first context."""
    from jaxrank.assessment.active import active_judge_contexts

    rows = _rows()
    want, sample = _expected_key(rows)
    judge = AutoPrefix()
    cs = contexts_of(jr.data.from_records(rows), aspect="score", contexts="3:5")
    active_judge_contexts(judge, cs, tmp_path / "a.jsonl", budget=2 * N, progress=False)
    assert judge.prepared == [sample] and judge.template_key == want
