"""In-band process faults, the task's side: a barrier task acts on its *own* executor, on its own host,
when the driver asks over the coordinator link. No SSH, no Docker API, no process list of another host:
whatever the cluster manager, the executor JVM is an ancestor of the Python worker that runs the task
(JVM -> ``pyspark.daemon`` -> forked worker), and a process may signal its own ancestors when they
run as the same user.

Identity, never host: before it touches anything the task finds the JVM among its ancestors and checks
its command line names an executor backend class with this run's ``--app-id`` and the expected
``--executor-id`` (both sent by the driver, which knows its application id). Anything else is refused
with :class:`Refused`, and the refusal, not an action, goes back to the driver.

``python -m harness.spark.inband pause MS PID`` is the resume helper of ``pause_executor``: started in a
new session and detached (it forks, its parent exits), it outlives the executor's process group,
waits for ``go`` on stdin (sent once the driver has the task's confirmation), SIGSTOPs the JVM and
its descendants, sleeps, and SIGCONTs them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.driver.messages import InbandFault, InbandHome, InbandReply
from harness.spark.cmdline import arg, cmdline

__all__ = [
    "BACKEND_CLASSES",
    "ACTIONS",
    "ExecutorHome",
    "Refused",
    "find_home",
    "verify_executor",
    "python_target",
    "home_message",
    "act",
]

# the executor backends' main classes: standalone/local-cluster, YARN, Kubernetes
BACKEND_CLASSES = (
    "org.apache.spark.executor.CoarseGrainedExecutorBackend",
    "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
    "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
)

ACTIONS = ("kill_executor", "pause_executor", "kill_python_worker", "kill_python_daemon")


class Refused(Exception):
    """The task will not act: the process is not provably this run's own executor (or its worker)."""


@dataclass(frozen=True)
class ExecutorHome:
    """Where a task runs, as its ancestor JVM's command line says."""

    executor_id: str
    app_id: str
    jvm_pid: int
    host: str

    def as_message(self) -> InbandHome:
        return InbandHome(self.executor_id, self.app_id, self.jvm_pid, self.host)


def _ancestors(pid: int) -> list[int]:
    """Parent, grandparent, ... of ``pid`` (nearest first), up to the root."""
    out: list[int] = []
    try:
        p = psutil.Process(pid).parent()
        while p is not None and p.pid not in out:
            out.append(p.pid)
            p = p.parent()
    except psutil.Error:
        pass
    return out


def _backend(cmd: list[str]) -> str | None:
    return next((c for c in BACKEND_CLASSES if c in cmd), None)


def find_home(me: int | None = None) -> ExecutorHome | None:
    """The nearest ancestor of ``me`` (this process) that is a Spark executor JVM, or None."""
    for pid in _ancestors(os.getpid() if me is None else me):
        cmd = cmdline(pid)
        if _backend(cmd):
            return ExecutorHome(
                arg(cmd, "--executor-id") or "?", arg(cmd, "--app-id") or "?", pid, socket.gethostname()
            )
    return None


def verify_executor(pid: int, app_id: str, executor_id: str, me: int | None = None) -> int:
    """``pid`` if it is this run's executor ``executor_id`` and the executor of this task: an ancestor
    of ``me`` whose command line names an executor backend with ``--app-id app_id`` and
    ``--executor-id executor_id``; else :class:`Refused`, saying which check failed."""
    me = os.getpid() if me is None else me
    cmd = cmdline(pid)
    if not cmd:
        raise Refused(f"pid {pid} is gone or unreadable")
    if pid not in _ancestors(me):
        raise Refused(f"pid {pid} ({' '.join(cmd[:2])}) is not an ancestor of this task: not its executor")
    if not _backend(cmd):
        raise Refused(f"pid {pid} is not a Spark executor: its command line names no executor backend")
    found_app, found_id = arg(cmd, "--app-id"), arg(cmd, "--executor-id")
    if found_app != app_id:
        raise Refused(f"pid {pid} belongs to application {found_app!r}, not this run's {app_id!r}")
    if found_id != executor_id:
        raise Refused(f"pid {pid} is executor {found_id!r}, not the targeted executor {executor_id!r}")
    return pid


def own_executor(app_id: str, executor_id: str, me: int | None = None) -> int:
    """The pid of this task's executor JVM, verified (:func:`verify_executor`)."""
    home = find_home(me)
    if home is None:
        raise Refused("no Spark executor JVM among this task's ancestors")
    return verify_executor(home.jvm_pid, app_id, executor_id, me)


