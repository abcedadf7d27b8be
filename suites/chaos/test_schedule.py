"""Fault schedules: same seed, same schedule; each fault fires once at its trigger and heals after
its duration; everything active is healed at the end."""

from __future__ import annotations

from typing import Any

from chaos.injectors.base import Injector
from chaos.scenario import parse_scenario
from chaos.schedule import Nemesis, plan

SCENARIO = """\
name: sched
cluster: sim
seed: {seed}
faults:
  - {{at: "checkpoint:3", kind: crash_task, target: "count[0]"}}
  - {{at: "records:500", kind: crash_task}}
  - {{at: "time:2s", kind: clock_skew, skew_ms: 50, duration_ms: 1s, target: "count[1]"}}
  - {{at: {{random: 3, within_ms: 4s}}, kind: crash_task}}
  - {{at: "failpoint:before_snapshot", kind: failpoint, action: delay, delay_ms: 30, target: "count[1]"}}
"""


class Recording(Injector):
    def __init__(self, log: list[str], name: str, instant: bool) -> None:
        self.log, self.name, self.instant = log, name, instant
        self.kind = name

    def start(self) -> None:
        self.log.append(f"start {self.name}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "target": "t"}


def _nemesis(seed: int):
    sc = parse_scenario(SCENARIO.format(seed=seed))
    planned = plan(sc)
    log: list[str] = []
    events: list[tuple[str, dict]] = []

    def factory(p, rng):
        return Recording(log, f"{p.fault.kind}#{p.fault_id}", instant=p.fault.kind != "clock_skew")

    nemesis = Nemesis(planned, factory, lambda ev: events.append((ev.TAG, ev.fields())))
    return planned, nemesis, log, events


def test_same_seed_same_schedule_other_seed_other_times():
    a = [(p.kind, p.value) for p in _nemesis(1)[0]]
    b = [(p.kind, p.value) for p in _nemesis(1)[0]]
    c = [(p.kind, p.value) for p in _nemesis(2)[0]]
    assert a == b
    assert a != c
    assert [k for k, _ in a].count("time_ms") == 4  # 3 random + 1 timed


def test_triggers_fire_once_and_durations_heal():
    planned, nem, log, events = _nemesis(1)
    nem.on_checkpoint_completed(2)
    assert not log
    nem.on_checkpoint_completed(3)
    nem.on_checkpoint_completed(4)
    assert log == ["start crash_task#1", "stop crash_task#1"]
    nem.on_records(499)
    nem.on_records(500)
    assert log[-2:] == ["start crash_task#2", "stop crash_task#2"]
    nem.on_time(2000)
    assert "start clock_skew#3" in log and "stop clock_skew#3" not in log
    assert [p.fault_id for p in nem.active] == [3]
    nem.on_time(2999)
    assert "stop clock_skew#3" not in log
    nem.on_time(3000)
    assert "stop clock_skew#3" in log
    assert nem.on_failpoint("before_snapshot", target="count[0]") is None
    act = nem.on_failpoint("before_snapshot", target="count[1]")
    assert act is not None and act.action == "delay" and act.delay_ms == 30
    assert nem.on_failpoint("before_snapshot", target="count[1]") is None  # fires once
    nem.on_time(10_000)
    assert not nem.pending and not nem.active
    starts = [kw["fault_id"] for t, kw in events if t == "fault_start"]
    ends = [kw["fault_id"] for t, kw in events if t == "fault_end"]
    assert sorted(starts) == sorted(ends) == [p.fault_id for p in planned]


def test_heal_all_heals_active_faults():
    planned, nem, log, _ = _nemesis(3)
    nem.on_time(2000)
    assert nem.active
    nem.heal_all()
    assert not nem.active and "stop clock_skew#3" in log


def test_after_ms_fires_that_long_after_the_condition():
    sc = parse_scenario(
        "name: later\ncluster: sim\nfaults:\n"
        "  - {at: {checkpoint: 2, after_ms: 1s}, kind: crash_task, target: 'count[0]'}\n"
        "  - {at: {records: 100, after_ms: 250ms}, kind: crash_task, target: 'count[1]'}\n"
    )
    planned = plan(sc)
    assert [p.describe() for p in planned] == [
        "#1 crash_task at checkpoint=2+1000ms",
        "#2 crash_task at records=100+250ms",
    ]
    log: list[str] = []
    nem = Nemesis(planned, lambda p, rng: Recording(log, f"#{p.fault_id}", True), lambda *a, **k: None)
    nem.on_time(5000)
    nem.on_checkpoint_completed(2)
    nem.on_records(100)
    assert not log  # reached, not yet due
    nem.on_time(5249)
    nem.on_checkpoint_completed(3)  # a later checkpoint does not move the due time
    assert not log
    nem.on_time(5250)
    assert log == ["start #2", "stop #2"]
    nem.on_time(5999)
    assert log == ["start #2", "stop #2"]
    nem.on_time(6000)
    assert log[-2:] == ["start #1", "stop #1"] and not nem.pending


def test_after_ms_only_for_checkpoint_and_records_triggers():
    import pytest

    from chaos.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="after_ms only applies"):
        parse_scenario("name: x\nfaults:\n  - {at: {time_ms: 1s, after_ms: 1s}, kind: crash_task}\n")
