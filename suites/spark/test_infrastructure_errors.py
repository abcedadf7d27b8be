"""When the driver's restart strategy gives up on Spark, the run is an infrastructure error (exit 2),
not a pile of oracle failures; the run directory keeps the driver JVM's log and every executor's
stdout and stderr; nothing of Spark's reaches the terminal, and the kill reads in statechaos's words."""

from __future__ import annotations

import json

import allure
import pytest
import yaml

from chaos.report.cli import main

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    allure.epic("spark"),
    allure.feature("infrastructure errors"),
]

SCENARIO = {
    "name": "gives-up",
    "cluster": "local",
    "parallelism": {"source": 2, "count": 2},
    "records": 300_000,
    "keys": 1000,
    "checkpoint": {"interval_ms": 100, "retained": 2},
    "max_restarts": 0,
    "faults": [{"at": "checkpoint:1", "kind": "kill_executor", "target": "executor:0"}],
    "checks": ["exactly_once", "sequence", "liveness"],
    "seed": 1,
}


def test_a_spark_run_the_restart_strategy_gave_up_on(tmp_path, capfd, java):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    report = tmp_path / "out.json"
    rc = main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    out = json.loads(report.read_text())["scenarios"][0]
    assert rc == 2 and out["result"] == "infrastructure", out
    assert "gave up after 0 restarts" in out["error"] and out["verdicts"] == []
    logs = tmp_path / "runs" / out["run_dir"].split("/")[-1] / "logs"
    assert "Lost executor" in (logs / "driver.log").read_text()
    streams = {p.relative_to(logs / "executors").as_posix() for p in (logs / "executors").glob("*/std*")}
    assert {"0/stderr", "1/stderr"} <= streams, streams
    printed = capfd.readouterr()
    terminal = printed.out + printed.err
    assert "TaskSchedulerImpl" not in terminal and "WARNING: Using incubator" not in terminal
    assert "fault #1 kill_executor (SIGKILL)" in terminal and "infrastructure error" in terminal
