"""The driver's side of a deployment's start (``SparkExecutor._handle``), without Spark: a task waiting
for its peers (its ``Gather``) hears ``Waiting`` each time another task registers or gathers, so its
wait follows progress (``harness.spark.task_runner``); a ``Gather`` from a deployment that is gone is
answered ``Cancel`` at once (it would otherwise wait its whole stall bound for ``Peers`` that never
come), or ``Crash`` when a stage relaunch replaced it in the Spark job still running (the task must
fail so that Spark runs it again), a ``Register`` from a cancelled Spark job joins nothing, and a task
whose peer closed learns whether its job was cancelled by asking (``AskCancelled``), not by waiting."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import allure
import pytest

from harness.driver.coordinator import CheckpointConfig
from harness.driver.messages import (
    AskCancelled,
    Cancel,
    Crash,
    Deploy,
    Gather,
    NotCancelled,
    Peers,
    Register,
    Waiting,
)
from harness.jobs import build_job

pytestmark = [allure.epic("runtime"), allure.feature("deployment start")]

TASKS = ["source[0]", "source[1]", "count[0]", "count[1]"]


@pytest.fixture
def driver(tmp_path: Path):
    """A Spark driver with a fake cluster whose sends are recorded; deployment 0 started."""
    from harness.spark.executor import SparkExecutor

    spec = build_job("keyed_count", 100, 10, 1, 16, {"source": 2, "count": 2})
    ex = SparkExecutor(spec.graph, tmp_path, CheckpointConfig(interval_ms=50), SimpleNamespace(master="x"))
    ex.sent = []
    ex._send = lambda task, msg: ex.sent.append((task, msg)) or True  # type: ignore[method-assign]
    ex._broadcast = lambda msg: ex.sent.append(("*", msg))  # type: ignore[method-assign]
    ex._job_group = "job-1"
    ex._new_deployment(ex.graph, None)
    yield ex
    ex.server.close()


def _taken(ex, kind):
    """What ``ex`` sent of ``kind`` since the last call, as (task, message)."""
    out = [(t, m) for t, m in ex.sent if isinstance(m, kind)]
    ex.sent.clear()
    return out


def test_waiting_tasks_hear_each_registration_and_gather_until_peers_come(driver):
    ex, n = driver, len(TASKS)
    ex._handle("source[0]", Register(0, "job-1"))
    assert [(t, type(m)) for t, m in ex.sent] == [("source[0]", Deploy)]  # nobody waits yet
    ex.sent.clear()
    ex._handle("source[0]", Gather(0, "a"))
    assert _taken(ex, Waiting) == [("source[0]", Waiting(1, 1, n))]  # its own gather counts
    ex._handle("count[0]", Register(2, "job-1"))  # another task registering is progress for the waiter
    assert _taken(ex, Waiting) == [("source[0]", Waiting(2, 1, n))]
    ex._handle("count[0]", Gather(0, "c"))
    assert sorted(_taken(ex, Waiting)) == [("count[0]", Waiting(2, 2, n)), ("source[0]", Waiting(2, 2, n))]
    for i, t in ((1, "source[1]"), (3, "count[1]")):
        ex._handle(t, Register(i, "job-1"))
    assert {t for t, _ in _taken(ex, Waiting)} == {"source[0]", "count[0]"}  # both waiters, twice
    ex._handle("source[1]", Gather(0, "b"))
    assert {t for t, w in _taken(ex, Waiting) if w == Waiting(n, 3, n)} == {"source[0]", "count[0]", "source[1]"}
    ex._handle("count[1]", Gather(0, "d"))  # the last one: everyone gets every value, in task order
    assert sorted(_taken(ex, Peers)) == sorted((t, Peers(["a", "b", "c", "d"])) for t in TASKS)
    assert _taken(ex, Waiting) == []  # no Waiting after the Peers


def test_a_gather_from_a_deployment_that_is_gone_is_cancelled_and_joins_nothing(driver):
    ex = driver
    ex._handle("count[0]", Register(2, "job-1"))
    ex._handle("count[0]", Gather(0, "old"))
    ex._new_deployment(ex.graph, "task count[0] failed")  # deployment 1 replaces deployment 0
    ex.sent.clear()
    ex._handle("source[0]", Register(0, "job-1"))
    ex._handle("source[0]", Gather(1, "a"))
    ex.sent.clear()
    ex._handle("count[1]", Gather(0, "late"))  # a late task of deployment 0
    assert ex.sent == [("count[1]", Cancel())]  # told at once, nobody else told anything
    assert ex.dep.gathered == {"source[0]": "a"}  # not counted towards deployment 1's Peers


def test_a_task_of_a_cancelled_spark_job_does_not_register(driver):
    ex = driver
    ex._handle("source[0]", Register(0, "job-0"))  # the job adaptive recovery cancelled
    assert ex.sent == [] and ex.dep.registered == set()
    ex._handle("source[1]", Gather(0, "b"))
    assert _taken(ex, Waiting) == [("source[1]", Waiting(0, 1, len(TASKS)))]
    ex._handle("source[0]", Register(0, "job-0"))
    assert ex.sent == []  # no Deploy, and the waiting task hears of no progress: there was none


def test_a_task_asking_whether_its_job_was_cancelled_gets_the_drivers_answer(driver):
    """A task whose peer closed asks (``AskCancelled``); the answer follows any Cancel on the same link."""
    import threading

    ex = driver
    ex._handle("count[0]", AskCancelled("job-1"))
    assert ex.sent == [("count[0]", NotCancelled())]  # the running job: the close was a failure
    ex.sent.clear()
    ex.stopping_for_rescale = True  # the driver stops the job for a rescale
    ex._handle("count[0]", AskCancelled("job-1"))
    assert ex.sent == [("count[0]", Cancel())]
    ex.sent.clear()
    ex.stopping_for_rescale = False
    done = threading.Event()
    th = threading.Thread(target=done.wait)
    th.start()
    try:
        ex._cancelled_jobs.append((th, "job-0"))  # adaptive recovery cancelled job-0, still ending
        ex._handle("source[1]", AskCancelled("job-0"))
        ex._handle("source[0]", AskCancelled("job-1"))
        assert ex.sent == [("source[1]", Cancel()), ("source[0]", NotCancelled())]
    finally:
        done.set()
        th.join()


def test_each_task_registering_is_written_to_the_history(driver):
    """``task_registered``: while Spark brings tasks up after a fault, the progress ``liveness`` sees."""
    from harness.events import TaskRegistered

    ex, written = driver, []
    ex.history.emit = written.append
    ex._handle("count[1]", Register(3, "job-1"))
    ex._handle("source[0]", Register(0, "job-0"))  # a cancelled job's late task joins nothing
    assert [e for e in written if isinstance(e, TaskRegistered)] == [TaskRegistered(task="count[1]", attempt=0)]


def test_tasks_of_a_deployment_a_stage_relaunch_replaced_fail_rather_than_end(driver):
    """The stall of a docker run whose worker restarted: Spark relaunched the stage while a task of the
    attempt it failed was still starting. The relaunch's count[0] registers and gathers; the late
    source[0] of the failed attempt registers too (the driver cannot tell it apart); then the
    relaunch's own source[0] registers, which the driver takes for another relaunch. count[0], of the
    relaunch and waiting for the replaced deployment's Peers, must fail (Spark then runs the whole stage
    again) rather than end cleanly on a Cancel or wait for Peers that never come: either way Spark
    would never run it again and the new deployment would wait for it until the run stalled."""
    ex = driver
    replaced = ex.dep.number
    ex._handle("count[0]", Register(2, "job-1"))  # the relaunch's
    ex._handle("count[0]", Gather(replaced, "c"))
    ex._handle("count[1]", Register(3, "job-1"))  # the relaunch's, not gathered yet
    ex._handle("source[0]", Register(0, "job-1"))  # late, of the failed attempt
    ex.sent.clear()
    ex._handle("source[0]", Register(0, "job-1"))  # the relaunch's own: taken for a relaunch
    assert ex.dep.number == replaced + 1
    assert _taken(ex, Crash) == [("count[0]", Crash())]  # it waited for the replaced deployment's Peers
    for t in ("count[1]", "source[0]"):  # their Gather for the replaced deployment
        ex._handle(t, Gather(replaced, t))
    assert [(t, type(m)) for t, m in ex.sent] == [("count[1]", Crash), ("source[0]", Crash)]


def test_a_task_told_to_fail_while_it_sets_up_fails_instead_of_waiting():
    """The task's side: a Crash while it waits for its Deploy or its Peers fails it at once (Spark then
    relaunches the stage); a Cancel ends it cleanly."""
    from harness.spark.task_runner import Cancelled, Replaced, _Link

    class Client:
        def __init__(self, reply):
            self.reply = reply

        def send(self, raw):
            pass

        def poll(self, timeout_s):
            return [self.reply]

    with pytest.raises(Replaced):
        _Link(Client(Crash())).request(Gather(0, "x"), Peers, 5)
    with pytest.raises(Cancelled):
        _Link(Client(Cancel())).request(Gather(0, "x"), Peers, 5)


def test_a_task_registering_while_the_job_stops_for_a_rescale_is_cancelled_not_deployed(driver):
    """Once the job stops for a rescale (its savepoint complete), a task that registers (Spark
    relaunching the stage after a task died during the stop) gets ``Cancel`` and no ``Deploy``: no new
    deployment starts that would be cancelled while its peers start (they registered, never restored,
    and the run stalled)."""
    ex = driver
    for i, t in enumerate(TASKS):
        ex._handle(t, Register(i, "job-1"))
    number = ex.dep.number
    ex.sent.clear()
    ex.stopping_for_rescale = True
    ex._handle("count[0]", Register(2, "job-1"))  # registered before: a relaunch
    assert ex.sent == [("count[0]", Cancel())]
    assert ex.dep.number == number and ex.master.restarts == 0


def test_a_cancel_that_came_with_the_deploy_ends_the_task_before_it_asks_for_its_peers():
    """Task side: ``Deploy`` and ``Cancel`` read together leave the ``Cancel`` in the link's buffer;
    the next wait (for ``Peers``) ends at once, without asking, instead of waiting for peers that
    were cancelled."""
    from harness.spark.task_runner import Cancelled, _Link

    class Client:
        def __init__(self):
            self.sent, self.reads = [], [[Deploy(0, None, False, 0, {}), Cancel()]]

        def send(self, raw):
            self.sent.append(raw)

        def poll(self, timeout_s):
            return self.reads.pop(0) if self.reads else []

    client = Client()
    link = _Link(client)
    link.request(Register(0, "job-1"), Deploy, 5)
    with pytest.raises(Cancelled):
        link.request(Gather(0, "x"), Peers, 5)
    assert len(client.sent) == 1  # the Register only: no Gather was sent


def test_a_short_stall_limit_bounds_the_running_job_not_its_tasks_start(driver):
    """Spark launching a deployment's tasks (executor, Python worker, the job's imports) reports
    nothing the driver sees: until every task registered, the stall bound is at least
    ``TASK_START_BOUND_S``; after that, the scenario's own (here 20 s). The tasks' own start-up waits
    get the longer bound too."""
    from harness.progress import ProgressWatch, Stalled
    from harness.spark.executor import TASK_START_BOUND_S

    ex, now = driver, [0.0]
    ex.progress = ProgressWatch(20, clock=lambda: now[0])
    ex.cluster.task_slots = lambda: 4  # named in what a stall waited for
    assert ex.start_bound_s == TASK_START_BOUND_S > 20
    now[0] = 100.0  # 100 s and no task registered yet: still starting
    assert ex._out_of_time() is None
    for i, t in enumerate(TASKS):
        ex._handle(t, Register(i, "job-1"))
    assert ex._out_of_time() is None
    now[0] += 21  # all registered, then 21 s without progress: a stall at the scenario's bound
    with pytest.raises(Stalled, match=r"\(bound 20 s\)"):
        ex._out_of_time()
    ex._new_deployment(ex.graph, None)  # a task that never registers is still a stall, at the start bound
    assert ex._out_of_time() is None
    now[0] += TASK_START_BOUND_S - 1
    assert ex._out_of_time() is None
    now[0] += 2
    with pytest.raises(Stalled, match=rf"\(bound {TASK_START_BOUND_S:.0f} s\)"):
        ex._out_of_time()
