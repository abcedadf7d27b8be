"""The checkpoint coordinator against Flink's semantics: defaults, interval, max concurrent, min
pause, timeout, decline, subsumption, tolerable failures, retention, notifications."""

from __future__ import annotations

import pytest

from harness.driver.coordinator import CheckpointConfig, CheckpointCoordinator, JobFailedError
from reference_impl.checkpoint import FileSystemCheckpointStorage
from reference_impl.snapshot import SubtaskStateSnapshot

TASKS = [("source", 0), ("count", 0), ("count", 1)]


def make(tmp_path, **cfg):
    events, notes = [], []
    storage = FileSystemCheckpointStorage(tmp_path)
    c = CheckpointCoordinator(
        "job",
        CheckpointConfig(**{"interval_ms": 100, **cfg}),
        TASKS,
        {"count": {"parallelism": 2, "max_parallelism": 128}},
        storage,
        notify=lambda kind, cid: notes.append((kind, cid)),
        emit=lambda ev: events.append((ev.TAG, ev.fields())),
    )
    return c, storage, events, notes


def ack_all(c, storage, cid, now, skip=()):
    done = False
    for op, i in TASKS:
        if (op, i) in skip:
            continue
        h = storage.write_subtask_state("job", cid, SubtaskStateSnapshot(op, i, 1, 128))
        done = c.acknowledge(cid, op, i, h, now, extra={"source_offsets": {f"{op}-{i}": now}}) or done
    return done


def test_flink_defaults():
    cfg = CheckpointConfig(interval_ms=1000)
    assert (cfg.timeout_ms, cfg.max_concurrent, cfg.min_pause_ms, cfg.tolerable_failures, cfg.retained) == (
        600_000,
        1,
        0,
        0,
        1,
    )
    with pytest.raises(ValueError, match="max_concurrent"):
        CheckpointConfig(interval_ms=1, max_concurrent=0)


def test_ids_start_at_one_and_complete_after_all_acks(tmp_path):
    c, storage, events, notes = make(tmp_path)
    assert c.tick(0) == 1
    assert not ack_all(c, storage, 1, 10, skip={("count", 1)})
    assert storage.list_checkpoints("job") == []  # no _metadata until every ack is in
    h = storage.write_subtask_state("job", 1, SubtaskStateSnapshot("count", 1, 1, 128))
    assert c.acknowledge(1, "count", 1, h, 20)
    assert storage.list_checkpoints("job") == [1]
    assert ("complete", 1) in notes
    completed = [kw for t, kw in events if t == "checkpoint_completed"]
    assert completed[0]["source_offsets"] == {"source-0": 10, "count-0": 10}


def test_interval_and_max_concurrent(tmp_path):
    c, storage, *_ = make(tmp_path)
    assert c.tick(0) == 1
    assert c.tick(150) is None  # one pending already (max_concurrent=1)
    ack_all(c, storage, 1, 160)
    assert c.tick(160) == 2  # interval since the last trigger has passed
    ack_all(c, storage, 2, 170)
    assert c.tick(200) is None  # only 40 ms since trigger 2
    assert c.tick(260) == 3


def test_min_pause_counts_from_the_end_of_the_last_checkpoint(tmp_path):
    c, storage, *_ = make(tmp_path, min_pause_ms=500)
    c.tick(0)
    ack_all(c, storage, 1, 300)
    assert c.tick(400) is None and c.tick(799) is None
    assert c.tick(800) == 2


def test_timeout_aborts_and_counts_as_failure(tmp_path):
    c, storage, events, notes = make(tmp_path, timeout_ms=1000, tolerable_failures=1)
    c.tick(0)
    c.tick(1000)  # expires checkpoint 1, triggers 2
    assert ("abort", 1) in notes and any(
        t == "checkpoint_aborted" and kw["reason"] == "expired" for t, kw in events
    )
    assert not (tmp_path / "job" / "chk-1").exists()
    with pytest.raises(JobFailedError, match="2 consecutive"):
        c.tick(2000)


def test_decline_aborts_and_late_acks_are_ignored(tmp_path):
    c, storage, events, notes = make(tmp_path, tolerable_failures=5)
    c.tick(0)
    c.decline(1, "count", 0, "cannot snapshot", 5)
    assert ("abort", 1) in notes and c.pending == {}
    assert not ack_all(c, storage, 1, 6)
    assert storage.list_checkpoints("job") == []


def test_zero_tolerable_failures_fails_on_the_first(tmp_path):
    c, *_ = make(tmp_path)
    c.tick(0)
    with pytest.raises(JobFailedError, match="tolerable 0"):
        c.decline(1, "count", 1, "disk full", 1)


def test_completion_subsumes_older_pending(tmp_path):
    c, storage, events, notes = make(tmp_path, max_concurrent=2)
    c.tick(0)
    c.tick(100)
    ack_all(c, storage, 2, 150)
    assert ("abort", 1) in notes and c.pending == {}
    subsumed = [kw for t, kw in events if t == "checkpoint_aborted" and kw["cause"] == "subsumed"]
    assert [(kw["checkpoint_id"], kw["subsumed_by"], kw["reason"]) for kw in subsumed] == [
        (1, 2, "subsumed by checkpoint 2")
    ]
    assert c.consecutive_failures == 0


def test_retention_keeps_the_newest(tmp_path):
    c, storage, *_ = make(tmp_path, retained=2)
    for n in range(1, 5):
        assert c.tick(n * 100) == n
        ack_all(c, storage, n, n * 100 + 10)
    assert storage.list_checkpoints("job") == [3, 4]


def test_a_late_ack_of_an_aborted_checkpoint_leaves_no_files(tmp_path):
    c, storage, events, _ = make(tmp_path, tolerable_failures=5, timeout_ms=50)
    cid = c.tick(100)
    c.tick(150)  # expired and aborted before anyone acknowledged
    assert not storage.checkpoint_dir("job", cid).exists()
    h = storage.write_subtask_state(
        "job", cid, SubtaskStateSnapshot("count", 0, 1, 128)
    )  # a paused task wakes
    assert storage.checkpoint_dir("job", cid).exists()
    assert c.acknowledge(cid, "count", 0, h, 160) is False
    assert not storage.checkpoint_dir("job", cid).exists()


def test_an_ack_from_before_this_coordinator_never_discards(tmp_path):
    storage = FileSystemCheckpointStorage(tmp_path)
    h = storage.write_subtask_state("job", 3, SubtaskStateSnapshot("count", 0, 1, 128))
    storage.finalize_checkpoint("job", 3, [h], {"count": {"parallelism": 1, "max_parallelism": 128}})
    c = CheckpointCoordinator(
        "job",
        CheckpointConfig(100),
        TASKS,
        {},
        storage,
        lambda *a: None,
        lambda *a, **k: None,
        first_checkpoint_id=4,
    )
    c.acknowledge(3, "count", 0, h, 10)  # a zombie of the previous attempt
    assert storage.list_checkpoints("job") == [3]
