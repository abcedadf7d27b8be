"""Spark smoke tests on local-cluster: barrier tasks talk over the transport, and a barrier
ShuffleMapStage survives an executor SIGKILL (Spark relaunches the whole stage)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.progress import ProgressWatch
from harness.spark.cluster import (
    SparkCluster,
    SparkEnvironmentError,
    alive_pids,
    check_java,
    parse_master,
    sweep_stale_work_dirs,
)
from harness.spark.transport import CoordinatorServer, RunSecret
from suites.waits import spark_tasks, wait_until

N = 2  # tasks of the barrier stage = task slots of local-cluster[2,1,1024]
SECRET = RunSecret.generate("cluster-test")  # shipped to the tasks inside the stage closure


def test_parse_master():
    assert parse_master("local", 2) == "local-cluster[2,1,1024]"
    assert parse_master("local", 5) == "local-cluster[2,3,1024]"
    assert parse_master("local-cluster[3, 2, 512]", 6) == "local-cluster[3,2,512]"
    assert parse_master("spark://h:7077", 8) == "spark://h:7077"
    with pytest.raises(ValueError, match=r"2 workers x 1 cores = 2 task slots, but the job needs 3"):
        parse_master("local-cluster[2,1,1024]", 3)
    with pytest.raises(ValueError, match="unknown cluster"):
        parse_master("yarn", 1)


@pytest.fixture(scope="module")
def cluster():
    try:
        check_java()
    except SparkEnvironmentError as e:
        pytest.skip(str(e))
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import this file
    c = SparkCluster(parse_master("local", N), stage_max_consecutive_attempts=4)
    c.start()
    yield c
    c.stop()
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _exchange_task(it):
    """Barrier task: open a gate, share endpoints, send to every task (itself included), receive."""
    import json

    from pyspark import BarrierTaskContext

    from harness.spark.transport import InputGate, OutputChannel

    ctx = BarrierTaskContext.get()
    me = ctx.partitionId()
    with InputGate(N, SECRET, f"x[{me}]", 0) as gate:
        infos = ctx.allGather(json.dumps({"task": me, "endpoint": list(gate.endpoint)}))
        peers = sorted((json.loads(s) for s in infos), key=lambda d: d["task"])
        outs = [
            OutputChannel(tuple(p["endpoint"]), me, SECRET, f"x[{p['task']}]", 0, batch_records=2) for p in peers
        ]
        for dst, out in enumerate(outs):
            for i in range(5):
                out.send_record([me, dst, i])
            out.send_control(("barrier", 1))
            out.close()
        gate.accept(stall_s=30)
        got, done = [], set()
        watch = ProgressWatch(30)  # ends only when no frame came for 30 s, not after a fixed time
        while len(done) < N and watch.stalled() is None:
            watch.observe(got=len(got), done=len(done))
            for ch, msg in gate.poll(set(), timeout_s=0.5, max_messages=100):
                if msg[0] == "records":
                    got += [tuple(r) for r in msg[1]]
                elif msg[0] == "barrier":
                    got.append(("barrier", ch))
                else:
                    done.add(ch)
    yield (me, got, ctx.taskAttemptId())


@pytest.mark.spark
def test_barrier_tasks_exchange_frames(cluster):
    rdd = cluster.sc.parallelize(range(N), N).barrier().mapPartitions(_exchange_task)
    res = dict(rdd.map(lambda r: (r[0], r)).groupByKey().mapValues(list).collect())
    assert sorted(res) == list(range(N))
    for me, [(_, got, _attempt)] in res.items():
        for src in range(N):
            from_src = [g for g in got if g[0] == src or g == ("barrier", src)]
            assert from_src == [(src, me, i) for i in range(5)] + [("barrier", src)]


def _blocking_task(endpoint):
    def run(it):
        from pyspark import BarrierTaskContext

        from harness.spark.transport import CoordinatorClient, TransportClosed

        ctx = BarrierTaskContext.get()
        # Python's TaskContext has no stage attempt number; the task attempt id (TID) is unique in the
        # app and grows, so a relaunched task always has a higher one: it is the coordinator attempt.
        me, tid = ctx.partitionId(), ctx.taskAttemptId()
        with CoordinatorClient(tuple(endpoint), f"block[{me}]", tid, SECRET) as client:
            client.send(("started", me, ctx.stageId(), tid))
            # no clock: it waits for the test's go, or ends when the test's server goes away (the
            # test's own waits end on lack of progress; the cluster's stop kills a task left waiting)
            while True:
                try:
                    if any(m[0] == "go" for m in client.poll(timeout_s=0.2)):
                        break
                except TransportClosed:
                    raise RuntimeError("driver went away") from None
        ctx.barrier()
        yield (me, tid)

    return run


@pytest.mark.spark
def test_executor_sigkill_relaunches_barrier_stage_and_stop_reaps_everything(cluster):
    executors = cluster.wait_for_executors(N, timeout_s=60)
    with CoordinatorServer(SECRET) as server:
        rdd = cluster.sc.parallelize(range(N), N).barrier().mapPartitions(_blocking_task(server.endpoint))
        result: queue.Queue = queue.Queue()

        def job():
            try:
                result.put(("ok", rdd.map(lambda r: r).reduceByKey(max).collect()))
            except Exception as e:
                result.put(("error", e))

        t = threading.Thread(target=job, daemon=True)
        t.start()

        def wait_started(tid_min: int) -> dict[int, tuple[int, int]]:
            """Until N tasks (attempt ids from ``tid_min``) started; fails only when neither they nor
            the executors (a JVM relaunched after the kill) nor Spark's tasks moved for 120 s."""
            started: dict[int, tuple[int, int]] = {}
            watch = ProgressWatch(120)
            while len(started) < N:
                watch.observe(started=len(started), executors=len(cluster.executor_pids()), spark=spark_tasks(cluster.sc))
                assert watch.stalled() is None, f"tasks started: {started}: {watch.stalled()}"
                try:
                    tid, msg = server.get(timeout_s=0.5)
                except queue.Empty:
                    assert result.empty(), result.get()
                    continue
                if msg[0] == "started" and msg[3] >= tid_min:
                    started[msg[1]] = (msg[2], msg[3])
            return started

        first = wait_started(0)
        stage_id = first[0][0]
        assert cluster.stage_attempt(stage_id) == 0
        pids_before = cluster.owned_pids()
        workers = cluster.python_worker_pids()
        assert set(workers) == set(executors) and all(workers.values()), workers
        victim_id, victim = sorted(executors.items())[0]
        t_kill = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        relaunched = wait_started(max(tid for _, tid in first.values()) + 1)
        t_relaunch = time.monotonic() - t_kill
        assert {sid for sid, _ in relaunched.values()} == {stage_id}
        assert cluster.stage_attempt(stage_id) >= 1  # the same barrier stage, a new attempt
        assert victim_id not in cluster.executor_pids()
        assert server.broadcast(("go",)) == N
        status, value = wait_until(
            lambda: None if result.empty() else result.get(), lambda: spark_tasks(cluster.sc), "the job's end"
        )
        assert status == "ok", value
        assert sorted(value) == [(i, relaunched[i][1]) for i in range(N)]
        print(f"stage relaunched {t_relaunch:.1f}s after SIGKILL of executor {victim_id}")
    owned = cluster.owned_pids() | pids_before
    assert len(cluster.executor_pids()) == N  # the Worker replaced the killed executor
    cluster.stop()
    cluster.stop()  # idempotent
    assert alive_pids(owned | cluster.seen_pids()) == set()


