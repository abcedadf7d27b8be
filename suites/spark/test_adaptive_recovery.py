"""Adaptive recovery on local-cluster with no spare task slot: an executor SIGKILL leaves 2 of the 3
slots the job (source 1, count 2) takes; the driver restarts it from the latest checkpoint at
count 1, then scales it back up to count 2 when the replacement executor registers. Every oracle
holds across both rescales and the output is exactly-once.

The resource stabilization timeout is 0: the job adapts on the first poll that sees the slot gone,
whatever the machine's speed (a replacement executor is a new JVM, never there at once), and the end
of input waits for the scale-up as for a planned trigger."""

from __future__ import annotations

import allure
import pytest

from chaos.errors import EXIT_CHECK_FAILED
from chaos.report.runner import _exit_code, story
from harness.history import read_history
from harness.run_store import RunStore

pytestmark = [pytest.mark.spark, pytest.mark.slow, allure.epic("spark"), allure.feature("adaptive recovery")]

SCENARIO = {
    "name": "spark-adaptive-recovery",
    "cluster": "local-cluster[3,1,1024]",
    "job": "keyed_count",
    "parallelism": {"source": 1, "count": 2},
    "records": 20_000,
    "keys": 200,
    "checkpoint": {"interval_ms": 200, "retained": 2, "tolerable_failures": 5},
    "adaptive_recovery": {"resource_stabilization_timeout_ms": 0},
    "faults": [{"at": "checkpoint:2", "kind": "kill_executor", "target": "executor:0"}],
    "checks": ["exactly_once", "sequence", "restored_state", "rescale", "checkpoint_integrity", "liveness"],
    "seed": 5,
}


def test_lost_executor_resumes_smaller_then_scales_back_up(run_scenario):
    outcome = run_scenario(SCENARIO)
    assert outcome.error is None, outcome.error
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:5]) for v in outcome.failed_checks]
    judged = next(v for v in outcome.verdicts if v["oracle"] == "adaptive_recovery")  # added: it acted
    assert judged["data"]["scale_downs"] >= 1 and judged["data"]["deployments_judged"] >= 1, judged
    events = list(read_history(RunStore(outcome.run_dir).history))
    adaptive = [e for e in events if e["type"] == "rescale" and e.get("reason") == "adaptive"]
    assert [(e["from"], e["to"], e["slots"]) for e in adaptive[:2]] == [
        ({"source": 1, "count": 2}, {"source": 1, "count": 1}, 2),
        ({"source": 1, "count": 1}, {"source": 1, "count": 2}, 3),
    ], adaptive
    restores = {(e["attempt"], e["operator"], e["parallelism"]) for e in events if e["type"] == "restore"}
    assert ("count", 1) in {(op, p) for _, op, p in restores}  # it ran at count 1 in between
    end = next(e for e in events if e["type"] == "run_end")
    assert (end["status"], end["records_committed"]) == ("finished", SCENARIO["records"])
    told = [line for line in story(outcome.run_dir) if " rescaled " in line]
    assert told[:2] and all(
        line.endswith(("(adaptive: 2 task slots)", "(adaptive: 3 task slots)")) for line in told[:2]
    ), told


def test_one_slot_left_runs_every_operator_in_one_shared_slot(run_scenario):
    """local-cluster[2,1]: the job (source 1, count 1) loses one of its 2 slots, so both subtasks run
    on threads of one barrier task (Flink's slot sharing) with the batched task loop, from the latest
    checkpoint; its parallelism is what was configured, so the input is not held for a scale-up."""
    scenario = {
        **SCENARIO,
        "name": "spark-adaptive-shared-slot",
        "cluster": "local-cluster[2,1,1024]",
        "parallelism": {"source": 1, "count": 1},
    }
    outcome = run_scenario(scenario)
    assert outcome.error is None, outcome.error
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:5]) for v in outcome.failed_checks]
    events = list(read_history(RunStore(outcome.run_dir).history))
    adaptive = [
        (e["to"], e["slots"]) for e in events if e["type"] == "rescale" and e.get("reason") == "adaptive"
    ]
    assert adaptive[0] == ({"source": 1, "count": 1}, 1), adaptive  # both subtasks in the one slot left
    assert all(slots == 2 for _, slots in adaptive[1:]), adaptive  # a scale-up, if in time: unshared
    shared = adaptive and next(e for e in events if e["type"] == "rescale" and e.get("reason") == "adaptive")
    restored_after = [e for e in events if e["type"] == "restore" and e["t"] >= shared["t"]]
    assert {e["operator"] for e in restored_after} == {"source", "count"}, restored_after
    end = next(e for e in events if e["type"] == "run_end")
    assert (end["status"], end["records_committed"]) == ("finished", scenario["records"])


def test_planted_adaptive_recovery_sharing_slots_at_the_boundary_is_caught(run_scenario, monkeypatch):
    """A planted bug: a scale-down picks the parallelism of one slot more than there is (slots + 1) and
    squeezes it onto the slots left, so two subtasks share a slot although each operator could have
    had one of its own. The output stays exactly-once, so only ``adaptive_recovery`` (added to the
    checks because adaptive recovery acted) catches it: exit 1, not an error."""
    import harness.spark.executor as executor
    from harness.driver.adaptive import Fit, fit

    def one_slot_too_many(configured: dict[str, int], slots: int) -> Fit:
        if slots >= sum(configured.values()):
            return fit(configured, slots)
        return Fit(fit(configured, slots + 1).parallelism, slots)

    monkeypatch.setattr(executor, "fit", one_slot_too_many)
    outcome = run_scenario(SCENARIO)
    assert outcome.error is None, outcome.error
    failed = {v["oracle"] for v in outcome.verdicts if v["status"] == "fails"}
    assert failed == {"adaptive_recovery"}, outcome.verdicts
    verdict = next(v for v in outcome.verdicts if v["oracle"] == "adaptive_recovery")
    assert any("share a slot" in d for d in verdict["details"]), verdict
    assert _exit_code([outcome]) == EXIT_CHECK_FAILED  # exit 1: caught, not an error
