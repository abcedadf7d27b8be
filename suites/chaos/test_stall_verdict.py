"""Limits follow progress, not the clock (issue #35), on sim: a run whose subtask is held for good
fails its ``liveness`` check naming what stopped (exit 1, a finding, not an infrastructure error);
a run that waits longer than the stall limit for a planned fault, completing checkpoints all along,
is idle and passes; an idle restart (a crash after every record was emitted) passes."""

from __future__ import annotations

import json

import allure

from chaos.cli import main
from suites.runtime.conftest import BASE

pytestmark = [allure.epic("chaos"), allure.feature("verdicts")]


def _run(tmp_path, **overrides):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, **overrides}))
    report = tmp_path / "out.json"
    rc = main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    return rc, json.loads(report.read_text())["scenarios"][0]


def _verdict(outcome, oracle):
    return next(v for v in outcome["verdicts"] if v["oracle"] == oracle)


def test_a_run_that_stalls_fails_liveness_naming_what_stopped(tmp_path):
    hold = {"at": "failpoint:before_snapshot", "kind": "failpoint", "action": "delay", "delay_ms": 3_600_000,
            "target": "count[1]"}  # fmt: skip
    rc, out = _run(tmp_path, faults=[hold], stall_limit_s=5, checks=["exactly_once", "liveness"])
    assert rc == 1 and out["result"] != "error" and not out.get("error"), out
    live = _verdict(out, "liveness")
    assert live["status"] == "fails", live
    assert "checkpoints_completed" in live["data"]["stopped"], live
    assert "stopped progressing" in live["summary"], live
    text = " ".join(live["details"])
    assert "no progress for" in text and "(bound 5 s)" in text, text
    assert "subtasks held in a step: count[1]" in text, text  # what it waited for
    assert _verdict(out, "exactly_once")["status"] == "unknown"  # a run cut short is not judged


def test_a_run_idle_longer_than_the_stall_limit_is_not_stuck(tmp_path):
    # the crash is planned at 8 s of simulated time, far past the last record (the end of input is
    # held for it): the run idles over 7 s, completing checkpoints, then restarts and finishes
    crash = {"at": "time:8s", "kind": "crash_task", "target": "count[0]"}
    rc, out = _run(tmp_path, faults=[crash], stall_limit_s=3, checks=["exactly_once", "restored_state", "liveness"])
    assert rc == 0, out
    assert all(v["status"] == "holds" for v in out["verdicts"]), out["verdicts"]
    events = [json.loads(line) for line in (tmp_path / "runs").glob("*/history.jsonl").__next__().open()]
    restart = next(e for e in events if e["type"] == "job_restart")
    last_record = max(e["t"] for e in events if e["type"] == "records_out" and e["operator"] == "source")
    assert restart["t"] - last_record > 3_000  # idle for longer than the stall limit before the restart
