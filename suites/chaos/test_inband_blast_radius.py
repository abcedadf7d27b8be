"""In-band process faults act only on the run's own executor, proven on planted process trees (no
Spark): a "JVM" whose command line mimics ``CoarseGrainedExecutorBackend --executor-id N --app-id A``
with a "task" below it that receives the driver's fault message. A look-alike of another application
or another executor, or a candidate that is not the task's ancestor, is refused with the reason; the
run's own is killed, paused (and resumed by a helper that survives the executor's process group), or
its Python worker killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from chaos.scenario import Scenario
from harness.driver.messages import InbandFault, InbandHome, InbandReply, encode
from harness.events import FaultDelivered, FaultStart
from harness.oracles.fault_schedule import unconfirmed
from harness.spark.inband import (
    ExecutorHome,
    Refused,
    act,
    find_home,
    verify_executor,
)
from harness.spark.inband_control import InbandFaults, NoTaskThere
from reference_impl.errors import InputError

BACKEND = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
OURS = "app-20261125170000-0007"

# the planted "task": runs act() on the message in argv, printing what it sends to the driver
TASK = """
import json, sys, time
from harness.driver.messages import decode, encode
from harness.spark.inband import act, find_home
home = find_home()
print(json.dumps(["home", None if home is None else home.__dict__]), flush=True)
act(decode(json.loads(sys.argv[1])), lambda m: print(json.dumps(encode(m)), flush=True))
print(json.dumps(["alive"]), flush=True)
time.sleep(30)
"""
# the planted "executor JVM": starts the task as its child, then waits
JVM = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(60)
"""

# real processes signalled and waited for: seconds each; out of the fast tier
pytestmark = pytest.mark.slow


class Planted:
    def __init__(self, app_id: str, executor_id: str, msg: InbandFault) -> None:
        argv = [sys.executable, "-c", JVM, TASK, json.dumps(encode(msg))]
        argv += [BACKEND, "--executor-id", executor_id, "--app-id", app_id, "--hostname", "elsewhere"]
        self.jvm = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: list[list] = []

    def read(self, n: int) -> list[list]:
        while len(self.lines) < n:  # bounded: the planted JVM exits within 60 s, closing stdout
            line = self.jvm.stdout.readline()
            if not line:
                break
            self.lines.append(json.loads(line))
        return self.lines

    def task_pid(self) -> int:
        for _ in range(3000):  # 60 s: a hang's bound (a Python child starts slowly on a loaded machine)
            kids = psutil.Process(self.jvm.pid).children()
            if kids:
                return kids[0].pid
            time.sleep(0.02)
        raise AssertionError("the planted task did not start")

    def close(self) -> None:
        with_group = [self.jvm.pid]
        for pid in with_group:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.jvm.wait(timeout=60)


@pytest.fixture
def plant():
    made: list[Planted] = []

    def make(
        app_id: str, executor_id: str, action: str, expect_app: str = OURS, duration_ms: int = 0
    ) -> Planted:
        p = Planted(app_id, executor_id, InbandFault(7, action, expect_app, "0", duration_ms))
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _status(pid: int, want: str, timeout_s: float = 30) -> str:  # a hang's bound: ends once ``want``
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status = psutil.Process(pid).status()
        except psutil.NoSuchProcess:
            return "gone"
        if status == want or time.monotonic() > deadline:
            return status
        time.sleep(0.02)


def test_the_task_finds_its_executor_as_its_ancestor(plant):
    p = plant(OURS, "0", "no_such_action")
    home, reply, _ = p.read(3)
    assert home[1]["jvm_pid"] == p.jvm.pid
    assert (home[1]["executor_id"], home[1]["app_id"]) == ("0", OURS)
    assert reply[:3] == ["inband_reply", 7, False] and "unknown in-band action" in reply[3]["reason"]


