"""Ctrl-C stops a run cleanly: SIGINT to a ``statechaos run`` on local-cluster, mid-run and with a
network fault's proxy server running, makes it exit 130, leaves no process behind (driver JVM,
executors, Python workers, the proxy server) and ends the history as interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import allure
import psutil
import pytest
import yaml

from harness.history import read_history
from harness.spark.cluster import alive_pids
from suites.waits import tree_size, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, allure.epic("chaos"), allure.feature("cleanup")]

SCENARIO = {
    "name": "interrupted",
    "cluster": "local",
    "job": "keyed_count",
    "parallelism": {"source": 2, "count": 2},
    "records": 2_000_000,
    "keys": 1000,
    "checkpoint": {"interval_ms": 200, "retained": 2, "timeout_ms": 5000},
    "faults": [
        {
            "at": "checkpoint:50",
            "kind": "network",
            "toxic": "latency",
            "channel": "source[0]->count[0]",
            "attributes": {"latency": 100},
            "duration_ms": 1000,
        },
    ],
    "checks": ["exactly_once"],
    "seed": 5,
}


def test_ctrl_c_mid_run_exits_130_and_leaves_nothing_running(tmp_path, java):
    scenario = tmp_path / "interrupted.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-c", "import sys; from chaos.report.cli import main; sys.exit(main())"]
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr_file:
        proc = subprocess.Popen(
            [*cmd, "run", str(scenario), "--runs-dir", str(runs)],
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
            text=True,
            start_new_session=True,
        )

    def checkpointed() -> bool:
        for h in runs.glob("*/history.jsonl"):
            try:
                if any(e["type"] == "checkpoint_completed" for e in read_history(h)):
                    return True
            except ValueError:
                pass
        return False

    try:
        # waits end when nothing moves (the run's files, its processes), not on the clock
        wait_until(lambda: checkpointed() or proc.poll() is not None, lambda: tree_size(runs), "a checkpoint")
        assert checkpointed(), "the run never completed a checkpoint"
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(tree) >= 3  # the driver JVM, executors, the proxy server
        os.kill(proc.pid, signal.SIGINT)  # only the driver: the cleanup must be its own doing
        wait_until(
            lambda: proc.poll() is not None,
            lambda: (tree_size(runs), len(alive_pids(tree)), err.stat().st_size),
            "the interrupted run's exit",
            90,
        )
        stderr = err.read_text()
        assert proc.returncode == 130, stderr[-2000:]
        assert "interrupted" in stderr
        # processes that outlive the driver fail the test only when none of them exits for 20 s
        wait_until(lambda: not alive_pids(tree), lambda: len(alive_pids(tree)), "the interrupted run's processes to exit", 20)
        (history,) = runs.glob("*/history.jsonl")
        end = [e for e in read_history(history) if e["type"] == "run_end"]
        assert [e["status"] for e in end] == ["interrupted"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
