"""A user's own chaos tests, written only against the statechaos pytest plugin's fixtures (installed
with the package; nothing here imports the project's modules).

    pytest examples/test_user_chaos.py                   # the local-cluster test needs Java 17/21
    pytest examples/test_user_chaos.py --alluredir=allure-results && allure serve allure-results

- ``test_keyed_count_survives_an_executor_kill``: a keyed count on an embedded Spark local-cluster
  (100k records); one executor JVM is SIGKILLed after the first checkpoint; every oracle must hold.
- ``test_every_scenario_in_the_folder``: one test case per scenario file in ``scenarios/`` next to
  this file (``--scenario PATH`` adds more), each checked by every oracle it names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

EXECUTOR_KILL = {
    "name": "user-executor-kill",
    "job": "keyed_count",
    "parallelism": {"source": 1, "count": 2},
    "records": 100_000,
    "keys": 200,
    "checkpoint": {"interval_ms": 100, "retained": 2},
    # the first completed checkpoint: on a loaded machine later ones may not complete before the input ends
    "faults": [{"at": "checkpoint:1", "kind": "kill_executor", "target": "executor:0"}],
    # liveness (progress within 10 s of the kill) is left out: it measures the machine as much as the
    # job, and shared CI machines are slow; add it on a machine of your own
    "checks": ["exactly_once", "sequence", "restored_state", "checkpoint_integrity"],
    "seed": 1,
}


@pytest.mark.cluster("local")
def test_keyed_count_survives_an_executor_kill(chaos_cluster, run_scenario, assert_oracles, oracles):
    outcome = run_scenario(EXECUTOR_KILL, cluster=chaos_cluster)
    assert_oracles(outcome, "exactly_once", "restored_state")  # the two this test is about, first
    assert_oracles(outcome)  # then every check the scenario named, and the fault schedule
    verdicts = {v.oracle: v for v in outcome.verdicts}
    assert set(EXECUTOR_KILL["checks"]) <= set(verdicts) <= set(oracles.ORACLES) | {"fault_schedule"}
    assert verdicts["exactly_once"].data["committed"] == EXECUTOR_KILL["records"]
    assert verdicts["restored_state"].data["restores"] >= 1, "the kill must have forced a restore"
    assert outcome.stats["attempts"] >= 2, "Spark must have relaunched the stage after the kill"


@pytest.mark.scenarios(HERE / "scenarios")
def test_every_scenario_in_the_folder(scenario, run_scenario, assert_oracles):
    outcome = run_scenario(scenario)
    assert_oracles(outcome)
    assert {v.oracle for v in outcome.verdicts} >= set(scenario.checks)