def test_a_look_alike_executor_of_another_application_is_refused(plant):
    p = plant("app-20261125170000-0099", "0", "kill_executor")
    _, reply, alive = p.read(3)
    assert reply[:3] == ["inband_reply", 7, False]
    assert "app-20261125170000-0099" in reply[3]["reason"] and OURS in reply[3]["reason"]
    assert alive == ["alive"] and p.jvm.poll() is None  # nothing was killed


def test_another_executor_of_the_same_application_is_refused(plant):
    p = plant(OURS, "1", "pause_executor", duration_ms=500)
    _, reply, _ = p.read(3)
    assert reply[:3] == ["inband_reply", 7, False] and "executor '1'" in reply[3]["reason"]
    assert _status(p.jvm.pid, psutil.STATUS_STOPPED, 0.5) != psutil.STATUS_STOPPED


def test_a_candidate_that_is_not_the_tasks_ancestor_is_refused(plant):
    p = plant(OURS, "0", "no_such_action")
    p.read(1)
    # the planted JVM has exactly the run's identity, but this process does not run under it
    with pytest.raises(Refused, match="not an ancestor of this task"):
        verify_executor(p.jvm.pid, OURS, "0")
    assert verify_executor(p.jvm.pid, OURS, "0", me=p.task_pid()) == p.jvm.pid


def test_outside_any_executor_the_task_refuses():
    sent: list[InbandReply] = []
    assert find_home() is None
    act(InbandFault(3, "kill_executor", OURS, "0", 0), sent.append)
    assert sent == [InbandReply(3, False, {"reason": "no Spark executor JVM among this task's ancestors"})]


def test_the_runs_own_executor_is_killed_after_the_confirmation(plant):
    p = plant(OURS, "0", "kill_executor")
    _, reply = p.read(2)
    assert reply[:3] == ["inband_reply", 7, True] and reply[3]["pid"] == p.jvm.pid
    assert p.jvm.wait(timeout=60) == -signal.SIGKILL


def test_a_python_worker_kill_kills_the_task_not_the_executor(plant):
    p = plant(OURS, "0", "kill_python_worker")
    task = p.task_pid()
    _, reply = p.read(2)
    assert reply[:3] == ["inband_reply", 7, True] and reply[3]["pid"] == task
    assert _status(task, "gone") in ("gone", psutil.STATUS_ZOMBIE)
    assert p.jvm.poll() is None  # the executor lives on


def test_the_daemon_kill_refuses_when_there_is_no_pyspark_daemon(plant):
    p = plant(OURS, "0", "kill_python_daemon")
    _, reply, _ = p.read(3)
    assert reply[:3] == ["inband_reply", 7, False] and "no pyspark.daemon" in reply[3]["reason"]


