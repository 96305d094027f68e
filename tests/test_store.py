"""The judgement store under concurrency, damage and duplicates (issue 14).

Several real processes append to one store at once; the file is then read
back independently (``json`` line by line) and must hold every key exactly
once, no interleaved line, and the value every process was told. A damaged
middle line is moved aside and a resumed run judges only what is missing.
"""

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from jaxrank import cli
from jaxrank.assessment.run import ContextSet, judge_contexts
from jaxrank.assessment.store import (JudgementStore, StoreDamageWarning, StoreLockedError, check_store,
                                      repair_store)


def _rec(ctx, a, b, p, **extra):
    return {"judge": "m", "template": "t", "context": ctx, "a": a, "b": b, "p": p, **extra}


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


_WRITER = textwrap.dedent("""
    import json, sys
    from jaxrank.assessment.store import JudgementStore
    path, me, n_shared, n_own = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    st = JudgementStore(path)
    keys = [("shared", f"s{k}", "x") for k in range(n_shared)] + [(f"own{me}", f"o{k}", "x") for k in range(n_own)]
    for start in range(0, len(keys), 7):            # many small writes, racing the other processes
        st.append([{"judge": "m", "template": "t", "context": c, "a": a, "b": b, "p": (me + 1) / 10,
                    "writer": me} for c, a, b in keys[start:start + 7]])
    told = {f"{c}|{a}": st.get(("m", "t", c, a, b))["p"] for c, a, b in keys}
    print(json.dumps(told))
""")


def test_several_processes_append_to_one_store_without_loss_or_duplicates(tmp_path):
    path, n_proc, n_shared, n_own = tmp_path / "shared.jsonl", 4, 60, 40
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(me), str(n_shared), str(n_own)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for me in range(n_proc)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    lines = _lines(path)                                   # every line parses: nothing interleaved
    keys = [(r["context"], r["a"], r["b"]) for r in lines]
    assert len(keys) == len(set(keys)) == n_shared + n_proc * n_own
    stored = {f"{r['context']}|{r['a']}": r["p"] for r in lines}
    for me, (out, _) in enumerate(outs):
        told = json.loads(out)
        assert all(stored[k] == v for k, v in told.items())    # each process was told the stored value
        assert all(stored[f"own{me}|o{k}"] == (me + 1) / 10 for k in range(n_own))
    assert not check_store(path).damaged and not check_store(path).conflicts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.jsonl"]     # no .lock left behind


def test_a_second_writer_waiting_too_long_is_told_who_holds_the_lock(tmp_path):
    path = tmp_path / "s.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from jaxrank.assessment.store import _Lock
        from pathlib import Path
        with _Lock(Path({str(path)!r}), 5.0):
            print("held", flush=True)
            time.sleep(20)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(StoreLockedError, match=rf"locked by pid {holder.pid} on "):
            JudgementStore(path, lock_timeout=0.3)
        assert time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.wait()
    st = JudgementStore(path, lock_timeout=5)           # a killed holder's lock is free
    st.append([_rec("c", "a", "b", 0.5)])
    assert len(JudgementStore(path)) == 1
    for bad in (0, -1.0, float("nan"), "5", True):
        with pytest.raises(ValueError, match="lock_timeout"):
            JudgementStore(path, lock_timeout=bad)


def test_two_stores_in_one_process_see_each_others_appends(tmp_path):
    path = tmp_path / "s.jsonl"
    a, b = JudgementStore(path), JudgementStore(path)
    a.append([_rec("c", "x", "y", 0.7)])
    b.append([_rec("c", "x", "y", 0.1), _rec("c", "y", "x", 0.4)])   # x,y already written by a: skipped
    assert b.get(("m", "t", "c", "x", "y"))["p"] == 0.7
    assert [r["p"] for r in _lines(path)] == [0.7, 0.4]
    assert len(a) == 1
    sc = a.comparisons()                                 # refreshes: b's line is in
    assert len(a) == 2
    np.testing.assert_allclose(np.sort(np.asarray(sc.comparisons.p[0])), [0.4, 0.7], rtol=1e-6)


