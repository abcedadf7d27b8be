"""Broken runtimes around state backends, timers, watermarks and multi-stage barriers: each test
breaks the runtime in one deliberate way (monkeypatching, in the test only) and asserts some oracle
fails, while the same scenario passes on the unbroken runtime (as ``test_broken_variants``)."""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import allure
import pytest

import harness.tasks as tasks
import reference_impl.rescale as rescale
import reference_impl.state.ondisk_backend as ondisk
import reference_impl.timers as timers
from harness.tasks.items import CheckpointBarrier
from suites.runtime import timed_job  # noqa: F401 - registers test_timed
from suites.runtime.conftest import caught_when_broken

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]

CRASHES = [
    {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
    {"at": "checkpoint:5", "kind": "crash_task", "target": "count[0]"},
]


def _incremental_reuses_stale_shared_file(mp):
    orig = ondisk.OnDiskKeyedStateBackend.checkpoint_incremental

    def checkpoint_incremental(self, *a, **kw):
        if self._track:  # after the first checkpoint: forget what changed, reuse every old file
            self._changed = set()
        return orig(self, *a, **kw)

    mp.setattr(ondisk.OnDiskKeyedStateBackend, "checkpoint_incremental", checkpoint_incremental)


def _timers_lost_on_restore(mp):
    mp.setattr(timers.InternalTimerService, "restore", lambda self, snapshots: None)


def _timers_not_redistributed(mp):
    orig = timers.InternalTimerService.restore

    def restore(self, snapshots):  # only the timers of the first old subtask's file
        orig(self, list(snapshots)[:1])

    mp.setattr(timers.InternalTimerService, "restore", restore)


def _timers_fire_scrambled_after_restore(mp):
    """After a restore, the timers due at one watermark fire in reverse order: each session still
    comes out once, with the right (user, start), but numbered out of turn (only its content shows it)."""
    orig_restore = timers.InternalTimerService.restore

    def restore(self, snapshots):
        orig_restore(self, snapshots)
        self._scrambled = True

    def fire_until(self, domain, time, fire):
        q, due, n = self._queues[domain], [], 0
        while q and q[0][0] <= time:
            due.append(heapq.heappop(q))
        for ts, _, key, ns in reversed(due) if getattr(self, "_scrambled", False) else due:
            self.backend.set_current_key(key)
            st = self._state(domain, ns)
            if st.contains(ts):
                st.remove(ts)
                n += 1
                fire(domain, ts, key, ns)
        return n

    mp.setattr(timers.InternalTimerService, "restore", restore)
    mp.setattr(timers.InternalTimerService, "_fire_until", fire_until)


def _watermark_reset_after_restore(mp):
    orig = tasks.StreamTask._restore_watermark

    def restore_watermark(self):
        orig(self)
        self.timers.watermark = timers.MIN_WATERMARK
        self.channel_watermarks = [timers.MIN_WATERMARK] * self.num_inputs

    mp.setattr(tasks.StreamTask, "_restore_watermark", restore_watermark)


def _barrier_forwarded_before_snapshot(mp):
    """The barrier goes downstream at once, the snapshot only after the next batch of records (as
    if the snapshot were taken asynchronously from live state instead of at the barrier)."""
    orig_snapshot, orig_records = tasks.StreamTask._snapshot, tasks.StreamTask.on_records

    def snapshot(self, barrier):
        if self.env.output is None:
            return orig_snapshot(self, barrier)
        self.env.output.broadcast(barrier)
        self._late_barrier = barrier

    def on_records(self, channel, records):
        orig_records(self, channel, records)
        late = getattr(self, "_late_barrier", None)
        if late is not None:
            self._late_barrier = None
            broadcast = self.env.output.broadcast
            self.env.output.broadcast = lambda item: None if isinstance(item, CheckpointBarrier) else broadcast(item)
            try:
                orig_snapshot(self, late)
            finally:
                self.env.output.broadcast = broadcast

    mp.setattr(tasks.StreamTask, "_snapshot", snapshot)
    mp.setattr(tasks.StreamTask, "on_records", on_records)


def _broadcast_state_not_replicated(mp):
    """On scale-up new subtask i takes old subtask i's broadcast state, and the new ones get none
    (instead of a copy each)."""
    orig = rescale.repartition_operator_state

    def repartition(old, new_p):
        out = orig(old, new_p)
        for i in range(len(old), new_p):
            for e in out[i].states.values():
                if e.mode.value == "BROADCAST":
                    e.value = {}
        return out

    mp.setattr(rescale, "repartition_operator_state", repartition)


TIMED: dict[str, Any] = {
    "job": "test_timed",
    "parallelism": {"src": 2, "timers": 2},
    "job_options": {"per_split": 500},
    "checkpoint": {"interval_ms": 15, "retained": 2},
    "checks": ["exactly_once", "restored_state", "checkpoint_integrity", "liveness"],
}
ALLROUND: dict[str, Any] = {
    "job": "allround",
    "records": 3000,
    "max_parallelism": 64,
    "parallelism": {"events": 2, "sessions": 2, "profile": 2},
    "checkpoint": {"interval_ms": 15, "retained": 2},
    "checks": ["exactly_once", "sequence", "restored_state", "checkpoint_integrity", "liveness"],
}

VARIANTS = {
    "timers lost on restore": (
        _timers_lost_on_restore,
        {**TIMED, "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "timers[0]"}]},
    ),
    "timers not redistributed on rescale": (
        _timers_not_redistributed,
        {**TIMED, "rescale": [{"at": "checkpoint:3", "parallelism": {"src": 2, "timers": 3}}]},
    ),
    "watermark reset after restore": (
        _watermark_reset_after_restore,
        {**TIMED, "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "timers[1]"}]},
    ),
    "broadcast state redistributed wrongly": (
        _broadcast_state_not_replicated,
        {**ALLROUND, "rescale": [{"at": "checkpoint:3", "parallelism": {"sessions": 2, "profile": 3}}]},
    ),
    "timer firing order scrambled after restore": (
        _timers_fire_scrambled_after_restore,
        {**ALLROUND, "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "sessions[0]"}]},
    ),
    "a barrier forwarded before the snapshot in a multi-stage job": (
        _barrier_forwarded_before_snapshot,
        {**ALLROUND, "faults": [{"at": "checkpoint:4", "kind": "crash_task", "target": "profile[0]"}]},
    ),
    "an incremental checkpoint reuses a stale shared file": (
        _incremental_reuses_stale_shared_file,
        {"state_backend": "rocksdb", "incremental": True, "faults": CRASHES},
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_broken_runtime_is_caught(tmp_path: Path, monkeypatch, name):
    breaker, overrides = VARIANTS[name]
    caught, broken = caught_when_broken(tmp_path, monkeypatch, breaker, overrides)
    assert caught, f"no oracle caught: {name}"
