"""The ``adaptive_recovery`` oracle on histories made of the typed events the Spark executor writes
(``task_slots``, ``slot_layout``, ``rescale``, ``input_held``/``input_released``): a scale-down that
fits the slots left unshared and a scale-up when they return hold; a deployment that shares a slot at
the boundary, one that takes more slots than there are, and a job that keeps checkpointing but never scales back up fails.
The end-to-end planted bug on Spark is ``suites/spark/test_adaptive_recovery.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import allure

from harness.events import (
    CheckpointCompleted,
    Event,
    InputHeld,
    InputReleased,
    Rescale,
    ResourcesLost,
    RunEnd,
    RunStart,
    SlotLayout,
    TaskSlots,
)
from harness.history import HistoryWriter
from harness.oracles.adaptive_recovery import check_adaptive_recovery
from harness.oracles.artifacts import RunArtifacts
from harness.run_store import RunStore

pytestmark = [allure.epic("runtime"), allure.feature("adaptive recovery")]

FULL = {"source": 1, "count": 2}
SMALL = {"source": 1, "count": 1}
HELD = InputHeld(waiting=[f"adaptive scale-up to {FULL} on 3 task slots"], limit_ms=30_000)


def _judge(tmp_path: Path, events: list[tuple[int, Event]]) -> Any:
    now = [0]
    with HistoryWriter(RunStore(tmp_path).history, lambda: now[0]) as h:
        h.emit(RunStart(job="keyed_count", executor="spark", seed=0, parallelism=FULL, max_parallelism=128,
                        config={"adaptive_recovery": {"enabled": True, "resource_stabilization_timeout_ms": 0}}))
        h.emit(TaskSlots(slots=3))
        h.emit(SlotLayout(attempt=0, parallelism=FULL, tasks_per_slot=[1, 1, 1]))
        for t, e in events:
            now[0] = t
            h.emit(e)
        now[0] += 1
        h.emit(RunEnd(status="finished", reason="", attempts=3, records_committed=100))
    return check_adaptive_recovery(RunArtifacts.load(tmp_path), None)  # type: ignore[arg-type]


def _down(to: dict[str, int], per_slot: list[int], slots: int = 2) -> list[tuple[int, Event]]:
    return [
        (1_000, TaskSlots(slots=slots)),
        (1_200, ResourcesLost(slots=slots, needed=3, waited_ms=0)),
        (1_300, Rescale(from_=FULL, to=to, checkpoint_id=2, savepoint=False, reason="adaptive", slots=len(per_slot))),
        (1_400, SlotLayout(attempt=1, parallelism=to, tasks_per_slot=per_slot, slots_available=slots, reason="adaptive")),
    ]


UP: list[tuple[int, Event]] = [
    (5_000, TaskSlots(slots=3)),
    (6_000, Rescale(from_=SMALL, to=FULL, checkpoint_id=4, savepoint=True, reason="adaptive", slots=3)),
    (6_100, SlotLayout(attempt=2, parallelism=FULL, tasks_per_slot=[1, 1, 1], slots_available=3, reason="adaptive")),
]


def _run(tmp_path: Path, make: Callable[[], list[tuple[int, Event]]]) -> Any:
    v = _judge(tmp_path, make())
    allure.attach(str(v.to_dict()), "verdict")
    return v


def test_a_scale_down_onto_the_slots_left_then_back_up_holds(tmp_path: Path) -> None:
    v = _run(tmp_path, lambda: [*_down(SMALL, [1, 1]), (4_000, HELD), *UP, (6_200, InputReleased(waiting=[], held_ms=2_200))])
    assert v.holds, v.details
    assert (v.data["scale_downs"], v.data["scale_ups"], v.data["deployments_judged"]) == (1, 1, 2)


def test_a_deployment_sharing_a_slot_at_the_boundary_fails(tmp_path: Path) -> None:
    """parallelism = slots + 1: three subtasks on the two slots left, although each operator could
    have had a slot of its own."""
    v = _run(tmp_path, lambda: [*_down(FULL, [2, 1]), *UP[:1]])
    assert v.fails
    assert any("share a slot" in d and "2 slots there" in d for d in v.details), v.details


def test_a_deployment_taking_more_slots_than_there_are_or_fewer_subtasks_than_fit_fails(tmp_path: Path) -> None:
    v = _run(tmp_path / "more", lambda: _down(FULL, [1, 1, 1]))
    assert v.fails and any("takes 3 task slots, only 2" in d for d in v.details), v.details
    v = _run(tmp_path / "fewer", lambda: _down(SMALL, [1, 1], slots=3))
    assert v.fails and any("runs 2 subtasks; 3 fit 3 slots" in d for d in v.details), v.details


def test_fewer_slots_than_operators_run_every_operator_in_shared_slots(tmp_path: Path) -> None:
    v = _run(tmp_path / "ok", lambda: _down(SMALL, [2], slots=1))
    assert v.holds, v.details
    v = _run(tmp_path / "bad", lambda: _down({"source": 1, "count": 2}, [3], slots=1))
    assert v.fails and any("min(configured, slots)" in d for d in v.details), v.details


def _checkpoints(*ts: int) -> list[tuple[int, Event]]:
    return [(t, CheckpointCompleted(checkpoint_id=10 + i, path=f"chk-{10 + i}", source_offsets={}, kind="checkpoint"))
            for i, t in enumerate(ts)]


def test_a_job_that_keeps_checkpointing_but_never_scales_back_up_fails(tmp_path: Path) -> None:
    """Three checkpoints within 1.5 s after the slots came back: the job had every chance to take the
    scale-up's savepoint, however short the time (a wall-clock grace let this pass)."""
    v = _run(tmp_path, lambda: [*_down(SMALL, [1, 1]), (4_000, HELD), (5_000, TaskSlots(slots=3)),
                                *_checkpoints(5_500, 6_000, 6_500), (6_600, InputReleased(waiting=[], held_ms=2_600))])
    assert v.fails
    assert any("never scaled back up" in d and "3 task slots were back" in d and "3 checkpoints completed" in d
               for d in v.details), v.details


