"""Each run says which phases of the job its faults struck (alignment, snapshot, timer firing,
restore, rescale), read from its history."""

from __future__ import annotations

from typing import Any

import allure

from chaos.fault_phases import describe_phases, phases_hit
from harness.events import Event, from_fields

pytestmark = [allure.epic("chaos"), allure.feature("fault phases")]


def _ev(seq: int, t: int, type_: str, **f: Any) -> Event:
    return from_fields(type_, f, seq=seq, t=t)


_RESTORE = {"path": None, "operator": "s", "subtask": 0, "parallelism": 1, "key_group_range": [0, 127]}
_RESTORE = {**_RESTORE, "restored_state_file": "restored/x.state"}
_FAULT = {"target": None, "trigger": "time_ms=0", "details": {}}


def test_each_fault_is_placed_in_the_phases_it_struck() -> None:
    events = [
        _ev(0, 0, "restore", checkpoint_id=None, attempt=0, **_RESTORE),
        _ev(1, 10, "checkpoint_triggered", checkpoint_id=1, kind="checkpoint"),
        _ev(2, 12, "fault_start", fault_id=1, kind="delay_barrier", **_FAULT),  # checkpoint 1 pending, aligning
        _ev(3, 20, "alignment", checkpoint_id=1, blocked_ms=9, operator="s", subtask=0, outcome="aligned"),
        _ev(4, 22, "checkpoint_completed", checkpoint_id=1, path="chk-1", source_offsets={}, kind="checkpoint"),
        _ev(5, 30, "fault_start", fault_id=2, kind="crash_task", **_FAULT),  # no checkpoint pending, timers firing
        _ev(6, 70, "timers_fired", operator="s", subtask=0, event=3),
        _ev(7, 45, "job_restart", attempt=1, reason="crash", checkpoint_id=1),
        _ev(8, 50, "restore", checkpoint_id=1, attempt=1, **_RESTORE),
        _ev(9, 95, "fault_start", fault_id=3, kind="crash_task", **_FAULT),  # restored, no checkpoint since
        _ev(10, 100, "rescale", checkpoint_id=1, **{"from": {"s": 1}, "to": {"s": 2}}, savepoint=False),
        _ev(11, 101, "restore", checkpoint_id=1, attempt=2, **_RESTORE),
        _ev(12, 150, "fault_start", fault_id=6, kind="crash_task", **_FAULT),  # rescaled (and restored) since
        _ev(13, 200, "fault_start", fault_id=4, kind="pause", target=None, trigger="t", details={"error": "no such task"}),
        _ev(14, 300, "checkpoint_triggered", checkpoint_id=2, kind="checkpoint"),
        _ev(15, 310, "checkpoint_completed", checkpoint_id=2, path="chk-2", source_offsets={}, kind="checkpoint"),
        _ev(16, 400, "fault_start", fault_id=5, kind="crash_task", **_FAULT),  # at rest
    ]
    got = phases_hit(events)
    assert got == {
        1: ["alignment", "snapshot"],
        2: ["timer firing"],
        3: ["restore"],
        6: ["restore", "rescale"],
        5: [],
    }  # fault 4 could not act: it struck nothing
    assert describe_phases(got) == (
        "5 faults hit: alignment 1, snapshot 1, timer firing 1, restore 2, rescale 1"
    )


def test_a_query_run_reports_no_runtime_phases() -> None:
    """A Structured Streaming query's faults are placed by micro-batch and sink window: the runtime's
    phases do not apply, so its summary has no "alignment 0, snapshot 0, ..." line."""
    start = {"job": "q", "seed": 0, "parallelism": {}, "max_parallelism": 1, "config": {}}
    kill = _ev(2, 9, "fault_start", fault_id=1, kind="kill_driver", **_FAULT)
    pending = _ev(1, 5, "checkpoint_triggered", checkpoint_id=1, kind="checkpoint")
    query = [_ev(0, 0, "run_start", executor="structured_streaming", **start), pending, kill]
    assert phases_hit(query) == {}
    assert phases_hit([_ev(0, 0, "run_start", executor="sim", **start), pending, kill]) == {1: ["snapshot"]}
