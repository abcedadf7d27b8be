"""Limits follow progress, not the clock (issue #35), on sim: a run whose subtask is held for good
fails its ``liveness`` check naming what stopped (exit 1, a finding, not an infrastructure error);
a run that waits longer than the stall limit for a planned fault, completing checkpoints all along,
is idle and passes; an idle restart (a crash after every record was emitted) passes."""

from __future__ import annotations

import json

import allure

from chaos.report.cli import main
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


def _history(tmp_path):
    return [json.loads(line) for line in next((tmp_path / "runs").glob("*/history.jsonl")).open()]


def test_a_planned_pause_longer_than_the_stall_limit_is_not_a_stall(tmp_path):
    # storage is unavailable for 6 s of simulated time from the first checkpoint: every record is in
    # long before, and nothing can move (checkpoints are declined, tolerated) until the pause ends, 3
    # times the stall limit; the pause is planned (fault_start holds_tasks, with a duration), so the
    # run is held, not stuck, and finishes once storage is back
    pause = {"at": "checkpoint:1", "kind": "storage", "mode": "unavailable", "duration_ms": "6s"}
    checkpoint = {"interval_ms": 500, "retained": 2, "tolerable_failures": 100}
    rc, out = _run(tmp_path, faults=[pause], checkpoint=checkpoint, stall_limit_s=2, checks=["exactly_once", "liveness"])
    assert rc == 0, out
    assert all(v["status"] == "holds" for v in out["verdicts"]), out["verdicts"]
    events = _history(tmp_path)
    start = next(e for e in events if e["type"] == "fault_start")
    end = next(e for e in events if e["type"] == "fault_end")
    assert start["holds_tasks"] and end["t"] - start["t"] == 6_000
    last_record = max(e["t"] for e in events if e["type"] == "records_out" and e["operator"] == "source")
    assert end["t"] - last_record > 2 * 2_000  # standing still for over twice the stall limit meanwhile
    assert not [e for e in events if e["type"] == "stalled"]


def test_after_a_planned_pause_ends_progress_must_come_within_the_stall_limit(tmp_path):
    # count[1] hangs at its first snapshot (a failpoint delay of an hour: a bug, not a planned pause),
    # and storage is unavailable from 100 ms for 5 s: the stall is counted from the pause's end
    hang = {"at": "failpoint:before_snapshot", "kind": "failpoint", "action": "delay", "delay_ms": 3_600_000,
            "target": "count[1]"}  # fmt: skip
    pause = {"at": "time:100ms", "kind": "storage", "mode": "unavailable", "duration_ms": "5s"}
    rc, out = _run(tmp_path, faults=[hang, pause], stall_limit_s=2, checks=["exactly_once", "liveness"])
    assert rc == 1, out
    live = _verdict(out, "liveness")
    assert live["status"] == "fails", live
    assert "count[1]" in " ".join(live["details"]), live
    events = _history(tmp_path)
    healed = next(e["t"] for e in events if e["type"] == "fault_end" and e["kind"] == "storage")
    stalled = next(e for e in events if e["type"] == "stalled")
    assert healed + 2_000 <= stalled["t"] <= healed + 2_000 + 200  # the bound counted from the pause's end


def test_a_slow_recovery_that_keeps_progressing_passes(tmp_path):
    # a slow machine, on sim: 50 ms per step, a checkpoint every 2 s; after the crash the first checkpoint
    # completes about 2 s later, four times the recovery bound, but records flow every step meanwhile
    crash = {"at": "checkpoint:1", "kind": "crash_task", "target": "count[0]"}
    rc, out = _run(tmp_path, faults=[crash], sim={"tick_ms": 50}, checkpoint={"interval_ms": 2000, "retained": 2},
                   recovery_bound_ms="500ms", checks=["exactly_once", "restored_state", "liveness"])  # fmt: skip
    assert rc == 0, out
    live = _verdict(out, "liveness")
    assert live["status"] == "holds", live
    assert live["data"]["recovery_ms"] > 2 * 500  # slow: a clock bound would have failed it
    assert live["data"]["still_ms"] <= 500, live  # but it never stood still for the bound


def test_a_recovery_without_progress_fails_naming_what_stopped(tmp_path):
    # count[0] hangs 3 s in its restore; the other subtasks run out of input and wait for it: nothing
    # moves for over the 1 s recovery bound (yet less than the stall limit: the run finishes)
    hang = {"at": "failpoint:during_restore", "kind": "failpoint", "action": "delay", "delay_ms": "3s",
            "target": "count[0]"}  # fmt: skip
    rc, out = _run(tmp_path, faults=[hang], recovery_bound_ms="1s", checks=["exactly_once", "liveness"])
    assert rc == 1, out
    assert _verdict(out, "exactly_once")["status"] == "holds"
    live = _verdict(out, "liveness")
    assert live["status"] == "fails", live
    assert live["summary"].startswith("a recovery stood still: "), live
    assert {"records", "checkpoints"} <= set(live["data"]["stopped"]), live
    text = " ".join(live["details"])
    assert "the recovery from fault #1 failpoint" in text and "(bound 1000 ms)" in text, text
    assert "records last moved at t=" in text and "waiting for a checkpoint" in text, text