def python_target(which: str, jvm_pid: int, me: int | None = None) -> int:
    """The Python process to kill below the verified executor ``jvm_pid``: this task's own worker
    (``worker``), or the ``pyspark.daemon`` between it and the JVM (``daemon``)."""
    me = os.getpid() if me is None else me
    chain = _ancestors(me)
    if jvm_pid not in chain:
        raise Refused(f"this task (pid {me}) does not run under executor pid {jvm_pid}")
    if which == "worker":
        return me
    between = chain[: chain.index(jvm_pid)]
    daemon = next((p for p in between if "pyspark.daemon" in cmdline(p)), None)
    if daemon is None:
        raise Refused("no pyspark.daemon between this task and its executor (spark.python.use.daemon off?)")
    return daemon


def home_message() -> InbandHome:
    """What a task tells the driver on registration: where it runs (executor id, app id, JVM pid, host),
    or that it found no executor among its ancestors."""
    home = find_home()
    return home.as_message() if home else InbandHome(None, None, None, socket.gethostname())


Send = Callable[[InbandReply], None]


def act(msg: InbandFault, send: Send) -> None:
    """Carry out the driver's :class:`InbandFault` on this task's own executor. The confirmation (or
    refusal) is sent *before* a kill, which ends this process."""
    fault_id, action, app_id, executor_id, duration_ms = (
        msg.fault_id,
        msg.action,
        msg.app_id,
        msg.executor_id,
        msg.duration_ms,
    )
    try:
        jvm = own_executor(str(app_id), str(executor_id))
        if action == "kill_executor":
            target = jvm
        elif action in ("kill_python_worker", "kill_python_daemon"):
            target = python_target("daemon" if action == "kill_python_daemon" else "worker", jvm)
        elif action == "pause_executor":
            target = jvm
        else:
            raise Refused(f"unknown in-band action {action!r}")
    except Refused as e:
        send(InbandReply(fault_id, False, {"reason": str(e)}))
        return
    details = {"pid": target, "executor_id": str(executor_id), "host": socket.gethostname(), "action": action}
    if action == "pause_executor":
        try:
            helper = _start_resume_helper(jvm, int(duration_ms or 0))
        except OSError as e:
            send(InbandReply(fault_id, False, {"reason": f"cannot start the resume helper: {e}"}))
            return
        send(InbandReply(fault_id, True, {**details, "resume_helper": "detached, new session"}))
        helper.go()
        return
    send(InbandReply(fault_id, True, details))
    try:
        os.kill(target, signal.SIGKILL)
    except OSError as e:  # not permitted (another user), or already gone
        send(InbandReply(fault_id, False, {"reason": f"SIGKILL of pid {target} failed: {e}"}))


class _Helper:
    def __init__(self, stdin: Any) -> None:
        self.stdin = stdin

    def go(self) -> None:
        """Let the helper freeze the executor (this task freezes with it, until the SIGCONT)."""
        try:
            self.stdin.write(b"go\n")
            self.stdin.close()
        except OSError:
            pass


def _start_resume_helper(jvm_pid: int, duration_ms: int) -> _Helper:
    """Start the detached pause/resume helper; it waits for ``go``."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen(
        [sys.executable, "-m", "harness.spark.inband", "pause", str(duration_ms), str(jvm_pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the executor's process group: a group kill spares it
        close_fds=True,
        env=env,
    )
    p.wait(timeout=30)  # the launcher exits as soon as it has forked the helper: nothing to reap later
    return _Helper(p.stdin)


def _pause_main(duration_ms: int, jvm_pid: int) -> None:
    if os.fork():  # the launcher: exit at once, so the helper is reparented, not the task's child
        os._exit(0)
    if sys.stdin.readline().strip() != "go":
        os._exit(0)  # the task refused or died before confirming: do nothing
    me = os.getpid()
    try:
        jvm = psutil.Process(jvm_pid)
        procs = [jvm, *jvm.children(recursive=True)]
    except psutil.Error:
        os._exit(0)
    stopped = []
    for p in procs:
        if p.pid == me:
            continue
        try:
            os.kill(p.pid, signal.SIGSTOP)
            stopped.append(p.pid)
        except OSError:
            pass
    time.sleep(duration_ms / 1000)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "pause":
        _pause_main(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("usage: python -m harness.spark.inband pause DURATION_MS JVM_PID")
