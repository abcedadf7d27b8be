"""Planted runtime bugs in the areas real runtimes get wrong (barrier alignment, watermarks, timers,
merging state, union and broadcast operator state), each breaking the runtime in one deliberate,
realistic way (monkeypatched in the test only). Each must be caught cleanly: some check fails with
evidence (exit 1), not an error (exit 2), while the same scenario holds on the unbroken runtime."""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import allure
import pytest

import harness.tasks.stream_task as stream_task
import reference_impl.rescale as rescale
import reference_impl.timers as timers
from harness.tasks.barriers import BarrierAligner
from harness.tasks.items import Watermark
from reference_impl.state.handles import _MergingHandle
from suites.runtime.conftest import SMALL_ALLROUND, caught_when_broken

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes"), pytest.mark.slow]


def _alignment_releases_the_first_channel(mp):
    """Off by one: the channel whose barrier came first is not held back while the others' barriers
    are awaited, so its records after the barrier slip into the checkpoint. (The arrived channels are
    a set: the first is remembered as it arrives.)"""
    on_barrier = BarrierAligner.on_barrier

    def remember_first(self, channel, checkpoint_id):
        result = on_barrier(self, channel, checkpoint_id)
        if self.current is not None and self.current.arrived == {channel}:
            self._planted_first = channel
        return result

    def blocked(self):
        return set(self.current.arrived) - {getattr(self, "_planted_first", None)} if self.current else set()

    mp.setattr(BarrierAligner, "on_barrier", remember_first)
    mp.setattr(BarrierAligner, "blocked_channels", blocked)


def _watermark_is_the_maximum_of_the_inputs(mp):
    """A stage takes the largest of its input channels' watermarks, not the smallest."""

    def advance(self):
        wm = max(self.channel_watermarks)
        if wm <= self.timers.watermark:
            return
        self.timers.advance_watermark(wm, self._on_timer)
        if self.ctx._out:
            self._emit(self.ctx._drain())
        if self.env.output is not None:
            self.env.output.broadcast(Watermark(wm))

    mp.setattr(stream_task.StreamTask, "_advance_watermark", advance)


def _deleted_timers_still_fire(mp):
    """Firing does not check that the timer is still registered: a deleted timer fires."""

    def fire_until(self, domain, time, fire):
        q, n = self._queues[domain], 0
        while q and q[0][0] <= time:
            ts, _, key, ns = heapq.heappop(q)
            self.backend.set_current_key(key)
            self._state(domain, ns).remove(ts)
            n += 1
            fire(domain, ts, key, ns)
        return n

    mp.setattr(timers.InternalTimerService, "_fire_until", fire_until)


def _merge_skips_the_last_source(mp):
    """Off by one: merging namespaces folds every source window but the last into the target (the
    last one's values stay behind in its old namespace)."""
    orig = _MergingHandle.merge_namespaces

    def merge(self, target, sources):
        sources = list(sources)
        orig(self, target, sources[:-1] if len(sources) > 1 else sources)

    mp.setattr(_MergingHandle, "merge_namespaces", merge)


def _union_state_restored_as_split(mp):
    """Union list state comes back as each old subtask's own part, not the union of all."""
    orig = rescale.repartition_operator_state

    def repartition(old, new_p):
        out = orig(old, new_p)
        for i, snap in enumerate(out):
            for name, e in snap.states.items():
                if e.mode.value == "UNION":
                    mine = old[i].states.get(name) if i < len(old) else None
                    e.value = list(mine.value) if mine is not None else []
        return out

    mp.setattr(rescale, "repartition_operator_state", repartition)


def _broadcast_elements_dropped_by_later_subtasks(mp):
    """Every subtask but the first drops the last broadcast element of each batch it takes in."""
    orig = stream_task.StreamTask.on_records

    def on_records(self, channel, records):
        if self.is_broadcast_input(channel) and self.subtask > 0 and records:
            records = records[:-1]
        orig(self, channel, records)

    mp.setattr(stream_task.StreamTask, "on_records", on_records)


ALLROUND: dict[str, Any] = {
    **SMALL_ALLROUND,
    "checks": [
        "exactly_once",
        "sequence",
        "restored_state",
        "checkpoint_integrity",
        "liveness",
        "checkpoint_state",
    ],
    "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "profile[0]"}],
}
DELAYED: dict[str, Any] = {
    "checks": ["exactly_once", "sequence", "checkpoint_integrity", "liveness", "checkpoint_state"],
    "faults": [
        {"at": f"checkpoint:{n}", "kind": "delay_barrier", "channel": "source[0]->count[1]", "delay_ms": 30}
        for n in (1, 3)
    ],
}

VARIANTS = {
    "barrier alignment releases the first channel (off by one)": (
        _alignment_releases_the_first_channel,
        DELAYED,
    ),
    "a stage's watermark is the maximum of its inputs": (_watermark_is_the_maximum_of_the_inputs, ALLROUND),
    "deleted timers still fire": (_deleted_timers_still_fire, ALLROUND),
    "merging namespaces skips the last source": (_merge_skips_the_last_source, ALLROUND),
    "union state restored as a split": (
        _union_state_restored_as_split,
        {**ALLROUND, "rescale": [{"at": "checkpoint:3", "parallelism": {"sessions": 2, "profile": 1}}]},
    ),
    "broadcast elements dropped by later subtasks": (_broadcast_elements_dropped_by_later_subtasks, ALLROUND),
}


# the check that must be among those catching a variant (the alignment off-by-one once crashed the
# job in the planted code itself, and passed as caught by ``progress``)
BY = {"barrier alignment releases the first channel (off by one)": {"checkpoint_state"}}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_planted_bug_is_caught_cleanly(tmp_path: Path, monkeypatch, name):
    breaker, overrides = VARIANTS[name]
    caught, broken = caught_when_broken(tmp_path, monkeypatch, breaker, overrides)
    assert caught and "infrastructure" not in caught, f"not caught cleanly: {name}: {broken.verdicts}"
    assert BY.get(name, set()) <= caught, f"{name}: caught by {caught}, not by {BY[name]}: {broken.verdicts}"
