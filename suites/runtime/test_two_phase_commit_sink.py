"""The two-phase-commit file sink: nothing is visible before its checkpoint completes; restore
commits the transactions of the completed checkpoint (idempotently, at any parallelism) and aborts
the rest."""

from __future__ import annotations

from harness.job.sinks import TwoPhaseCommitFileSink, read_committed


def sink(tmp_path, events, subtask=0, attempt=0):
    return TwoPhaseCommitFileSink(
        tmp_path / "out", subtask, lambda ev: events.append((ev.TAG, ev.fields())), attempt=attempt
    )


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
    r = sink(tmp_path, events, attempt=1)
    r.restore(state)
    assert read_committed(tmp_path / "out") == ["a"]
    assert not list((tmp_path / "out" / "pending").iterdir())
    r2 = sink(tmp_path, events, attempt=2)
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


def test_restore_at_lower_parallelism_commits_every_old_subtasks_transactions(tmp_path):
    events = []
    old = [sink(tmp_path, events, subtask=i) for i in range(4)]
    union = []
    for i, s in enumerate(old):
        s.write([f"r{i}"])
        union += s.pre_commit(5)
        s.write([f"late{i}"])  # open at the crash: must be aborted
        s.close()
    new = [sink(tmp_path, events, subtask=i, attempt=1) for i in range(2)]
    for s in new:
        s.restore(union, parallelism=2)
    assert sorted(read_committed(tmp_path / "out")) == ["r0", "r1", "r2", "r3"]
    assert not list((tmp_path / "out" / "pending").iterdir())


def test_a_fence_drops_replayed_records_a_lost_checkpoint_already_committed(tmp_path):
    from harness.job.sinks import write_fence

    events = []
    s = sink(tmp_path, events)
    s.write(["a"])
    s.pre_commit(2)
    s.notify_checkpoint_complete(2)
    s.write(["b", "c"])
    s.pre_commit(3)
    s.notify_checkpoint_complete(3)  # checkpoint 3's files are damaged later: restore falls back to 2
    s.close()
    assert write_fence(tmp_path / "out", restored_checkpoint=2, attempt=1) == ["c00000003-s0000-a0000-000002"]
    assert write_fence(tmp_path / "out", restored_checkpoint=2, attempt=2) == []  # fenced once
    r = sink(tmp_path, events, attempt=1)
    r.restore([])
    r.write(["b", "c", "d"])  # the replay after checkpoint 2 regenerates b and c
    r.pre_commit(4)
    r.notify_checkpoint_complete(4)
    assert sorted(read_committed(tmp_path / "out")) == ["a", "b", "c", "d"]
    assert r.suppressed == 2
