"""Verdicts a person can trust: three-valued checks, infrastructure errors apart from failed checks,
faults that could not act never counted as fired, and triggers reached whatever the machine's speed."""

from __future__ import annotations

import json

import allure
import pytest

import harness.oracles as oracles
from chaos.report.cli import main
from suites.runtime.conftest import BASE

pytestmark = [allure.epic("chaos"), allure.feature("verdicts")]


def _scenario(tmp_path, **overrides):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, **overrides}))
    return path


def _run(tmp_path, **overrides):
    report = tmp_path / "out.json"
    rc = main(
        [
            "run",
            str(_scenario(tmp_path, **overrides)),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--json",
            str(report),
        ]
    )
    return rc, json.loads(report.read_text())["scenarios"][0]


def _verdict(outcome, oracle):
    return next(v for v in outcome["verdicts"] if v["oracle"] == oracle)


def test_an_oracle_that_crashes_is_unknown_and_the_run_does_not_pass(tmp_path, monkeypatch, capsys):
    def broken(art, spec):
        raise ZeroDivisionError("planted")

    monkeypatch.setitem(oracles.ORACLES, "sequence", oracles.Oracle("sequence", broken))
    rc, out = _run(tmp_path)
    seq = _verdict(out, "sequence")
    assert seq["status"] == "unknown" and "ZeroDivisionError: planted" in seq["summary"]
    assert _verdict(out, "exactly_once")["status"] == "holds"
    assert (rc, out["passed"], out["result"]) == (1, False, "unknown")
    printed = capsys.readouterr().out
    assert (
        "? sequence" in printed
        and "✓ exactly_once" in printed
        and out["run_dir"] in printed.replace("\n", "")
    )


def test_a_check_that_cannot_apply_is_unknown(tmp_path):
    """``validate`` refuses a check the job cannot support; an oracle asked anyway says unknown."""
    from chaos.execute import scenario_spec
    from chaos.scenario import load_scenario

    rc, out = _run(tmp_path, checks=["exactly_once"])
    assert rc == 0
    spec = scenario_spec(load_scenario(_scenario(tmp_path, checks=["exactly_once"])))
    (ttl,) = oracles.check_all(out["run_dir"], spec, ["ttl"])  # keyed_count has no TTL state
    assert ttl.status == "unknown" and "no TTL reads" in ttl.summary and not ttl.passed


def test_a_job_the_restart_strategy_gave_up_on_on_sim_is_a_failed_progress_check(tmp_path, capsys):
    """On sim no environment can be the cause: a run that cannot finish is a finding (exit 1) with its
    last failure and the fault before it, and no other check counts what never ran."""
    crashes = [{"at": f"checkpoint:{n}", "kind": "crash_task", "target": "count[0]"} for n in (1, 2, 3)]
    rc, out = _run(tmp_path, faults=crashes, max_restarts=1)
    assert rc == 1
    assert out["result"] == "failed" and out["error_kind"] is None
    assert [v["oracle"] for v in out["verdicts"]] == ["progress", "fault_schedule"]
    progress = _verdict(out, "progress")
    assert progress["status"] == "fails"
    assert "gave up after 1 restarts" in progress["details"][0]
    assert any(d.startswith("the fault before it:") and "crash_task" in d for d in progress["details"])
    printed = capsys.readouterr().out
    assert "progress" in printed and "lost" not in printed


def test_a_rescale_of_an_operator_the_job_lacks_is_bad_input(tmp_path, capsys):
    rc = main(
        ["validate", str(_scenario(tmp_path, rescale=[{"at": "checkpoint:2", "parallelism": {"counter": 3}}]))]
    )
    printed = capsys.readouterr()
    assert rc == 2
    assert "rescale[0].parallelism" in printed.err + printed.out and "counter" in printed.err + printed.out


def test_a_fault_whose_injection_fails_did_not_fire(tmp_path, monkeypatch):
    from chaos.injectors.base import InjectorError
    from chaos.injectors.runtime import CrashTask

    def refuse(self):
        raise InjectorError(f"planted: {self.target} cannot be crashed")

    monkeypatch.setattr(CrashTask, "start", refuse)
    rc, out = _run(tmp_path, faults=[{"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"}])
    fs = _verdict(out, "fault_schedule")
    assert fs["status"] == "fails" and rc == 1
    assert any("did not fire" in d and "planted: count[1]" in d for d in fs["details"]), fs["details"]


def test_a_trigger_later_than_the_input_still_fires(tmp_path):
    """3000 records end after a few checkpoints; the end of input is held until checkpoint 40."""
    faults = [{"at": "checkpoint:40", "kind": "crash_task", "target": "count[1]"}]
    rescale = [{"at": "checkpoint:45", "parallelism": {"source": 3, "count": 3}}]
    rc, out = _run(tmp_path, faults=faults, rescale=rescale)
    assert rc == 0, [
        (v["oracle"], v["summary"], v["details"][:3]) for v in out["verdicts"] if not v["passed"]
    ]
    events = [json.loads(x) for x in open(f"{out['run_dir']}/history.jsonl")]
    kinds = [e["type"] for e in events]
    assert "input_held" in kinds and "input_released" in kinds and "rescale" in kinds
    held = next(e for e in events if e["type"] == "input_held")
    assert held["waiting"] == ["#1 crash_task at checkpoint=40", "rescale at checkpoint=45"]
    fired = next(e for e in events if e["type"] == "fault_start")
    assert kinds.index("input_held") < kinds.index("fault_start") and "error" not in fired["details"]


