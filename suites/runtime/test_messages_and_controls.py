"""The control messages (``harness.driver.messages``) survive the wire (msgpack frames with an HMAC each) as
the same typed objects, and anything else is a clear error; the executor controls
(``harness.driver.controls``) mean the same on sim and on Spark."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from types import SimpleNamespace

import allure
import pytest

from harness.driver.controls import ExecutorControls
from harness.driver.coordinator import CheckpointConfig
from harness.driver.messages import (
    _BY_TAG,
    Ack,
    Crash,
    Deploy,
    Emit,
    FailpointReply,
    Gather,
    MessageError,
    Peers,
    Register,
    Skew,
    StorageGate,
    Trigger,
    decode,
    encode,
)
from harness.jobs import build_job
from harness.sim.executor import SimExecutor
from harness.spark.frames import FrameDecoder, FrameSealer
from reference_impl.checkpoint import StateFileHandle

pytestmark = [allure.epic("runtime"), allure.feature("control messages")]

SAMPLES = [
    Trigger(3, 1234, "savepoint"),
    Deploy(2, None, True, -50, {"bind": "127.0.0.1", "routed": False}),
    Ack(1, 7, "count", 2, StateFileHandle("count", 2, "count-2.state", 10, 99), {"timers": 3}),
    Ack(1, 7, "count", 2, None, None),
    FailpointReply(None, 0),
    StorageGate("slow", 250),
    Emit("ttl_read", {"key": "k1", "values": [1, 2]}),
    Crash(),
    Gather(2, '{"task": "count[0]", "endpoint": ["127.0.0.1", 4242]}'),
    Peers(['{"task": "source[0]", "endpoint": null}']),
]


def _wire(raw: object) -> object:
    """Through a sealed frame and back, as on a coordinator link."""
    key = b"k" * 32
    dec = FrameDecoder()
    dec.open_with(key)
    (out,) = dec.feed(FrameSealer(key).seal(raw))
    return out


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_crosses_the_wire_as_the_same_typed_object(msg: object) -> None:
    assert decode(_wire(encode(msg))) == msg  # type: ignore[arg-type]


def test_every_registered_message_has_a_distinct_tag_and_round_trips_its_field_count() -> None:
    assert len({cls.TAG for cls in _BY_TAG.values()}) == len(_BY_TAG)
    for tag, cls in _BY_TAG.items():
        assert cls.TAG == tag and dataclasses.is_dataclass(cls)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (["no_such_message", 1], "unknown control message 'no_such_message'"),
        (["trigger", 3, 1234], "'trigger': 2 fields, expected 3"),
        (["trigger", "3", 1234, "checkpoint"], "field checkpoint_id: expected int"),
        (["skew", True], "field skew_ms: expected int"),
        (["ack", 1, 7, "count", 2, "not a handle", None], "field handle"),
        (["ack", 1, 7, "count", 2, {"operator_id": "count"}, None], "field handle"),
        ({"tag": "trigger"}, "malformed control message"),
        ([], "malformed control message"),
    ],
)
def test_an_unknown_or_malformed_message_is_a_clear_error(raw: object, says: str) -> None:
    with pytest.raises(MessageError, match=says.replace("(", r"\(").replace(")", r"\)")):
        decode(_wire(raw))


def test_nothing_but_plain_data_goes_on_the_wire() -> None:
    """msgpack, not pickle: an arbitrary object in a message cannot be sent at all."""
    with pytest.raises(TypeError):
        FrameSealer(b"k" * 32).seal(encode(Emit("x", {"obj": object()})))
    with pytest.raises(MessageError):
        encode(("trigger", 1, 2, "checkpoint"))  # type: ignore[arg-type]


def _sim(tmp_path: Path) -> SimExecutor:
    spec = build_job("keyed_count", 100, 10, 1, 16, {"source": 2, "count": 2})
    ex = SimExecutor(spec.graph, tmp_path, CheckpointConfig(interval_ms=50))
    ex._safe_deploy(ex.graph)
    return ex


def _spark(tmp_path: Path, sent: list[tuple[str, object]]):
    from harness.spark.executor import SparkExecutor

    spec = build_job("keyed_count", 100, 10, 1, 16, {"source": 2, "count": 2})
    ex = SparkExecutor(spec.graph, tmp_path, CheckpointConfig(interval_ms=50), SimpleNamespace(master="x"))
    ex._send = lambda task, msg: sent.append((task, msg)) or True  # type: ignore[method-assign]
    ex._broadcast = lambda msg: sent.append(("*", msg))  # type: ignore[method-assign]
    return ex


def test_the_controls_mean_the_same_on_sim_and_spark(tmp_path: Path) -> None:
    sim = _sim(tmp_path / "sim")
    sent: list[tuple[str, object]] = []
    spark = _spark(tmp_path / "spark", sent)
    try:
        for ex in (sim, spark):
            assert isinstance(ex, ExecutorControls)
            assert ex.task_names() == ["source[0]", "source[1]", "count[0]", "count[1]"]
            assert ex.channel_names() == sorted(ex.channel_names()) and len(ex.channel_names()) == 4
            unknown = "no subtask 'nope\\[0\\]' \\(running: source\\[0\\]"
            with pytest.raises(ValueError, match=unknown):
                ex.crash("nope[0]")
            with pytest.raises(ValueError, match=unknown):
                ex.skew_clock("nope[0]", 5)
            with pytest.raises(ValueError, match="no channel 'a->b'"):
                ex.delay_next_barrier("a->b", 10)
            ex.crash(None)  # every subtask: the whole job fails over, on both
            ex.skew_clock("count[1]", -30)
            assert ex.skews == {"count[1]": -30}  # remembered for later attempts
            ex.storage_gate("slow", 20)
            assert ex.storage_mode == ("slow", 20)
        assert sim.crash_requests == [None] and sim.processes() is None
        assert [t for t, m in sent if isinstance(m, Crash)] == spark.task_names()
        assert ("count[1]", Skew(-30)) in sent and ("*", StorageGate("slow", 20)) in sent
        assert spark.processes() is spark.cluster
    finally:
        spark.server.close()
        sim._retire("test end")


def test_a_late_ack_of_a_retired_deployment_discards_what_it_wrote(tmp_path: Path) -> None:
    """A task of a cancelled job that finished its snapshot after the abort: its ack names the old
    deployment, the checkpoint never completes (ids are never reused), so its directory goes; a
    completed checkpoint (``_metadata`` there) is never touched."""
    ex = _spark(tmp_path, [])
    try:
        storage, job = ex.master.storage, ex.master.job_id
        late, done = storage.checkpoint_dir(job, 3), storage.checkpoint_dir(job, 2)
        for d in (late, done):
            d.mkdir(parents=True)
            (d / "count-1.state").write_bytes(b"x")
        (done / "_metadata").write_text("{}")
        ex._handle(
            "count[1]", Ack(0, 3, "count", 1, StateFileHandle("count", 1, "count-1.state", 1, 0), None)
        )
        ex._handle(
            "count[1]", Ack(0, 2, "count", 1, StateFileHandle("count", 1, "count-1.state", 1, 0), None)
        )
        assert not late.exists() and not list(late.parent.glob(".discarded-*"))
        assert (done / "count-1.state").exists() and (done / "_metadata").exists()
    finally:
        ex.server.close()


def test_a_task_of_a_cancelled_spark_job_does_not_join_the_deployment(tmp_path: Path) -> None:
    """Tasks name their Spark job group on registration: one of a job the driver cancelled (Spark may
    still start a relaunch of it) gets no ``Deploy`` and is not counted, so the current job's own task
    of the same name is not taken for a relaunch that starts yet another deployment."""
    sent: list[tuple[str, object]] = []
    ex = _spark(tmp_path, sent)
    try:
        ex._new_deployment(ex.graph, None)
        ex._job_group, number = "statechaos-run-1", ex.dep.number
        ex._handle("count[0]", Register(2, "statechaos-run-0"))
        assert not sent and "count[0]" not in ex.dep.registered
        ex._handle("count[0]", Register(2, "statechaos-run-1"))
        assert [(t, type(m).__name__) for t, m in sent] == [("count[0]", "Deploy")]
        assert ex.dep.number == number and ex.dep.registered == {"count[0]"}
    finally:
        ex.server.close()


def test_a_job_cancelled_before_spark_started_it_is_cancelled_once_it_starts(tmp_path: Path) -> None:
    """``cancelJobGroup`` reaches only a job Spark has started: a barrier job waiting for more slots
    than there are is resubmitted until they are there. One adaptive recovery cancelled that way
    started later and held the slots the next deployment waited for (allround-local: time limit).
    The driver cancels such a job again once Spark runs it, and forgets it once its thread ended."""
    sent: list[tuple[str, object]] = []
    ex = _spark(tmp_path, sent)
    cancels: list[str] = []
    jobs = {"statechaos-run-3": [7]}
    active: list[int] = []
    tracker = SimpleNamespace(getActiveJobsIds=lambda: active, getJobIdsForGroup=lambda g: jobs.get(g, []))
    ex.cluster = SimpleNamespace(
        sc=SimpleNamespace(cancelJobGroup=cancels.append, statusTracker=lambda: tracker)
    )
    done = threading.Event()
    th = threading.Thread(target=done.wait)
    th.start()
    try:
        ex._cancelled_jobs.append((th, "statechaos-run-3"))
        ex._cancel_again()
        assert cancels == []  # not started: nothing a cancel could reach
        active.append(7)
        ex._cancel_again()  # within 0.5 s of the last poll
        assert cancels == []
        ex._cancels_repeated -= 0.5
        ex._cancel_again()
        assert cancels == ["statechaos-run-3"]
        assert "cancelled Spark jobs still running: statechaos-run-3" in ex._waiting_for()
        done.set()
        th.join()
        ex._cancels_repeated -= 0.5
        ex._cancel_again()
        assert cancels == ["statechaos-run-3"] and ex._cancelled_jobs == []
    finally:
        done.set()
        ex.server.close()
