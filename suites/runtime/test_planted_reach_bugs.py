"""Planted runtime bugs on paths the repository's workloads once never reached (a mutation hunt found
them surviving for lack of reach, not of an oracle): the sink's restore at a scale-down from a
savepoint whose commit notice was lost, a lost notice with no restore after it, incremental
checkpoints restored through chains of 3+ deltas, and broadcast state while the broadcast-fed
stage is rescaled with rules still flowing. Each scenario is a small copy of a ``scenarios/*-sim``
one; each bug (monkeypatched in the test only) must be caught cleanly (a check fails, exit 1), while
the same scenario holds on the unbroken runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import allure
import pytest

import harness.job.sinks as sinks
import harness.tasks.stream_task as stream_task
import reference_impl.checkpoint.format_v2 as format_v2
import reference_impl.rescale as rescale
import reference_impl.state.ondisk_backend as ondisk_backend
from suites.runtime.conftest import SMALL_ALLROUND, caught_when_broken

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]


def _sink_restore_commits_only_its_own_index(mp):
    """A restored sink subtask commits the pending transactions of the old subtask with its own index
    only (``old == subtask``, not ``old % p == subtask``): at a scale-down the transactions of the
    subtasks that are gone are never committed."""
    orig = sinks.TwoPhaseCommitFileSink.restore

    def restore(self, entries, parallelism=1):
        mine = [
            [c, t]
            for c, t in entries or []
            if (m := sinks.TXN_NAME.match(str(t))) and int(m[2]) == self.subtask
        ]
        orig(self, mine, parallelism)

    mp.setattr(sinks.TwoPhaseCommitFileSink, "restore", restore)


def _sink_restore_aborts_only_its_own_index(mp):
    """A restored sink subtask aborts the leftovers (transactions not in the restored checkpoint) of
    the old subtask with its own index only: at a scale-down the open transactions of the subtasks
    that are gone stay pending forever (no record differs)."""
    orig = sinks.TwoPhaseCommitFileSink.restore

    def restore(self, entries, parallelism=1):
        pending = self.dir / "pending"
        others = [f for f in pending.iterdir() if not f.name.startswith((f"s{self.subtask:04d}-", "c"))]
        kept = {f: f.read_bytes() for f in others}
        orig(self, entries, parallelism)
        for f, data in kept.items():  # put back what it aborted of other indexes
            if not f.exists():
                f.write_bytes(data)

    mp.setattr(sinks.TwoPhaseCommitFileSink, "restore", restore)


def _sink_notice_commits_only_its_checkpoint(mp):
    """A completion notice commits only its own checkpoint's transactions, not earlier ones whose
    notice was lost."""

    def notify(self, checkpoint_id):
        for txn in list(self.pending.get(checkpoint_id, [])):
            self._commit_txn(checkpoint_id, txn)
        self.pending.pop(checkpoint_id, None)

    mp.setattr(sinks.TwoPhaseCommitFileSink, "notify_checkpoint_complete", notify)


def _chain_read_stops_after_two_deltas(mp):
    """Reading an incremental key group applies its base and first two deltas only."""
    orig, seen = format_v2.apply_key_group_file, [0]

    def apply(path, ref, referrer, kg, first, *a):
        seen[0] = 0 if first else seen[0] + 1
        return ref.size if seen[0] > 2 else orig(path, ref, referrer, kg, first, *a)

    mp.setattr(format_v2, "apply_key_group_file", apply)


def _chain_drops_its_oldest_delta(mp):
    """A key group's chain of base and 3+ files drops its oldest delta (an off-by-one trimming the
    chain to its bound): that delta's changes vanish from every later checkpoint."""
    orig = ondisk_backend.OnDiskKeyedStateBackend.checkpoint_incremental

    def checkpoint(self, *a, **k):
        result = orig(self, *a, **k)
        for kg, chain in list(self._chains.items()):
            if len(chain) >= 4:
                self._chains[kg] = [chain[0], *chain[2:]]
        return result

    mp.setattr(ondisk_backend.OnDiskKeyedStateBackend, "checkpoint_incremental", checkpoint)


