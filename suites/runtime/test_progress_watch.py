"""ProgressWatch: a wait fails only when nothing it waits for moved for the bound (a fake clock: no
test here depends on the machine's speed), and says what stopped and for how long."""

from __future__ import annotations

import pytest

from harness.progress import ProgressWatch


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_slow_run_that_keeps_moving_is_never_stalled_however_long_it_takes():
    clock = Clock()
    watch = ProgressWatch(10, clock)
    for n in range(100):  # 100 steps of 9 s: 900 s in all, far past the bound, moving every step
        clock.t += 9
        watch.observe(records=n, checkpoints=n // 10)
        assert watch.stalled() is None


def test_a_stall_names_every_signal_and_how_long_it_stood_still():
    clock = Clock()
    watch = ProgressWatch(10, clock)
    watch.observe(records=5, checkpoints=1)
    clock.t += 4
    watch.observe(records=7, checkpoints=1)  # records moved, checkpoints did not
    clock.t += 10
    watch.observe(records=7, checkpoints=1)
    assert watch.stalled() is None  # exactly the bound: not over it
    clock.t += 1
    why = watch.stalled()
    assert why == (
        "no progress for 11 s (bound 10 s): checkpoints (1) unchanged for 15 s, records (7) unchanged for 11 s"
    )
    watch.observe(records=7, checkpoints=2)  # progress again: no longer stalled
    assert watch.stalled() is None


def test_nothing_observed_counts_from_the_start_and_a_bound_must_be_positive():
    clock = Clock()
    watch = ProgressWatch(5, clock)
    clock.t += 6
    assert watch.stalled() == "no progress for 6 s (bound 5 s): nothing observed"
    with pytest.raises(ValueError, match="positive"):
        ProgressWatch(0)


class FakeTime:
    """The Spark cluster module's clock: each poll's sleep moves it 4 s on."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, _s: float) -> None:
        self.t += 4


def _cluster_registering(monkeypatch, every_polls: int, up_to: int):
    from harness.spark import cluster as cluster_mod

    c = cluster_mod.SparkCluster("spark://h:7077")  # never started: only its view of executors is faked
    fake = FakeTime()
    monkeypatch.setattr(cluster_mod, "time", fake)
    polls = iter(range(10_000))
    monkeypatch.setattr(
        c, "registered_executors", lambda: [str(i) for i in range(min(up_to, next(polls) // every_polls))]
    )
    return c, fake


def test_executors_starting_slowly_one_by_one_are_waited_for(monkeypatch):
    c, fake = _cluster_registering(monkeypatch, every_polls=2, up_to=100)  # one every 8 s
    assert c.wait_for_executors(6, timeout_s=10) == {}
    assert fake.t > 40  # far past the 10 s bound in all, but never 10 s without a new executor


def test_executors_that_stop_coming_fail_the_wait_saying_how_many_came(monkeypatch):
    c, _ = _cluster_registering(monkeypatch, every_polls=1, up_to=2)
    with pytest.raises(
        TimeoutError, match=r"2 of 6 executors registered .*executors_registered \(2\) unchanged"
    ):
        c.wait_for_executors(6, timeout_s=10)


class _ScriptedDriver:
    """A coordinator client whose driver answers from a script, one entry per poll; each poll takes
    one second of a fake clock (so no test here waits on the machine's speed)."""

    def __init__(self, script: list[list[object]]) -> None:
        import harness.driver.messages as ctl

        self.t, self.sent = 0.0, []
        self._script = [[ctl.encode(m) for m in step] for step in script]

    def send(self, raw: object) -> None:
        self.sent.append(raw)

    def poll(self, _timeout_s: float) -> list[object]:
        self.t += 1.0
        return self._script.pop(0) if self._script else []


def _link(monkeypatch, script):
    from harness.progress import ProgressWatch
    from harness.spark import task_runner

    client = _ScriptedDriver(script)
    monkeypatch.setattr(task_runner, "ProgressWatch", lambda b: ProgressWatch(b, clock=lambda: client.t))
    return task_runner._Link(client), task_runner  # type: ignore[arg-type]


def test_a_tasks_gather_waits_while_other_tasks_keep_registering(monkeypatch):
    import harness.driver.messages as ctl

    waiting = [[ctl.Waiting(2 + i, 1 + i, 12)] for i in range(10)]  # 10 s: over the 3 s bound in total
    link, _ = _link(monkeypatch, [*waiting, [ctl.Peers(["a", "b"])]])
    assert link.request(ctl.Gather(0, "a"), ctl.Peers, stall_s=3).values == ["a", "b"]


def test_a_tasks_wait_that_sees_no_progress_fails_naming_what_stopped(monkeypatch):
    import harness.driver.messages as ctl

    link, _ = _link(monkeypatch, [[ctl.Waiting(12, 5, 12)]])
    with pytest.raises(TimeoutError, match=r"no peers from the driver: no progress for 4 s \(bound 3 s\): "
                                           r"registered \(12\) unchanged for 4 s, gathered \(5\)"):  # fmt: skip
        link.request(ctl.Gather(0, "a"), ctl.Peers, stall_s=3)


def test_a_cancel_ends_a_tasks_wait_at_once(monkeypatch):
    import harness.driver.messages as ctl

    link, task_runner = _link(monkeypatch, [[ctl.Waiting(1, 1, 4)], [ctl.Cancel()]])
    with pytest.raises(task_runner.Cancelled, match="while waiting for peers"):
        link.request(ctl.Gather(0, "a"), ctl.Peers, stall_s=60)
    assert link.cancelled("job-1", 60)  # the cancel stays for the task's loop
    assert not any(b"ask_cancelled" in repr(m).encode() for m in link.client.sent)  # nothing to ask


class _AnsweringDriver(_ScriptedDriver):
    """A driver that answers a task's ``AskCancelled`` with ``answer``, ``late`` polls (fake seconds)
    after the question came: a loaded driver."""

    def __init__(self, answer: object, late: int) -> None:
        super().__init__([])
        self.answer, self.late, self.asked_at = answer, late, None

    def send(self, raw: object) -> None:
        import harness.driver.messages as ctl

        super().send(raw)
        if isinstance(ctl.decode(raw), ctl.AskCancelled):
            self.asked_at = self.t

    def poll(self, _timeout_s: float) -> list[object]:
        import harness.driver.messages as ctl

        self.t += 1.0
        if self.asked_at is not None and self.t - self.asked_at >= self.late:
            self.asked_at = None
            return [ctl.encode(self.answer)]
        return []


@pytest.mark.parametrize("answer", ["Cancel", "NotCancelled"])
def test_a_task_whose_peer_closed_asks_the_driver_and_waits_for_its_answer(monkeypatch, answer):
    """The driver's cancel may trail the peer's close by more than any fixed wait on a loaded machine
    (the task waited 1 s, then took the close for a failure): the task asks, and the answer decides."""
    import harness.driver.messages as ctl
    from harness.progress import ProgressWatch
    from harness.spark import task_runner

    client = _AnsweringDriver(getattr(ctl, answer)(), late=5)
    monkeypatch.setattr(task_runner, "ProgressWatch", lambda b: ProgressWatch(b, clock=lambda: client.t))
    link = task_runner._Link(client)  # type: ignore[arg-type]
    assert link.cancelled("job-1", stall_s=60) is (answer == "Cancel")
    assert [ctl.decode(m) for m in client.sent] == [ctl.AskCancelled("job-1")]
    assert client.t >= 5  # it waited for the answer, 5 s of the driver's time


def test_a_driver_that_never_answers_is_no_cancel(monkeypatch):
    import harness.driver.messages as ctl

    link, _ = _link(monkeypatch, [])
    assert not link.cancelled("job-1", stall_s=3)  # fails the task after its stall bound, as any wait
    assert [ctl.decode(m) for m in link.client.sent] == [ctl.AskCancelled("job-1")]


def test_a_planned_pause_does_not_count_and_progress_must_come_within_the_bound_after_it():
    clock = Clock()
    watch = ProgressWatch(10, clock)
    watch.observe(records=5)
    for _ in range(30):  # a pause of 300 s, far over the bound: the run is held, not stuck
        clock.t += 10
        watch.hold(["#2 pause_executor at checkpoint=1"])
        assert watch.stalled() is None
    clock.t += 10
    watch.hold([])  # the pause ended 10 s ago: still within the bound
    assert watch.stalled() is None and watch.stopped() == []
    clock.t += 1
    why = watch.stalled()
    assert why == (
        "no progress for 11 s (bound 10 s) since #2 pause_executor at checkpoint=1 stopped holding the tasks"
        " 11 s ago: records (5) unchanged for 311 s"
    )
    assert watch.stopped() == ["records"]
    watch.observe(records=6)
    assert watch.stalled() is None


def test_the_spark_driver_does_not_count_a_planned_pause_towards_a_stall(tmp_path):
    """The Spark driver's stall watch (no Spark: a fake cluster, a fake clock) holds while the fault
    scheduler reports a planned pause, and counts from the pause's end."""
    from types import SimpleNamespace

    from harness.driver.coordinator import CheckpointConfig
    from harness.jobs import build_job
    from harness.progress import Stalled
    from harness.spark.executor import SparkExecutor

    spec = build_job("keyed_count", 100, 10, 1, 16, {"source": 1, "count": 1})
    ex = SparkExecutor(spec.graph, tmp_path, CheckpointConfig(interval_ms=50), SimpleNamespace(master="x"))
    try:
        clock = Clock()
        ex.progress = ProgressWatch(10, clock)
        pauses = ["#1 pause_executor at checkpoint=2"]
        ex.faults = SimpleNamespace(holding=lambda: list(pauses))  # the started Nemesis's view
        for _ in range(20):  # 200 s paused: held, not stalled
            clock.t += 10
            assert ex._out_of_time() is None
        pauses.clear()  # the pause ended
        clock.t += 10
        assert ex._out_of_time() is None
        clock.t += 1
        with pytest.raises(Stalled, match="since #1 pause_executor at checkpoint=2 stopped holding"):
            ex._out_of_time()
    finally:
        ex.server.close()