def test_damaged_lines_anywhere_are_moved_aside_with_their_numbers(tmp_path):
    path = tmp_path / "s.jsonl"
    good = [_rec("c", "a", "b", 0.5), _rec("c", "b", "a", 0.25), _rec("c", "a", "c", 0.75)]
    text = (json.dumps(good[0]) + "\n" + "{not json\n" + json.dumps(good[1]) + "\n"
            + json.dumps({"judge": "m"}) + "\n" + json.dumps(_rec("c", "q", "r", 2.0)) + "\n"
            + json.dumps(good[2]) + "\n" + '{"judge": "m", "templ')
    path.write_text(text)
    scan = check_store(path)
    assert [d.line for d in scan.damaged] == [2, 4, 5, 7] and path.read_text() == text   # check changes nothing
    with pytest.warns(StoreDamageWarning, match=r"4 damaged line\(s\).*line 2 \(not JSON"):
        st = JudgementStore(path)
    assert len(st) == 3 and [r for r in _lines(path)] == good
    side = _lines(tmp_path / "s.jsonl.damaged")
    assert [s["line"] for s in side] == [2, 4, 5, 7] and side[0]["text"] == "{not json"
    assert "missing field" in side[1]["reason"] and "probability" in side[2]["reason"]
    assert side[3]["reason"].startswith("torn last line")
    st.append([_rec("c", "z", "a", 0.5)])
    assert len(_lines(path)) == 4 and not check_store(path).damaged


def test_a_valid_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_rec("c", "a", "b", 0.5)))
    st = JudgementStore(path)
    st.append([_rec("c", "b", "a", 0.5)])
    assert [r["a"] for r in _lines(path)] == ["a", "b"]


class _CountingJudge:
    name, template_key, batch_size = "fake", "t0", 4

    def __init__(self):
        self.asked = 0

    def compare(self, context, candidates, i, j):
        from jaxrank.judges.pairwise import Judgement
        self.asked += len(i)
        d = np.array([len(candidates[a]) - len(candidates[b]) for a, b in zip(i, j)], np.float64)
        return Judgement((1 / (1 + np.exp(-d / 5))).astype(np.float32), False, np.zeros((len(d), 2)))


def test_a_run_resumes_past_a_damaged_middle_line_losing_nothing_valid(tmp_path):
    cs = ContextSet(["c0"], ["ctx"], [["a", "b", "c", "d"]], [["a", "bbb", "cc", "dddd"]], [np.arange(4.0)])
    path = tmp_path / "run.jsonl"
    full = judge_contexts(_CountingJudge(), cs, path, progress=False)
    lines = path.read_text().splitlines()
    assert len(lines) == 12
    lines[5] = lines[5][:20] + "\x00garbage"                # damage in the middle, e.g. a disk error
    path.write_text("\n".join(lines) + "\n")
    judge = _CountingJudge()
    with pytest.warns(StoreDamageWarning, match="line 6"):
        again = judge_contexts(judge, cs, path, progress=False)
    assert judge.asked == 1                                  # only the damaged judgement is redone
    key = lambda s: sorted(zip(np.asarray(s.comparisons.i[0]).tolist(), np.asarray(s.comparisons.j[0]).tolist(),
                               np.asarray(s.comparisons.p[0]).round(6).tolist()))
    assert key(again) == key(full)
    assert [s["line"] for s in _lines(tmp_path / "run.jsonl.damaged")] == [6]


def test_duplicates_identical_ignored_different_refused_naming_both_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    r1, r2 = _rec("c", "a", "b", 0.947), _rec("c", "b", "a", 0.3)
    path.write_text("".join(json.dumps(r) + "\n" for r in (r1, r2, r1)))
    st = JudgementStore(path)                                 # identical repeat: ignored
    assert len(st) == 2 and st.get(("m", "t", "c", "a", "b"))["p"] == 0.947
    path.write_text("".join(json.dumps(r) + "\n" for r in (r1, r2, r1, _rec("c", "a", "b", 0.01))))
    with pytest.raises(ValueError, match=r"line 1 \(p=0.947\) and on line 4 \(p=0.01\).*store repair"):
        JudgementStore(path)
    scan = repair_store(path)
    assert [(c.first_line, c.line, c.same) for c in scan.conflicts] == [(1, 3, True), (1, 4, False)]
    assert _lines(path) == [r1, r2]
    side = _lines(tmp_path / "s.jsonl.damaged")
    assert [(s["line"], s["reason"]) for s in side] == [(3, "identical duplicate of line 1"),
                                                        (4, "different duplicate of line 1")]
    assert JudgementStore(path).get(("m", "t", "c", "a", "b"))["p"] == 0.947


