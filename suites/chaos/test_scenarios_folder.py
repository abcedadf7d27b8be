"""The ready-made scenarios of ``scenarios/`` pass through the command line, as a user runs them: all
sim scenarios in one ``statechaos run``, and all local-cluster ones (executor kill, Python worker
kill, executor pause, network toxics on data channels and coordinator links) in another, every check
holding. A scenario another test runs end to end from the same file, or as it is, is left to that
test; the docker scenarios run in the docker suite."""

from __future__ import annotations

import json
from pathlib import Path

import allure
import pytest

from chaos.report.cli import main
from chaos.scenario import load_scenarios

pytestmark = [allure.epic("chaos"), allure.feature("scenarios")]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
# scenarios a test of their own runs end to end from the same file, with more checks than this one,
# or whose job, fault and checks another Spark test runs as they are (a Spark run each: running them
# twice would only cost CI time; the files are still loaded and validated by test_scenario_validation)
RUN_BY_THEIR_OWN_TEST = {
    "network-inband-local": "suites/chaos/test_network_inband.py",
    # keyed_count, executor:0 SIGKILLed at a checkpoint, restored state judged
    "smoke-local": "suites/spark/test_spark_executor.py::test_reference_job_on_local_cluster[executor-sigkill]",
    # keyed_count, an executor SIGSTOPped 5 s past a 3 s checkpoint timeout, then resumed
    "pause-executor-local": "suites/spark/test_spark_executor.py::test_reference_job_on_local_cluster[sigstop-past-timeout]",
}


# the allround scenarios (22 crashes and 3 rescales each) take most of the sim scenarios' time: they
# run in the full suite, and the fast tier keeps the allround job through test_timers_event_time
HEAVY = ("allround-",)


@pytest.mark.parametrize(
    "kind,heavy,at_least",
    [
        pytest.param("sim", False, 6, id="sim"),
        pytest.param("sim", True, 2, marks=pytest.mark.slow, id="sim-allround"),
        pytest.param("local", None, 3, marks=[pytest.mark.spark, pytest.mark.slow], id="local"),
    ],
)
def test_every_scenario_of_a_cluster_kind_passes_from_the_command_line(tmp_path, kind, heavy, at_least):
    files = sorted(
        str(path)
        for path, sc in load_scenarios([SCENARIOS])
        if sc.cluster_kind == kind
        and path.stem not in RUN_BY_THEIR_OWN_TEST
        and (heavy is None or path.stem.startswith(HEAVY) == heavy)
    )
    assert len(files) >= at_least, files
    report = tmp_path / "out.json"
    rc = main(["run", *files, "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    data = json.loads(report.read_text())
    failed = {
        s["name"]: s.get("error") or [v["oracle"] for v in s["verdicts"] if not v["passed"]]
        for s in data["scenarios"]
        if not s["passed"]
    }
    assert rc == 0 and not failed, failed
    assert len(data["scenarios"]) == len(files)
    if heavy:  # the allround scenarios' faults strike live state, not only a job at rest
        for s in data["scenarios"]:
            hit = {p for ps in s["stats"]["fault_phases"].values() for p in ps}
            assert {"alignment", "snapshot", "restore"} <= hit, (s["name"], hit)
