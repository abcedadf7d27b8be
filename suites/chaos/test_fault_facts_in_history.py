"""Facts a fault kind writes into the history, read back by the oracles without knowing kind names:
``fault_start``'s ``holds_tasks`` (liveness) and ``run_start``'s ``plan`` (fault_schedule)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from chaos.cluster.sim import SimCluster
from chaos.scenario import parse_scenario
from chaos.scenario_job import scenario_job
from harness.events import (
    BarrierAlignment,
    CheckpointAborted,
    CheckpointCompleted,
    Event,
    FaultEnd,
    FaultStart,
    RunEnd,
    RunStart,
    TaskRegistered,
    from_json,
    read_history,
)
from harness.oracles import ORACLES, RunArtifacts, check_liveness
from harness.run_store import RunStore


def _aborted_alignment(holds: bool | None) -> list[Event]:
    """A subtask blocked 500 ms in the alignment of an aborted checkpoint, while a fault was active."""
    start = FaultStart(t=0, fault_id=1, kind="some_kind", target=None, trigger="checkpoint=1")
    if holds is not None:
        start = dataclasses.replace(start, holds_tasks=holds)
    return [
        RunStart(t=0, job="j", executor="sim", seed=0, parallelism={}, max_parallelism=128, config={}),
        start,
        CheckpointAborted(t=100, checkpoint_id=1, reason="declined"),
        BarrierAlignment(t=600, checkpoint_id=1, blocked_ms=600, operator="count", subtask=0, outcome="aborted"),
        FaultEnd(t=700, fault_id=1, kind="some_kind"),
        RunEnd(t=800, status="finished", reason="done", records_committed=0, attempts=1),
    ]


def test_liveness_reads_whether_a_fault_holds_tasks_from_its_fault_start(tmp_path: Path):
    def verdict(holds: bool | None):
        return check_liveness(RunArtifacts(tmp_path, _aborted_alignment(holds)), None, 10_000, 100)  # type: ignore[arg-type]

    assert verdict(True).passed and verdict(None).passed  # a fault that may hold the task excuses its wait
    held = verdict(False)
    assert not held.passed and "stayed blocked in the alignment of checkpoint 1" in held.details[0]


def _early_kill(registered: bool) -> list[Event]:
    """An executor killed before the job ran: 100 s before a checkpoint completes, while Spark relaunches
    executors and brings the 4 tasks up one by one, 25 s apart (nothing else moves meanwhile)."""
    up = [TaskRegistered(t=1_000 + 25_000 * i, task=f"t[{i}]", attempt=1) for i in range(4)] if registered else []
    return [
        RunStart(t=0, job="j", executor="spark", seed=0, parallelism={}, max_parallelism=128, config={}),
        FaultStart(t=0, fault_id=1, kind="kill_executor", target=None, trigger="time_ms=0", holds_tasks=False),
        FaultEnd(t=500, fault_id=1, kind="kill_executor"),
        *up,
        CheckpointCompleted(t=100_000, checkpoint_id=1, path="chk-1", source_offsets={}, kind="checkpoint"),
        RunEnd(t=101_000, status="finished", reason="done", records_committed=0, attempts=2),
    ]


def test_tasks_registering_after_an_early_fault_are_its_recoverys_progress(tmp_path: Path):
    def verdict(registered: bool):
        return check_liveness(RunArtifacts(tmp_path, _early_kill(registered)), None, 60_000)  # type: ignore[arg-type]

    assert verdict(True).passed, verdict(True).details  # never 60 s without a task coming up
    silent = verdict(False)  # the same 100 s with nothing registering: a recovery that stood still
    assert not silent.passed and "made no progress for 99500 ms" in silent.details[0], silent.details


def _schedule(events: list[dict]) -> object:
    typed = [from_json({"seq": i, "t": i, **e}) for i, e in enumerate(events)]
    return ORACLES["fault_schedule"].run(RunArtifacts(Path("."), typed), None)


_START = {"job": "j", "executor": "sim", "seed": 0, "parallelism": {}, "max_parallelism": 128, "config": {}}
_FIRED = {"kind": "crash_task", "target": None, "trigger": "checkpoint=2"}


def test_fault_schedule_judges_the_plan_recorded_at_run_start():
    plan = {"faults": [{"fault_id": 1, "kind": "crash_task", "trigger": "checkpoint=2"},
                       {"fault_id": 2, "kind": "crash_task", "trigger": "records=9+5ms"}], "rescales": 1}  # fmt: skip
    fired = [
        {"type": "fault_start", "fault_id": 1, "details": {}, **_FIRED},
        {"type": "fault_end", "fault_id": 1, "kind": "crash_task"},
    ]
    v = _schedule([{"type": "run_start", "plan": plan, **_START}, *fired])
    assert not v.passed and v.details == [
        "fault #2 crash_task at records=9+5ms never fired: the run ended before its trigger was reached",
        "only 0 of 1 rescale steps happened: the run ended before the others' triggers were reached",
    ]
    plan1 = {"faults": plan["faults"][:1], "rescales": 0}
    assert _schedule([{"type": "run_start", "plan": plan1, **_START}, *fired]).passed
    unknown = _schedule([{"type": "run_start", **_START}, *fired])
    assert unknown.status.value == "unknown" and "no plan" in unknown.summary


def test_a_sim_run_records_its_plan_and_each_faults_holds_tasks(tmp_path: Path):
    sc = parse_scenario(
        "name: p\ncluster: sim\nrecords: 400\nkeys: 8\nseed: 3\nfaults:\n"
        "  - {at: checkpoint:1, kind: crash_task}\n"
        "  - {at: checkpoint:2, kind: storage, mode: slow, delay_ms: 5, duration_ms: 20}\n"
    )
    SimCluster().run(sc, scenario_job(sc), tmp_path)
    events = list(read_history(RunStore(tmp_path).history))
    start = next(e for e in events if e["type"] == "run_start")
    assert start["plan"] == {
        "faults": [
            {"fault_id": 1, "kind": "crash_task", "trigger": "checkpoint=1"},
            {"fault_id": 2, "kind": "storage", "trigger": "checkpoint=2"},
        ],
        "rescales": 0,
    }
    holds = {e["kind"]: e["holds_tasks"] for e in events if e["type"] == "fault_start"}
    assert holds == {"crash_task": False, "storage": True}