def test_store_cli_check_and_repair(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_rec("c", "a", "b", 0.5)) + "\nbroken\n" + json.dumps(_rec("c", "a", "b", 0.6)) + "\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["store", "check", str(path)])
    out = capsys.readouterr().out
    assert e.value.code == 1 and "line 2: damaged" in out and "line 3: key" in out and "different record" in out
    cli.main(["store", "repair", str(path)])
    assert "moved 2 line(s)" in capsys.readouterr().out
    cli.main(["store", "check", str(path)])
    assert "1 valid records, 0 damaged" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(["store", "check", str(tmp_path / "absent.jsonl")])


def test_check_reads_a_store_where_no_lock_file_can_be_made(tmp_path, monkeypatch):
    """A read-only folder (simulated: this suite may run as root, who writes anywhere) still gets checked."""
    from jaxrank.assessment import store as store_module

    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_rec("c", "a", "b", 0.5)) + "\nbroken\n")

    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(store_module._Lock, "__enter__", refuse)
    scan = check_store(path)
    assert len(scan.records) == 1 and [d.line for d in scan.damaged] == [2]
    with pytest.raises(PermissionError):                 # a writer, though, needs the lock
        JudgementStore(path)


def test_a_record_comparing_a_candidate_with_itself_or_of_another_schema_is_reported_not_read(tmp_path):
    import json as _json
    import warnings as _warnings

    from jaxrank.assessment.store import JudgementStore as _Store, check_store

    path = tmp_path / "s.jsonl"
    good = {"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y", "p": 0.3}
    lines = [good, dict(good, a="y", b="y"), dict(good, b="z", schema=3), dict(good, b="w", schema=1),
             dict(good, b="v", schema=2), dict(good, b="u", schema=2, fingerprint="f", context_sha="c",
                                               a_sha="x", b_sha="u")]
    path.write_text("".join(_json.dumps(r) + "\n" for r in lines))
    scan = check_store(path)
    reasons = sorted(d.reason for d in scan.damaged)
    assert len(reasons) == 3 and "compares candidate 'y' with itself" in reasons[0]
    assert "declares schema version 3; this jaxrank reads versions 1, 2" in reasons[1]
    assert "schema 2 record without fingerprint, context_sha, a_sha, b_sha" in reasons[2]
    with _warnings.catch_warnings(record=True):
        _warnings.simplefilter("always")
        store = _Store(path)
    assert len(store) == 3 and ("j", "t", "c", "y", "y") not in store
    assert ("j", "t", "c", "x", "u", "f", "c", "x", "u") in store and ("j", "t", "c", "x", "u") not in store
    with pytest.raises(ValueError, match="with itself"):
        store.append([dict(good, a="q", b="q")])


def test_the_side_files_are_never_written_through_a_symlink(tmp_path):
    from jaxrank.assessment.store import JudgementStore as _Store

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = tmp_path / "s.jsonl"
    (tmp_path / "s.jsonl.lock").symlink_to(victim)
    with pytest.raises(OSError, match="s.jsonl.lock is a symbolic link"):
        _Store(path).append([{"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y", "p": 0.5}])
    assert victim.read_text() == "keep me\n"
    (tmp_path / "s.jsonl.lock").unlink()
    path.write_text('{"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y", "p": 0.5}\nnot json\n')
    (tmp_path / "s.jsonl.damaged").symlink_to(victim)
    with pytest.raises(OSError, match="s.jsonl.damaged is a symbolic link"):
        _Store(path)
    assert victim.read_text() == "keep me\n"