def test_pause_freezes_the_executor_and_a_detached_helper_resumes_it(plant):
    # the pause must still hold when its stop is looked at: 5 s, not a moment a loaded machine outlasts
    p = plant(OURS, "0", "pause_executor", duration_ms=5000)
    task = p.task_pid()
    _, reply = p.read(2)
    assert reply[:3] == ["inband_reply", 7, True] and reply[3]["pid"] == p.jvm.pid
    assert _status(p.jvm.pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    assert _status(task, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED  # the task freezes with it
    helpers = [
        h for h in psutil.process_iter(["cmdline"]) if "harness.spark.inband" in (h.info["cmdline"] or [])
    ]
    assert len(helpers) == 1
    helper = helpers[0]
    assert os.getsid(helper.pid) != os.getsid(p.jvm.pid) and helper.pid not in {
        c.pid for c in psutil.Process(p.jvm.pid).children(recursive=True)
    }
    assert _status(p.jvm.pid, psutil.STATUS_SLEEPING, 60) != psutil.STATUS_STOPPED  # resumed
    assert p.read(3)[-1] == ["alive"]  # the task goes on after the SIGCONT
    helper.wait(timeout=60)  # it ends by itself (not our child: no exit code to read)


def test_the_resume_helper_outlives_the_executors_process_group(plant):
    p = plant(OURS, "0", "pause_executor", duration_ms=5000)
    p.read(2)
    assert _status(p.jvm.pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    helper = next(
        h for h in psutil.process_iter(["cmdline"]) if "harness.spark.inband" in (h.info["cmdline"] or [])
    )
    os.killpg(p.jvm.pid, signal.SIGKILL)  # what stopping an executor's group does
    p.jvm.wait(timeout=60)
    assert helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE
    helper.wait(timeout=60)  # it still runs to its end (its SIGCONTs find nothing)


# ---- the driver's side: targets by identity, and the fault schedule's confirmation rule ----------------
def _control(dep: list[int]) -> tuple[InbandFaults, list]:
    sent: list = []
    events: list = []
    ctl = InbandFaults(
        lambda t, m: sent.append((t, m)) or True,
        lambda *a, **k: events.append((a, k)),
        lambda: OURS,
        lambda: dep[0],
    )
    return ctl, sent


def test_targets_are_executor_ids_and_subtasks_of_the_current_deployment():
    import random

    dep = [0]
    ctl, sent = _control(dep)
    with pytest.raises(NoTaskThere):
        ctl.target("executor:0", random.Random(1))
    ctl.on_message("count[0]", ExecutorHome("5", OURS, 100, "h1").as_message())
    ctl.on_message("source[0]", ExecutorHome("12", OURS, 200, "h2").as_message())
    ctl.on_message("count[1]", InbandHome(None, None, None, "h3"))  # no executor found: never a target
    # executor:N counts the executors by id, numerically: 5 then 12
    assert ctl.target("executor:0", random.Random(1)).home.executor_id == "5"
    assert ctl.target("executor:1", random.Random(1)).task == "source[0]"
    assert ctl.target("count[0]", random.Random(1)).home.host == "h1"
    with pytest.raises(NoTaskThere, match="count\\[1\\]"):
        ctl.target("count[1]", random.Random(1))
    to = ctl.target("executor:1", random.Random(1))
    ctl.send(4, "pause_executor", to, 3000)
    assert sent == [("source[0]", InbandFault(4, "pause_executor", OURS, "12", 3000))]
    dep[0] = 1  # a new deployment: what tasks reported before is stale until they register again
    with pytest.raises(NoTaskThere):
        ctl.target("executor:0", random.Random(1))


def test_an_inband_fault_counts_as_acted_only_when_its_task_confirmed():
    def start(fid: int, delivery: str = "inband") -> FaultStart:
        details = {"delivery": delivery, "task": "count[1]"}
        return FaultStart(fault_id=fid, kind="kill_executor", target="count[1]", trigger="t", details=details)

    def delivered(fid: int, acted: bool, **extra: str) -> FaultDelivered:
        return FaultDelivered(fault_id=fid, delivery="inband", task="count[1]", acted=acted, extra=extra)

    events = [
        start(1),
        delivered(1, True),
        start(2),
        delivered(2, False, reason="pid 9 belongs to application 'x'"),
        start(3),
        start(4, "out_of_band"),
    ]
    got = unconfirmed(events)
    assert set(got) == {2, 3}
    assert "refused" in got[2] and "application 'x'" in got[2]
    assert "count[1] never confirmed" in got[3]


def test_out_of_band_delivery_is_refused_where_this_host_cannot_reach_the_executors():
    fault = {"at": "checkpoint:1", "kind": "kill_executor", "delivery": "out_of_band"}
    base = {"name": "x", "job": "keyed_count", "faults": [fault]}
    Scenario.model_validate({**base, "cluster": "local"})
    with pytest.raises((InputError, ValueError), match="delivery"):
        Scenario.model_validate({**base, "cluster": "spark://master:7077"})
    with pytest.raises((InputError, ValueError), match="delivery"):
        Scenario.model_validate({**base, "cluster": "local", "faults": [{**fault, "delivery": "ssh"}]})
