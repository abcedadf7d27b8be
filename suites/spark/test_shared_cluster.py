"""Local-cluster scenarios of one pytest session share one Spark application (the plugin's
``statechaos_spark_session``): a run that SIGKILLs an executor hands the cluster back reset (every
worker's executor back, no job, task or Python worker left), the next scenario reuses the same app
and still passes its oracles, and a cluster that cannot be reset is discarded."""

from __future__ import annotations

import os
import signal

import allure
import psutil
import pytest

from harness.spark import shared_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow, allure.epic("spark"), allure.feature("shared local cluster")]

BASE = {
    "cluster": "local-cluster[2,2,1024]",
    "job": "keyed_count",
    "parallelism": {"source": 1, "count": 2},
    "records": 20_000,
    "keys": 200,
    "checkpoint": {"interval_ms": 100, "retained": 2},
    "seed": 5,
}
KILL = {
    "name": "shared-kill-executor",
    "faults": [{"at": "checkpoint:2", "kind": "kill_executor", "target": "executor:0"}],
    "checks": ["exactly_once", "sequence", "checkpoint_integrity", "restored_state", "liveness"],
}
CLEAN = {"name": "shared-no-faults", "checks": ["exactly_once", "sequence", "checkpoint_integrity", "liveness"]}


def _idle_state(cluster):
    pids = cluster.executor_pids()
    return pids, set(cluster.registered_executors()), cluster.python_worker_pids()


def test_two_scenarios_share_one_cluster_and_a_killed_executor_is_back_for_the_next(
    run_scenario, assert_oracles, statechaos_spark_session
):
    if statechaos_spark_session is None:
        pytest.skip("--statechaos-fresh-spark: every run starts its own Spark")
    before = shared_cluster.session_cluster()
    same_shape = before is not None and before.master == BASE["cluster"]
    executors_before = set(before.executor_pids()) if same_shape else set()

    killed = run_scenario({**BASE, **KILL})
    assert_oracles(killed)

    cluster = shared_cluster.session_cluster()
    assert cluster is not None and cluster.app_id == killed.stats["spark_app_id"]
    pids, registered, workers = _idle_state(cluster)
    assert len(pids) == 2 and registered == set(pids), (pids, registered)  # the full executor count
    assert set(pids) - executors_before, f"no executor was replaced: {pids} (before: {executors_before})"
    assert not any(workers.values()), f"Python workers left after the run: {workers}"
    for pid in pids.values():
        assert psutil.Process(pid).status() != psutil.STATUS_STOPPED

    clean = run_scenario({**BASE, **CLEAN})
    assert_oracles(clean)
    assert clean.stats["spark_cluster_reused"] is True
    assert clean.stats["spark_startup_s"] == 0.0
    assert clean.stats["spark_app_id"] == killed.stats["spark_app_id"]  # the same app, the same JVM
    assert shared_cluster.session_cluster() is cluster


def test_a_cluster_that_cannot_be_reset_is_discarded(run_scenario, statechaos_spark_session):
    if statechaos_spark_session is None:
        pytest.skip("--statechaos-fresh-spark: every run starts its own Spark")
    cluster = shared_cluster.session_cluster()
    if cluster is None or cluster.master != BASE["cluster"]:  # run alone: bring one up first
        run_scenario({**BASE, **CLEAN, "name": "shared-before-discard"})
        cluster = shared_cluster.session_cluster()
    assert cluster is not None
    app_id = cluster.app_id
    eid, pid = sorted(cluster.executor_pids().items())[0]
    os.kill(pid, signal.SIGSTOP)  # an executor left paused: not a cluster a run may start on
    try:
        problem = shared_cluster.reset(cluster, stall_s=5)
        assert problem is not None and "stopped" in problem, problem
    finally:
        os.kill(pid, signal.SIGCONT)
    assert shared_cluster.reset(cluster, stall_s=30) is None  # running again: reusable

    os.kill(pid, signal.SIGSTOP)
    seen = cluster.seen_pids()
    shared_cluster.hand_back(cluster)  # what a run ending like this does: the cluster is stopped
    assert shared_cluster.session_cluster() is None
    assert any("stopped" in why for why in statechaos_spark_session.discarded)
    left = {p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
    assert not left, f"processes of the discarded cluster left: {left}"

    after = run_scenario({**BASE, **CLEAN, "name": "shared-after-discard"})
    assert after.error is None and after.passed
    assert after.stats["spark_cluster_reused"] is False
    assert after.stats["spark_app_id"] != app_id


def test_a_test_not_marked_spark_cannot_use_the_shared_cluster(statechaos_spark_session, monkeypatch, tmp_path):
    """STATECHAOS_NO_SPARK (set for every test not marked spark) refuses the session's cluster too,
    also when one is already up: nothing is started, nothing stopped."""
    if statechaos_spark_session is None:
        pytest.skip("--statechaos-fresh-spark: every run starts its own Spark")
    from harness.spark.cluster import NO_SPARK, SparkRefused

    up = shared_cluster.session_cluster()
    monkeypatch.setenv(NO_SPARK, "this test is not marked spark")
    with pytest.raises(SparkRefused, match="not marked spark"):
        with shared_cluster.cluster_for_run(BASE["cluster"], logs_dir=tmp_path, app_name="refused"):
            pass
    assert shared_cluster.session_cluster() is up
