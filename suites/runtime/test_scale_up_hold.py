"""The end of input held for an adaptive scale-up (``SparkExecutor._holds_for_scale_up``), without
Spark: a fake cluster and a fake clock. The hold follows the cluster's moves towards the slots, not a
fixed time: a replacement executor JVM that takes longer than the gate's limit to start on a loaded
machine still gets its scale-up, and a hold with nothing moving lets go after that limit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import allure
import psutil
import pytest

from harness.driver.coordinator import CheckpointConfig
from harness.history import read_history
from harness.jobs import build_job
from harness.run_store import RunStore

pytestmark = [allure.epic("runtime"), allure.feature("adaptive recovery")]

LIMIT_MS = 30_000  # the gate's limit on Spark at interval_ms=50: its 30 s floor


class FakeCluster:
    """What the driver sees of executors coming: set by the test as its fake time goes on."""

    master = "x"

    def __init__(self) -> None:
        self.slots, self.registered, self.jvms, self.cpu_s = 2, ("1", "2"), (11, 12), 0.0

    def executors_coming(self) -> dict[str, Any]:
        return {
            "task_slots": self.slots,
            "executors_registered": self.registered,
            "executor_jvms": self.jvms,
            "starting_executors_cpu_s": round(self.cpu_s, 1),
        }


@pytest.fixture
def held(tmp_path: Path):
    """A Spark driver whose job runs at count 1 of its configured 2 (adaptive recovery scaled it
    down), on a fake cluster and a fake clock (``clock[0]``, run ms)."""
    from harness.spark.executor import SparkExecutor

    spec = build_job("keyed_count", 100, 10, 1, 16, {"source": 1, "count": 1})
    cluster = FakeCluster()
    ex = SparkExecutor(spec.graph, tmp_path, CheckpointConfig(interval_ms=50), cluster)  # type: ignore[arg-type]
    ex.configured = {"source": 1, "count": 2}
    clock = [0]
    ex.now_ms = lambda: clock[0]  # type: ignore[method-assign]
    assert ex.gate.limit_ms == LIMIT_MS
    yield ex, cluster, clock
    ex.server.close()


def _hold_until(ex, clock, end_ms: int, step_ms: int = 250, on_tick=None) -> int | None:
    """Ask the hold every ``step_ms`` until ``end_ms``; when it let go (run ms), or None."""
    while clock[0] <= end_ms:
        if on_tick is not None:
            on_tick(clock[0])
        if not ex._holds_for_scale_up(True, clock[0]):
            return clock[0]
        clock[0] += step_ms
    return None


def _events(ex, kind: str) -> list[dict]:
    ex.history.flush()
    return [e for e in read_history(RunStore(ex.run_dir).history) if e["type"] == kind]


def test_a_slow_replacement_executor_keeps_the_hold_while_it_starts(held):
    """The worker relaunches the lost executor at 5 s; its JVM starts for 70 s (working: its CPU time
    grows) before it registers. The old fixed 30 s hold let the input end at 30 s and the job never
    scaled back up; now the hold lasts until the slots are there and the scale-up takes over."""
    ex, cluster, clock = held

    def executor_comes(t: int) -> None:
        if t >= 5_000:
            cluster.jvms = (11, 12, 13)
            cluster.cpu_s = (t - 5_000) / 1000 * 0.08  # ~2/28 of a core at load 28
        if t >= 75_000:
            cluster.registered, cluster.slots = ("1", "2", "3"), 3
            ex.capacity_since = t / 1000  # the driver's poll saw slots for the larger deployment

    assert _hold_until(ex, clock, 90_000, on_tick=executor_comes) is None
    assert not ex.scale_up_given_up
    assert [e["limit_ms"] for e in _events(ex, "input_held")] == [LIMIT_MS]
    assert _events(ex, "input_released") == []


def test_a_hold_with_nothing_moving_towards_the_slots_lets_go_after_the_limit(held):
    ex, cluster, clock = held

    def jvm_appears_then_nothing(t: int) -> None:
        if t >= 10_000:
            cluster.jvms = (11, 12, 13)

    released = _hold_until(ex, clock, 120_000, on_tick=jvm_appears_then_nothing)
    assert released is not None and 10_000 + LIMIT_MS < released <= 10_000 + LIMIT_MS + 1_000, released
    assert ex.scale_up_given_up
    [rel] = _events(ex, "input_released")
    assert rel["held_ms"] == released
    cluster.registered, cluster.slots = ("1", "2", "3"), 3  # too late: the input has ended
    assert not ex._holds_for_scale_up(True, clock[0] + 1_000)


def test_slots_stabilizing_and_the_scale_up_under_way_hold_without_moving(held):
    """Once the slots are there nothing moves while they stabilize (the resource stabilization
    timeout, bounded on its own) and while the stop-with-savepoint runs: the hold does not count that
    time, and counts again once neither holds."""
    ex, cluster, clock = held
    cluster.registered, cluster.slots = ("1", "2", "3"), 3
    ex.capacity_since = 0.0  # stabilizing for 60 s: twice the limit, with nothing moving
    assert _hold_until(ex, clock, 60_000) is None
    ex.capacity_since = None  # e.g. the slots went again, and nothing comes
    released = _hold_until(ex, clock, 120_000)
    assert released is not None and 60_000 + LIMIT_MS < released <= 60_000 + LIMIT_MS + 1_000, released


def test_a_job_at_its_configured_parallelism_is_not_held(held):
    ex, _, clock = held
    ex.configured = ex.graph.parallelism()
    assert not ex._holds_for_scale_up(True, clock[0])
    assert _events(ex, "input_held") == []


def test_the_cluster_counts_the_cpu_time_of_executor_jvms_not_registered_yet(monkeypatch):
    """``SparkCluster.executors_coming`` without Spark: a process that has worked (as a starting JVM
    does) stands in for executor 1, not registered; executor 0 (this process) is registered, so its
    CPU time is not counted."""
    import subprocess
    import sys

    from harness.spark.cluster import SparkCluster

    burn = "import time\nwhile time.process_time() < 0.3: pass\nprint('worked', flush=True)\ntime.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "worked"
        cluster = SparkCluster("local-cluster[2,1,1024]")
        registered = ["0"]
        monkeypatch.setattr(cluster, "registered_executors", lambda: list(registered))
        monkeypatch.setattr(cluster, "executor_pids", lambda: {"0": os.getpid(), "1": proc.pid})
        monkeypatch.setattr(cluster, "task_slots", lambda: len(registered))
        t = psutil.Process(proc.pid).cpu_times()
        coming = cluster.executors_coming()
        assert coming == {
            "task_slots": 1,
            "executors_registered": ("0",),
            "executor_jvms": tuple(sorted((os.getpid(), proc.pid))),
            "starting_executors_cpu_s": round(t.user + t.system, 1),
        }
        assert coming["starting_executors_cpu_s"] >= 0.3
        registered.append("1")  # it registered: its CPU time no longer tells anything
        assert cluster.executors_coming()["starting_executors_cpu_s"] == 0.0
    finally:
        proc.kill()
        proc.wait()
