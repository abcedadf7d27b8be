"""The reference keyed job on local-cluster, parallelism 2 sources / 3 keyed, with (a) no faults,
(b) an executor SIGKILL mid-run, (c) a SIGKILL during barrier alignment, (d) an executor SIGSTOP
past the checkpoint timeout, then SIGCONT, (e) rescale 3 -> 5 -> 2: every oracle holds in each, and
no process of a run outlives it (but the session's shared cluster, idle and reset)."""

from __future__ import annotations

import json

import allure
import psutil
import pytest

from harness.spark import shared_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow, allure.epic("spark"), allure.feature("spark executor")]

BASE = {
    "cluster": "local",
    "job": "keyed_count",
    "parallelism": {"source": 2, "count": 3},
    "records": 200_000,
    "keys": 1000,
    "checkpoint": {"interval_ms": 100, "retained": 2, "timeout_ms": 3000, "tolerable_failures": 5},
    "checks": ["exactly_once", "sequence", "checkpoint_integrity", "liveness"],
}
# the cases that restore state (a lost executor, a rescale) judge it too; the others have nothing to
# restore, and a check with nothing to judge is unknown, not a pass
RESTORING = {"executor-sigkill", "sigkill-during-alignment", "rescale-3-5-2"}

CASES = {
    "no-faults": {},
    "executor-sigkill": {"faults": [{"at": "checkpoint:2", "kind": "kill_executor", "target": "executor:0"}]},
    "sigkill-during-alignment": {
        "faults": [
            {
                "at": "checkpoint:2",
                "kind": "delay_barrier",
                "channel": "source[0]->count[1]",
                "delay_ms": 1500,
            },
            {"at": "checkpoint:2", "kind": "kill_executor", "target": "executor:1"},
        ]
    },
    "sigstop-past-timeout": {
        "faults": [
            {"at": "checkpoint:2", "kind": "pause_executor", "target": "executor:0", "duration_ms": 5000}
        ]
    },
    "rescale-3-5-2": {
        "rescale": [
            {"at": "checkpoint:2", "parallelism": {"source": 2, "count": 5}},
            {"at": "checkpoint:4", "parallelism": {"source": 2, "count": 2}, "savepoint": False},
        ]
    },
}


# first: its local-cluster[2,2] is the shape the tests before it in this folder leave in the
# session's shared cluster, so it reuses that one (the cases below need [2,3], then [2,4])
def test_a_relative_runs_dir_works_although_executors_have_their_own_cwd(tmp_path, monkeypatch):
    from chaos.report.cli import main

    monkeypatch.chdir(tmp_path)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: relative\ncluster: local\nparallelism: {source: 1, count: 2}\nrecords: 20000\nkeys: 100\n"
        "checkpoint: {interval_ms: 100ms}\nchecks: [exactly_once, checkpoint_integrity, liveness]\n"
    )
    assert main(["run", "s.yaml", "--runs-dir", "runs", "--json", "out.json"]) == 0
    assert list((tmp_path / "runs").glob("*/output/committed/*.jsonl"))


# second: [2,2] as well (3 subtasks, 4 after the rescale)
def test_a_stage_relaunch_during_stop_with_savepoint_restarts_then_retries_the_rescale(run_scenario):
    """A Python worker killed while a rescale's savepoint is pending (both fire when checkpoint 2
    completes, the fault first: the savepoint cannot complete) makes Spark relaunch the stage. As in
    Flink the stop-with-savepoint fails: the relaunch restores checkpoint 2 at the old parallelism
    and runs, the savepoint is taken again and the rescale restores from it. (The relaunch used to be
    cancelled while it started, for a rescale from checkpoint 2: its tasks registered, never restored,
    and the run stalled.)"""
    outcome = run_scenario(
        {
            "name": "spark-relaunch-during-savepoint",
            "cluster": "local",
            "parallelism": {"source": 1, "count": 2},
            "records": 20_000,
            "keys": 100,
            "checkpoint": {"interval_ms": 100, "retained": 2},
            "faults": [{"at": "checkpoint:2", "kind": "kill_python_worker", "target": "executor:1"}],
            "rescale": [{"at": "checkpoint:2", "parallelism": {"count": 3}}],
            "checks": BASE["checks"] + ["restored_state", "rescale"],
            "seed": 5,
        }
    )
    assert outcome.error is None, outcome.error
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:5]) for v in outcome.failed_checks]
    history = [json.loads(line) for line in open(f"{outcome.run_dir}/history.jsonl")]
    savepoints = [
        e["checkpoint_id"]
        for e in history
        if e.get("kind") == "savepoint" and e["type"] == "checkpoint_triggered"
    ]
    completed = {e["checkpoint_id"] for e in history if e["type"] == "checkpoint_completed"}
    assert len(savepoints) == 2 and savepoints[0] not in completed and savepoints[1] in completed, savepoints
    (restart,) = [e for e in history if e["type"] == "job_restart"]
    restored = {
        (e["operator"], e["parallelism"])
        for e in history
        if e["type"] == "restore" and e["attempt"] == restart["attempt"]
    }
    assert restored == {("source", 1), ("count", 2)} and restart["checkpoint_id"] == 2
    (rescale,) = [e for e in history if e["type"] == "rescale"]
    assert rescale["checkpoint_id"] == savepoints[1] and rescale["to"] == {"source": 1, "count": 3}


@pytest.mark.parametrize("case", list(CASES))
def test_reference_job_on_local_cluster(run_scenario, case):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    checks = BASE["checks"] + (["restored_state", "rescale"] if case in RESTORING else [])
    outcome = run_scenario({**BASE, **CASES[case], "checks": checks, "name": f"spark-{case}", "seed": 3})
    assert outcome.error is None, outcome.error
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:5]) for v in outcome.failed_checks]
    left = {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()} - before
    shared = shared_cluster.session_cluster()  # the session's cluster idles for the next run, reset
    if shared is not None:
        assert not any(shared.python_worker_pids().values()), "Python workers left for the next run"
        owned = shared.owned_pids()
        # the cluster's own, and the zombie spark-submit's launcher leaves under the driver JVM
        # (reaped when that JVM exits)
        left = {pid for pid in left if pid not in owned and _parent(pid) not in owned}
    assert not left, f"processes left behind: {left}"


def _parent(pid):
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None