def test_start_sweeps_only_the_work_folders_of_dead_runs(tmp_path: Path) -> None:
    """A SIGKILLed run leaves ``work/app-*``; the next start removes it, but never a folder whose
    app still has a process, one that changed recently, or anything not named like an app."""
    work = tmp_path / "work"
    old = time.time() - 3600

    def app(name: str, age: float | None = old) -> Path:
        d = work / name / "0"
        d.mkdir(parents=True)
        (d / "stderr").write_text("executor log")
        if age is not None:
            for p in (d / "stderr", d, d.parent):
                os.utime(p, (age, age))
        return d.parent

    dead = app("app-20261122000000-0000")
    fresh = app("app-20261122000000-0001", age=None)
    live = app("app-20261122000000-0002")
    other = app("notes")
    executor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--app-id", live.name]
    )  # stands in for an executor of a run still going
    try:
        removed = sweep_stale_work_dirs(tmp_path)
    finally:
        executor.kill()
        executor.wait()
    assert removed == [dead]
    assert not dead.exists() and fresh.exists() and live.exists() and other.exists()
    assert sweep_stale_work_dirs(tmp_path / "nowhere") == []


def test_local_cluster_apps_never_start_in_the_same_second(tmp_path: Path, monkeypatch) -> None:
    """A local cluster's master names its app ``app-<second>-0000``: two runs registering in one
    second on one Spark install shared ``work/<app-id>/`` (seen: one run's cleanup removed the
    folder the other's executors ran in, and every task failed to import). Starts are taken in
    turn, across processes, and each in a second of its own."""
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    seconds: list[int] = []
    lock = threading.Lock()

    def start() -> None:
        with SparkCluster("local-cluster[1,1,512]")._app_start_turn():
            with lock:
                seconds.append(int(time.time()))  # when this app would register
            time.sleep(0.05)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seconds)) == 3, seconds
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "other"))
    with SparkCluster("local[1]")._app_start_turn():  # other masters number apps themselves
        pass
    assert not (tmp_path / "other").exists()
