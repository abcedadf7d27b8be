"""One local cluster for many runs: inside :func:`local_cluster_session`, local-cluster runs with the
same master share one Spark application, reset between runs.

Why: starting Spark (driver JVM, master and workers, one executor JVM per worker) costs 8-17 s on a
2-core machine, often more than the job under test. A suite of N local-cluster scenarios in one
process (a pytest session through the plugin, one ``statechaos run`` of several files) then costs
one start plus N jobs.

A run hands the cluster back through :func:`reset`, which makes it look freshly started to the next
run, or says why it cannot:
- no job, stage or task of the previous run is left (jobs are cancelled, running tasks awaited);
- every worker has its executor again (local-cluster's Worker relaunches one a fault killed), none
  is stopped (SIGSTOP) and the driver knows no dead one;
- no Python worker is left: the idle ones Spark pooled for reuse are killed (Spark discards a dead
  pooled worker and forks a new one), so a fault of the next run only finds that run's workers.
A cluster that cannot be reset is stopped, and the next run starts a new one. Run directories are
each run's own as before; the driver's log lines go to the current run's ``logs/driver.log`` and
its executors' output is copied to its ``logs/executors/`` (the executors' files then hold every run
they served).

A run whose executors are not processes of this host (the docker stack's worker containers) shares
the application too when it says how to hand it back (:class:`RemoteExecutors`): the stack's
repair first (a killed worker started again, a paused one resumed), then the same wait for an idle
application with one executor per worker, and the pooled Python workers killed in the containers.
Its Spark arguments are part of the shape: a run with other ones gets a new application.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.progress import ProgressWatch
from harness.spark import cluster as cluster_mod
from harness.spark.cluster import NO_SPARK, SparkCluster, SparkRefused

__all__ = [
    "local_cluster_session",
    "cluster_for_run",
    "discard_master",
    "RemoteExecutors",
    "hand_back",
    "reset",
    "SharedStats",
    "session_stats",
    "session_cluster",
]

RESET_STALL_S = 30.0  # a reset fails when nothing it waits for changed for this long


class SharedStats:
    """What a session's cluster cost: Spark starts, runs served, seconds spent starting and resetting."""

    def __init__(self) -> None:
        self.starts = 0
        self.runs = 0
        self.start_s = 0.0
        self.reset_s = 0.0
        self.discarded: list[str] = []  # why a cluster was not reused

    def to_dict(self) -> dict[str, Any]:
        return {
            "starts": self.starts,
            "runs": self.runs,
            "start_s": round(self.start_s, 1),
            "reset_s": round(self.reset_s, 1),
            "discarded": list(self.discarded),
        }


@dataclass(frozen=True)
class RemoteExecutors:
    """How a shared application whose executors run elsewhere is handed back: ``executors`` is how
    many it has when idle (one per worker); ``repair`` undoes what the run's faults left on the
    workers; ``kill_python_workers`` kills the idle pooled Python workers and returns None, or why it
    could not."""

    executors: int
    repair: Callable[[], None]
    kill_python_workers: Callable[[], str | None]
    # executors elsewhere show no progress until they register (no JVM of theirs is visible here): a
    # relaunched one gets the bound a run gives its executors to come (chaos.cluster.spark_run), not 30 s
    stall_s: float = 120.0


class _Session:
    def __init__(self) -> None:
        self.cluster: SparkCluster | None = None
        self.shape: str = ""  # the master and Spark arguments the cluster was started with
        self.remote: RemoteExecutors | None = None
        self.stats = SharedStats()
        self.logs = Path(tempfile.mkdtemp(prefix="statechaos-shared-spark-"))

    def discard(self, why: str | None = None) -> None:
        if why:
            self.stats.discarded.append(why)
        c, self.cluster, self.remote = self.cluster, None, None
        cluster_mod.set_idle_shared(None)
        if c is not None:
            c.stop()


_SESSION: _Session | None = None


@contextlib.contextmanager
def local_cluster_session() -> Iterator[SharedStats]:
    """Share one local cluster among the local-cluster runs inside this block (nested: the outer
    block serves). Spark starts at the first such run, not before; the cluster is stopped when the
    block ends, also on error and Ctrl-C. Yields the session's :class:`SharedStats`."""
    global _SESSION
    if _SESSION is not None:
        yield _SESSION.stats
        return
    _SESSION = session = _Session()
    try:
        yield session.stats
    finally:
        _SESSION = None
        session.discard()
        shutil.rmtree(session.logs, ignore_errors=True)


def session_stats() -> SharedStats | None:
    """The current session's stats, None outside a session."""
    return None if _SESSION is None else _SESSION.stats


def session_cluster() -> SparkCluster | None:
    """The session's cluster (idle between runs), None outside a session or before its first run."""
    return None if _SESSION is None else _SESSION.cluster