def _new_subtasks_get_no_broadcast_state(mp):
    """At a scale-up only the subtasks that existed before get their broadcast state back."""
    orig = rescale.repartition_operator_state

    def repartition(old, new_p):
        out = orig(old, new_p)
        for snap in out[len(old) :]:
            for e in snap.states.values():
                if e.mode.value == "BROADCAST":
                    e.value = {}
        return out

    mp.setattr(rescale, "repartition_operator_state", repartition)


def _broadcast_input_not_blocked_in_alignment(mp):
    """Alignment blocks only the keyed inputs: rules arriving on a broadcast channel after its barrier
    enter the broadcast state before the snapshot."""
    mp.setattr(
        stream_task.StreamTask,
        "blocked_channels",
        lambda self: {c for c in self.aligner.blocked_channels() if c < self.keyed_inputs},
    )


# scenarios/sink-rescale-sim.yaml, smaller: the savepoint of a 4 -> 2 scale-down is restored at 2
# after its commit failed; a scale-down without a savepoint; a completion notice lost after the last
SINK: dict[str, Any] = {
    "parallelism": {"source": 2, "count": 4},
    "faults": [
        {"at": {"failpoint": "during_sink_commit", "checkpoint": 2}, "kind": "failpoint", "action": "crash"},
        {
            "at": {"failpoint": "notify_checkpoint_complete", "checkpoint": 8},
            "kind": "failpoint",
            "action": "drop",
        },
    ],
    "rescale": [
        {"at": "checkpoint:2", "parallelism": {"source": 2, "count": 2}},
        {"at": "checkpoint:6", "parallelism": {"source": 2, "count": 1}, "savepoint": False},
    ],
}
# scenarios/incremental-chain-sim.yaml, smaller
INCREMENTAL: dict[str, Any] = {
    "state_backend": "rocksdb",
    "incremental": True,
    "max_parallelism": 8,
    "records": 4000,
    "keys": 1000,
    "checkpoint": {"interval_ms": 20, "retained": 2},
    "faults": [{"at": {"checkpoint": 7, "after_ms": 10}, "kind": "crash_task", "target": "count[0]"}],
    "rescale": [{"at": "checkpoint:12", "parallelism": {"source": 2, "count": 3}, "savepoint": False}],
}
# scenarios/broadcast-rescale-sim.yaml, smaller
BROADCAST: dict[str, Any] = {
    **SMALL_ALLROUND,
    "job_options": {"rules": 900},
    "faults": [{"at": {"checkpoint": 5, "after_ms": 10}, "kind": "crash_task", "target": "profile[1]"}],
    "rescale": [{"at": "checkpoint:3", "parallelism": {"events": 2, "sessions": 2, "profile": 3}}],
}

# name -> (breaker, scenario overrides, the checks that must be among those catching it)
VARIANTS = {
    "sink restore commits only its own index's transactions": (
        _sink_restore_commits_only_its_own_index,
        SINK,
        {"exactly_once"},
    ),
    "sink restore aborts only its own index's leftovers": (
        _sink_restore_aborts_only_its_own_index,
        SINK,
        {"checkpoint_integrity"},
    ),
    "a completion notice commits only its own checkpoint": (
        _sink_notice_commits_only_its_checkpoint,
        SINK,
        {"exactly_once"},
    ),
    "an incremental chain is read up to its second delta": (
        _chain_read_stops_after_two_deltas,
        INCREMENTAL,
        {"checkpoint_state"},
    ),
    "an incremental chain drops its oldest delta": (
        _chain_drops_its_oldest_delta,
        INCREMENTAL,
        {"checkpoint_state"},
    ),
    "new subtasks get no broadcast state at a scale-up": (
        _new_subtasks_get_no_broadcast_state,
        BROADCAST,
        {"exactly_once"},
    ),
    "the broadcast input is not blocked in alignment": (
        _broadcast_input_not_blocked_in_alignment,
        BROADCAST,
        {"checkpoint_state"},
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_bug_on_a_once_unreached_path_is_caught_cleanly(tmp_path: Path, monkeypatch, name):
    breaker, overrides, by = VARIANTS[name]
    caught, broken = caught_when_broken(tmp_path, monkeypatch, breaker, overrides)
    assert broken.error is None and not broken.passed, broken.error  # exit 1: a check failed, not exit 2
    assert by <= caught, f"{name}: caught by {caught or 'nothing'}, not by {by}: {broken.verdicts}"
