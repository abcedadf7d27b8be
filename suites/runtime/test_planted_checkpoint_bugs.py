"""Planted runtime bugs that only the state inside completed checkpoints shows: no committed record
differs, and no restore reads the broken part, so only ``checkpoint_state`` (every completed
checkpoint judged) catches them. Each breaks the runtime in one deliberate way (monkeypatched in the
test only) and the same scenario holds on the unbroken runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import allure
import pytest

import harness.tasks.source_task as source_task
import harness.tasks.stream_task as stream_task
import harness.tasks.task_base as task_base
import reference_impl.timers as timers
from harness import KeyedProcessFunction, RuntimeContext
from harness.jobs.keyed_count import KeyedCount
from reference_impl.operator_state import OperatorStateBackend
from suites.runtime.conftest import caught_when_broken, keyed_count_with

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes"), pytest.mark.slow]


def _processing_timers_dropped_on_restore(mp):
    """A restore rebuilds only the event-time queue: restored processing-time timers stay in state
    but never fire (allround's 50 ms idle timers: no output depends on them)."""
    orig = timers.InternalTimerService.restore

    def restore(self, snapshots):
        orig(self, snapshots)
        self._queues[timers.PROCESSING_TIME] = []

    mp.setattr(timers.InternalTimerService, "restore", restore)


def _event_timers_of_one_namespace_dropped_on_restore(mp):
    """A restore drops the restored event-time timers of every namespace but the void one (as a
    rebuild reading only the default namespace would): allround's windows never fire... unless their
    output catches it, which is why this case names no single oracle."""
    orig = timers.InternalTimerService.restore

    def restore(self, snapshots):
        orig(self, snapshots)
        q = self._queues[timers.EVENT_TIME]
        self._queues[timers.EVENT_TIME] = [e for e in q if e[3] == "VoidNamespace"]

    mp.setattr(timers.InternalTimerService, "restore", restore)


def _broadcast_state_lost_in_snapshot(mp):
    """Only subtask 0 writes its broadcast state into a checkpoint (as if a single copy were enough
    to redistribute): every other subtask's copy in the checkpoint is empty."""
    orig = task_base.TaskBase._checkpoint_snapshot

    def snapshot(self):
        snap = orig(self)
        if self.subtask > 0 and snap.operator is not None:
            for e in snap.operator.states.values():
                if e.mode.value == "BROADCAST":
                    e.value = {}
        return snap

    mp.setattr(task_base.TaskBase, "_checkpoint_snapshot", snapshot)


def _watermark_checkpointed_from_the_first_channel(mp):
    """A keyed subtask checkpoints its first input channel's watermark instead of its own (the minimum
    over its inputs): no restore reads it in a run without faults, and no record changes."""
    orig = stream_task.StreamTask._snapshot

    def snapshot(self, barrier):
        own = self.timers.watermark
        self.timers.watermark = max(own, self.channel_watermarks[0])
        try:
            orig(self, barrier)
        finally:
            self.timers.watermark = own

    mp.setattr(stream_task.StreamTask, "_snapshot", snapshot)


def _restored_watermark_checkpointed_after_a_restart(mp):
    """After a restore, a keyed subtask checkpoints the watermark it restored (a value cached at
    restore) instead of its own: not ahead of the input, so earlier sessions' "not ahead after a
    restart" passed it; no record changes, and a restore from such a checkpoint only lowers the
    watermark a restart resumes from."""
    orig_restore, orig_snapshot = stream_task.StreamTask.restore, stream_task.StreamTask._snapshot

    def restore(self, restored, checkpoint_id=None, path=None):
        orig_restore(self, restored, checkpoint_id, path)
        if restored is not None:
            self._planted_restored_wm = self.timers.watermark

    def snapshot(self, barrier):
        own = self.timers.watermark
        self.timers.watermark = getattr(self, "_planted_restored_wm", own)
        try:
            orig_snapshot(self, barrier)
        finally:
            self.timers.watermark = own

    mp.setattr(stream_task.StreamTask, "restore", restore)
    mp.setattr(stream_task.StreamTask, "_snapshot", snapshot)


def _finished_splits_event_time_left_out_of_snapshots(mp):
    """A source subtask checkpoints the largest event time only of the splits it still reads (a
    finished split no longer counts for its watermark): the checkpoint no longer says how far event
    time got in those splits, and no record or restore shows it."""
    orig = source_task.SourceTask.trigger_checkpoint

    def trigger(self, checkpoint_id, timestamp, kind="checkpoint"):
        kept = dict(self.split_max)
        self.split_max = {n: t for n, t in kept.items() if not self.function.split_finished(n)}
        try:
            orig(self, checkpoint_id, timestamp, kind)
        finally:
            self.split_max = kept

    mp.setattr(source_task.SourceTask, "trigger_checkpoint", trigger)


class _FirstSightings(KeyedCount):
    """keyed_count that records each key once, when its first record is counted, in a list state and
    a union list state: elements that do not depend on which subtask saw the record, so at any
    parallelism the subtasks' lists together are the reference's (the union's as a set)."""

    def open(self, ctx: RuntimeContext) -> None:
        super().open(ctx)
        self.firsts = ctx.operator_state.get_list_state("firsts")
        self.union_firsts = ctx.operator_state.get_union_list_state("union_firsts")

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        super().process_element(value, ctx)
        if self.count.value() == 1:
            self.firsts.add(value[0])
            self.union_firsts.add(value[0])

    process_elements = KeyedProcessFunction.process_elements


keyed_count_with("test_first_sightings", _FirstSightings)


def _lists_snapshotted_as_restored(mp):
    """A snapshot writes a stage's own list states as they were restored, not as updated since (a copy
    taken at restore written instead of the live list): before the first restore every checkpoint
    holds them empty, after it they stay as restored. No record and no restore shows it... and at
    parallelism 2 the one-subtask comparison of earlier sessions did not judge it."""
    orig_restore, orig_snapshot = OperatorStateBackend.restore, OperatorStateBackend.snapshot

    def restore(self, snapshot):
        self._planted_restored = {n: list(e.value) for n, e in snapshot.states.items() if isinstance(e.value, list)}
        orig_restore(self, snapshot)

    def snapshot(self):
        snap = orig_snapshot(self)
        for n, e in snap.states.items():
            if not n.startswith("__") and isinstance(e.value, list):
                e.value = list(getattr(self, "_planted_restored", {}).get(n, []))
        return snap

    mp.setattr(OperatorStateBackend, "restore", restore)
    mp.setattr(OperatorStateBackend, "snapshot", snapshot)


FIRST_SIGHTINGS: dict[str, Any] = {
    "job": "test_first_sightings",
    "parallelism": {"source": 2, "count": 2},
    "checks": ["exactly_once", "checkpoint_integrity", "liveness", "checkpoint_state"],
    "faults": [{"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"}],
    "rescale": [{"at": "checkpoint:4", "parallelism": {"source": 2, "count": 3}}],
}

ALLROUND: dict[str, Any] = {
    "job": "allround",
    "records": 4000,
    "max_parallelism": 64,
    "parallelism": {"events": 2, "sessions": 2, "profile": 2},
    "checkpoint": {"interval_ms": 15, "retained": 2},
    "checks": ["exactly_once", "sequence", "checkpoint_integrity", "liveness", "checkpoint_state"],
}
CRASH = {"faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "sessions[0]"}]}

# name -> (breaker, scenario overrides, the checks that must catch it; None: any)
VARIANTS = {
    "processing-time timers dropped on restore": (
        _processing_timers_dropped_on_restore,
        {**ALLROUND, **CRASH},
        {"checkpoint_state"},
    ),
    "event-time timers of windows dropped on restore": (
        _event_timers_of_one_namespace_dropped_on_restore,
        {**ALLROUND, **CRASH},
        None,
    ),
    "broadcast state lost in a snapshot": (_broadcast_state_lost_in_snapshot, ALLROUND, {"checkpoint_state"}),
    "watermark checkpointed from the first input channel": (
        _watermark_checkpointed_from_the_first_channel,
        ALLROUND,
        {"checkpoint_state"},
    ),
    "operator list states at parallelism above 1 snapshotted as restored": (
        _lists_snapshotted_as_restored,
        FIRST_SIGHTINGS,
        {"checkpoint_state"},
    ),
    "restored watermark checkpointed after a restart": (
        _restored_watermark_checkpointed_after_a_restart,
        {**ALLROUND, **CRASH},
        {"checkpoint_state"},
    ),
    "finished splits' event time left out of snapshots": (
        _finished_splits_event_time_left_out_of_snapshots,
        ALLROUND,
        {"checkpoint_state"},
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_bug_only_checkpoints_show_is_caught(tmp_path: Path, monkeypatch, name):
    breaker, overrides, by = VARIANTS[name]
    caught, broken = caught_when_broken(tmp_path, monkeypatch, breaker, overrides)
    assert caught, f"no oracle caught: {name}"
    if by is not None:
        assert by <= caught, f"{name}: caught by {caught}, not by {by}: {broken.verdicts}"
    assert broken.error is None and not broken.passed  # exit 1: a check failed, not an error (exit 2)