def test_a_job_making_no_progress_is_not_blamed_for_a_scale_up_however_long_the_slots_stayed(tmp_path: Path) -> None:
    """29 s with the slots back but not one checkpoint (a loaded machine, a stalled job: liveness
    judges that): no chance to take the savepoint, so no finding (a wall-clock grace failed this)."""
    v = _run(tmp_path, lambda: [*_down(SMALL, [1, 1]), (4_000, HELD), (5_000, TaskSlots(slots=3)),
                                *_checkpoints(5_500, 6_000), (34_000, InputReleased(waiting=[], held_ms=30_000))])
    assert v.holds, v.details


def test_checkpoints_before_the_stabilization_timeout_passed_do_not_count(tmp_path: Path) -> None:
    """The driver waits the timeout (here 10 s) for the slots to stay before it scales up."""
    def judge(path: Path, cps: list[tuple[int, Event]]) -> Any:
        now = [0]
        with HistoryWriter(RunStore(path).history, lambda: now[0]) as h:
            h.emit(RunStart(job="keyed_count", executor="spark", seed=0, parallelism=FULL, max_parallelism=128,
                            config={"adaptive_recovery": {"resource_stabilization_timeout_ms": 10_000}}))
            h.emit(SlotLayout(attempt=0, parallelism=FULL, tasks_per_slot=[1, 1, 1]))
            for t, e in [*_down(SMALL, [1, 1]), (4_000, HELD), (5_000, TaskSlots(slots=3)), *cps]:
                now[0] = t
                h.emit(e)
            now[0] = 20_000
            h.emit(InputReleased(waiting=[], held_ms=16_000))
        return check_adaptive_recovery(RunArtifacts.load(path), None)  # type: ignore[arg-type]

    assert judge(tmp_path / "early", _checkpoints(6_000, 8_000, 10_000, 12_000, 14_000)).holds
    late = judge(tmp_path / "late", _checkpoints(6_000, 15_000, 16_000, 17_000))
    assert late.fails and any("from t=15000 ms" in d for d in late.details), late.details


def test_nothing_adapted_is_unknown(tmp_path: Path) -> None:
    v = _run(tmp_path, lambda: [])
    assert v.status.value == "unknown" and "never acted" in v.summary
