"""A driver that dies can be replaced: the driver of a local-cluster run is SIGKILLed mid-run (after a
fault it injected); its Spark processes go with it; ``statechaos resume`` starts a new driver that
restores the job from the newest completed checkpoint in the run's storage, does not inject the fault
again, finishes the job, and every oracle holds over the history of both drivers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import allure
import psutil
import pytest
import yaml

from harness.history import read_history
from harness.spark.cluster import alive_pids
from suites.waits import run_while_progressing, tree_size, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, allure.epic("spark"), allure.feature("driver replacement")]

SCENARIO = {
    "name": "driver-replacement",
    "cluster": "local",
    "job": "keyed_count",
    "parallelism": {"source": 2, "count": 2},
    "records": 1_500_000,
    "keys": 1000,
    "checkpoint": {"interval_ms": 100, "retained": 2, "timeout_ms": 5000, "tolerable_failures": 5},
    "faults": [{"at": "checkpoint:1", "kind": "kill_executor", "target": "executor:0"}],
    "checks": ["exactly_once", "sequence", "restored_state", "checkpoint_integrity", "liveness"],
    "seed": 11,
}


def _statechaos(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from chaos.report.cli import main; sys.exit(main())", *args]


def _completed(history: Path) -> int:
    try:
        return sum(1 for e in read_history(history) if e["type"] == "checkpoint_completed")
    except ValueError:  # a line being written
        return 0


def test_a_new_driver_finishes_the_run_of_one_that_was_killed(tmp_path, java):
    scenario = tmp_path / "driver-replacement.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    runs = tmp_path / "runs"
    driver = subprocess.Popen(
        _statechaos("run", str(scenario), "--runs-dir", str(runs)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def checkpointed() -> Path | bool:
            found = list(runs.glob("*/history.jsonl"))
            if found and _completed(found[0]) >= 3:
                return found[0]
            return driver.poll() is not None  # it ended first: the assertion below says so

        # waits end on lack of progress (the run directory standing still), not on the clock
        history = wait_until(checkpointed, lambda: tree_size(runs), "the first driver's third checkpoint")
        assert isinstance(history, Path), "the first driver ended before it completed 3 checkpoints"
        tree = [driver.pid] + [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(60)  # a hang's bound after SIGKILL
        # the driver's JVM exits when its Python parent dies, and the executors with it: fails only when
        # none of them exited for 60 s
        wait_until(
            lambda: not alive_pids(tree[1:]), lambda: len(alive_pids(tree[1:])), "the killed driver's processes to exit", 60
        )
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    run_dir = history.parent
    before = [e for e in read_history(history)]
    assert not any(e["type"] == "run_end" for e in before)

    report = tmp_path / "resume.json"
    rc = run_while_progressing(_statechaos("resume", str(run_dir), "--json", str(report)), run_dir, "the resumed run")
    data = json.loads(report.read_text())
    outcome = data["scenarios"][0]
    assert outcome.get("error") is None, outcome.get("error")
    failed = [(v["oracle"], v["summary"], v["details"][:3]) for v in outcome["verdicts"] if not v["passed"]]
    assert rc.returncode == 0 and not failed, (failed, rc.stdout[-2000:], rc.stderr[-2000:])

    events = list(read_history(history))
    replaced = [e for e in events if e["type"] == "driver_replaced"]
    assert len(replaced) == 1 and replaced[0]["checkpoint_id"] >= 3
    # the new driver restored from storage, did not inject the first driver's fault again, and finished
    after = events[len(before) :]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert not any(e["type"] == "fault_start" for e in after)
    restores = [e for e in after if e["type"] == "restore"]
    assert restores and {e["checkpoint_id"] for e in restores} == {replaced[0]["checkpoint_id"]}
    assert min(e["attempt"] for e in restores) > max(e.get("attempt", 0) for e in before if "attempt" in e)
    assert events[-1]["type"] == "run_end" and events[-1]["records_committed"] == SCENARIO["records"]