@contextlib.contextmanager
def cluster_for_run(
    master: str,
    *,
    logs_dir: Path | None,
    app_name: str,
    remote: RemoteExecutors | None = None,
    **spark_kwargs: Any,
) -> Iterator[tuple[SparkCluster, bool]]:
    """The cluster for one run, and whether it was reused. Inside a session, a local-cluster master
    with no other arguments, or a run whose executors are ``remote``, gets the session's cluster
    (started now if there is none, or if the one there has another master or other arguments); the
    run hands it back reset. Anywhere else: a cluster for this run alone, stopped when the run ends."""
    session = _SESSION
    local = cluster_mod.parse_local_cluster(master) is not None and not spark_kwargs
    if session is None or not (local or remote is not None):
        c = SparkCluster(master, app_name=app_name, logs_dir=logs_dir, **spark_kwargs).start()
        try:
            yield c, False
        finally:
            c.stop()
        return
    refused = os.environ.get(NO_SPARK)
    if refused:  # also a cluster already up: a test not marked spark may not use Spark at all
        raise SparkRefused(f"Spark may not run here ({NO_SPARK} is set): {refused}")
    shape = f"{master} {sorted(spark_kwargs.items())!r}"
    if session.cluster is not None and session.cluster.stopped:
        session.discard(f"{session.cluster.master}: stopped while idle (another application started)")
    if session.cluster is not None and session.shape != shape:
        session.discard(f"{session.cluster.master} -> {master}: another cluster shape")
    reused = session.cluster is not None
    if session.cluster is None:
        session.cluster = SparkCluster(
            master, app_name="statechaos-shared", logs_dir=session.logs, **spark_kwargs
        ).start()
        session.shape = shape
        session.stats.starts += 1
        session.stats.start_s += session.cluster.startup_s or 0.0
    session.remote = remote
    cluster = session.cluster
    cluster_mod.set_idle_shared(None)  # in use: nothing may stop it under the run
    cluster.attach_logs(logs_dir)
    session.stats.runs += 1
    try:
        yield cluster, reused
    except BaseException as e:
        if not isinstance(e, Exception):  # Ctrl-C, SystemExit: stop everything now
            session.discard(f"run interrupted ({type(e).__name__})")
            raise
        hand_back(cluster)
        raise
    hand_back(cluster)


def discard_master(master: str, why: str) -> None:
    """Stop the session's cluster if it runs on ``master`` (whose stack is about to go away)."""
    session = _SESSION
    if session is not None and session.cluster is not None and session.cluster.master == master:
        session.discard(why)


def hand_back(cluster: SparkCluster) -> None:
    """A run is done with the session's ``cluster``: reset it for the next run, or stop it (the next
    run starts a new one) when it cannot be reset, recording why in the session's stats."""
    session = _SESSION
    if session is None or session.cluster is not cluster:
        cluster.stop()
        return
    cluster.keep_executor_logs()
    t0 = time.monotonic()
    try:
        remote = session.remote
        problem = reset(cluster, remote.stall_s if remote else RESET_STALL_S, remote=remote)
    except Exception as e:  # the driver is gone, py4j broke: not reusable
        problem = f"reset failed: {type(e).__name__}: {e}"
    session.stats.reset_s += time.monotonic() - t0
    cluster.attach_logs(session.logs)
    if problem is not None:
        session.discard(problem)
    else:
        cluster_mod.set_idle_shared(cluster)


def _running_tasks(cluster: SparkCluster) -> int:
    """Tasks running on the cluster's executors now (the driver's scheduler's count)."""
    infos = cluster.sc._jsc.sc().statusTracker().getExecutorInfos()
    return sum(int(i.numRunningTasks()) for i in infos)


def reset(
    cluster: SparkCluster, stall_s: float = RESET_STALL_S, remote: RemoteExecutors | None = None
) -> str | None:
    """Make ``cluster`` look freshly started to the next run (see the module's docstring); None when
    it does, else why it cannot be reused. Waits follow progress: a wait fails only when nothing it
    waits for changed for ``stall_s``."""
    if cluster.sc is None or cluster.sc._jsc.sc().isStopped():
        return "the SparkContext is stopped"
    cluster.sc.cancelAllJobs()
    if remote is not None:
        remote.repair()
    tracker = cluster.sc.statusTracker()
    workers = (
        remote.executors if remote is not None else cluster.local_cluster[0] if cluster.local_cluster else 0
    )
    watch = ProgressWatch(stall_s, clock=time.monotonic)
    while True:
        jobs, stages = len(tracker.getActiveJobsIds()), len(tracker.getActiveStageIds())
        tasks = _running_tasks(cluster)
        registered = set(cluster.registered_executors())
        if remote is None:
            pids = cluster.executor_pids()
            stopped = [e for e, pid in pids.items() if _is_stopped(pid)]
            if stopped:
                return f"executor(s) {sorted(stopped)} stopped (SIGSTOP) after the run"
            back = registered == set(pids) and len(pids) == workers
        else:  # executors elsewhere: as many registered as there are workers (one each)
            pids = {}
            back = len(registered) == workers
        if not (jobs or stages or tasks) and back:
            break
        watch.observe(jobs=jobs, stages=stages, tasks=tasks, executors=len(pids), registered=len(registered))
        stalled = watch.stalled()
        if stalled is not None:
            return (
                f"not idle after the run: {jobs} job(s), {stages} stage(s), {tasks} task(s) running, "
                f"executors {sorted(pids or registered)} of {workers}, registered {sorted(registered)}: {stalled}"
            )
        time.sleep(0.1)
    if remote is not None:
        return remote.kill_python_workers()
    workers_left = [p for ps in cluster.python_worker_pids().values() for p in ps]
    procs = []
    for pid in workers_left:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            p.kill()
            procs.append(p)
    _, alive = psutil.wait_procs(procs, timeout=10)
    if alive:
        return f"Python worker(s) {[p.pid for p in alive]} did not exit on SIGKILL"
    return None


def _is_stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False