@pytest.mark.parametrize(
    "fault",
    [
        {"at": "records:999999", "kind": "crash_task", "target": "count[1]"},  # unreachable: not waited for
        {
            "at": {"failpoint": "during_sink_commit"},
            "kind": "failpoint",
            "action": "crash",
            "target": "source[0]",
        },
    ],
    ids=["records-beyond-input", "failpoint-never-hit"],
)
def test_a_trigger_the_run_cannot_reach_is_reported_not_hung(tmp_path, fault):
    rc, out = _run(tmp_path, faults=[fault])
    fs = _verdict(out, "fault_schedule")
    assert rc == 1 and fs["status"] == "fails" and "never fired" in fs["details"][0]
    assert out["stats"]["sim_time_ms"] < 60_000


PY4J = """An error occurred while calling o87.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(1, 0) finished unsuccessfully.
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/worker.py", line 1900, in main
    func, profiler, deserializer, serializer = read_command(pickleSer, infile)
  File "/venv/lib/python3.11/site-packages/pyspark/serializers.py", line 472, in loads
    return cloudpickle.loads(obj, encoding=encoding)
ModuleNotFoundError: No module named 'my_jobs'

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:612)
\tat org.apache.spark.scheduler.Task.run(Task.scala:147)
Caused by: java.lang.IllegalStateException: wrapper
"""


def test_the_root_cause_of_a_spark_failure_is_the_executors_python_traceback():
    from harness.spark.root_cause import root_cause

    cause = root_cause(PY4J)
    assert cause.startswith("Traceback (most recent call last):")
    assert cause.splitlines()[-1] == "ModuleNotFoundError: No module named 'my_jobs'"
    assert "org.apache" not in cause and "collectAndServe" not in cause
    java_only = "An error occurred\n: org.apache.spark.SparkException: Job aborted\n\tat x.y(Z.scala:1)\nCaused by: java.io.IOException: disk full"
    assert root_cause(java_only) == "java.io.IOException: disk full"
    assert root_cause(RuntimeError("plain")) == "plain"


@allure.story("a real chaos run in Allure: timed steps and attachments")
def test_a_chaos_run_reports_steps_and_attachments(run_scenario, assert_oracles):
    """The fast suite's own chaos run through the plugin: Allure shows the run step with its real
    duration, fault windows, restarts, restores, checkpoints, a step per check, and the run's files."""
    out = run_scenario(
        {**BASE, "name": "allure-demo"},
        faults=[
            {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
            {"at": "checkpoint:4", "kind": "storage", "mode": "slow", "delay_ms": 20, "duration_ms": 200},
        ],
    )
    assert_oracles(out)
    assert out.seconds > 0 and out.started_ms > 0


def test_allure_steps_carry_the_runs_real_durations(tmp_path):
    from chaos.report.allure_results import run_step, verdict_steps
    from chaos.report.runner import ScenarioOutcome, run_scenario
    from chaos.scenario import Scenario

    faults = [
        {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
        {"at": "checkpoint:3", "kind": "storage", "mode": "unavailable", "duration_ms": 150},
        {"at": "checkpoint:4", "kind": "crash_task", "target": "count[9]"},  # cannot act
    ]
    out: ScenarioOutcome = run_scenario(Scenario.model_validate({**BASE, "faults": faults}), tmp_path / "r")
    step = run_step(out)
    assert step["stop"] - step["start"] == int(out.seconds * 1000) and step["start"] == out.started_ms
    names = {s["name"]: s for s in step["steps"]}
    window = names["fault: storage on checkpoint storage"]
    assert window["stop"] - window["start"] >= 150  # the fault's window, not an instant
    assert names["fault: crash_task on count[9]"]["status"] == "broken"
    assert any(n.startswith("job restart (attempt 1)") for n in names)
    assert any(n.startswith("restore from checkpoint") for n in names)
    checks = {s["name"]: s["status"] for s in verdict_steps(out.verdicts, step["stop"])}
    assert (
        checks["oracle fault_schedule: FAILED"] == "failed"
        and checks["oracle exactly_once: holds"] == "passed"
    )


def test_a_fault_whose_target_is_not_there_yet_waits_for_it():
    """A storage fault due before any checkpoint completed fires once one has, not 'could not act'."""
    from chaos.injectors.base import NotReady
    from chaos.scenario import Scenario
    from chaos.schedule import Nemesis, plan

    sc = Scenario.model_validate(
        {**BASE, "faults": [{"at": "time:5ms", "kind": "storage", "mode": "corrupt"}]}
    )
    events: list[tuple[str, dict]] = []
    ready = {"now": False}

    class Corrupt:
        instant = True

        def describe(self):
            return {"target": "chk-1/_metadata"}

        def start(self):
            pass

        def stop(self):
            pass

    def factory(p, rng):
        if not ready["now"]:
            raise NotReady("no completed checkpoint to damage yet")
        return Corrupt()

    nemesis = Nemesis(plan(sc), factory, lambda ev: events.append((ev.TAG, ev.fields())))
    for t in range(5, 40):
        nemesis.on_time(t)
    assert events == [] and nemesis.awaiting(("records",)), "retrying, and the gate waits for it"
    ready["now"] = True
    nemesis.on_time(41)
    assert [t for t, _ in events] == ["fault_start", "fault_end"] and "error" not in events[0][1]["details"]

    never = Nemesis(
        plan(sc), lambda p, rng: (_ for _ in ()).throw(NotReady("no link yet")), lambda ev: events.append((ev.TAG, ev.fields()))
    )
    never.on_time(10)
    events.clear()
    never.heal_all()  # the run ended: the fault is recorded as not fired, with why
    assert events[0][1]["details"]["error"] == "its target never became available: no link yet"
