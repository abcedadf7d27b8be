"""The two-phase-commit file sink: nothing is visible before its checkpoint completes; restore
commits the transactions of the completed checkpoint (idempotently) and aborts the rest."""

from __future__ import annotations

from harness.sinks import TwoPhaseCommitFileSink, read_committed


def sink(tmp_path, events):
    return TwoPhaseCommitFileSink(tmp_path / "out", 0, lambda typ, **kw: events.append((typ, kw)))


def test_commit_only_after_checkpoint_completes(tmp_path):
    events = []
    s = sink(tmp_path, events)
    s.write([1, 2])
    s.pre_commit(1)
    s.write([3])
    assert read_committed(tmp_path / "out") == []
    s.notify_checkpoint_complete(1)
    assert read_committed(tmp_path / "out") == [1, 2]
    s.pre_commit(2)
    s.notify_checkpoint_complete(2)
    assert read_committed(tmp_path / "out") == [1, 2, 3]
    assert [t for t, _ in events].count("sink_commit") == 2


def test_restore_commits_completed_and_aborts_leftovers(tmp_path):
    events = []
    s = sink(tmp_path, events)
    s.write(["a"])
    state = s.pre_commit(1)  # checkpoint 1 completes, but the notification is lost in a crash
    s.write(["b"])
    s.pre_commit(2)  # checkpoint 2 never completes
    s.write(["c"])  # open transaction at the crash
    s.close()
    r = sink(tmp_path, events)
    r.restore(state)
    assert read_committed(tmp_path / "out") == ["a"]
    assert not list((tmp_path / "out" / "pending").iterdir())
    r2 = sink(tmp_path, events)
    r2.restore(state)  # restoring twice is harmless: commit is idempotent
    assert read_committed(tmp_path / "out") == ["a"]
    r2.write(["d"])
    r2.pre_commit(3)
    r2.notify_checkpoint_complete(3)
    assert read_committed(tmp_path / "out") == ["a", "d"]


def test_a_later_completion_commits_earlier_pending(tmp_path):
    s = sink(tmp_path, [])
    s.write([1])
    s.pre_commit(1)
    s.write([2])
    s.pre_commit(2)
    s.notify_checkpoint_complete(2)
    assert read_committed(tmp_path / "out") == [1, 2]
