"""The oracles catch real bugs: each test breaks the runtime in one deliberate way (monkeypatching,
inside the test only; production code has no bug switches) and asserts some oracle fails, while
the same scenario passes on the unbroken runtime."""

from __future__ import annotations

import dataclasses
import os

import allure
import pytest

import harness.driver.coordinator as coordinator
import harness.driver.jobmaster as jobmaster
import harness.job.sinks as sinks
import harness.tasks as tasks
import reference_impl.checkpoint.storage as storage
import reference_impl.rescale as rescale
import reference_impl.state.heap_backend as heap
from harness.driver.abort_cause import AbortCause
from harness.tasks.barriers import BarrierAligner
from reference_impl.snapshot import TtlValue
from suites.runtime.conftest import failed, fails

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]

CRASHES = [
    {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
    {"at": "checkpoint:5", "kind": "crash_task", "target": "count[0]"},
]
RESCALE = [{"at": "checkpoint:3", "parallelism": {"source": 3, "count": 3}}]


def _sink_commits_at_precommit(mp):
    orig = sinks.TwoPhaseCommitFileSink.pre_commit

    def pre_commit(self, cid):
        state = orig(self, cid)
        self.notify_checkpoint_complete(cid)  # commits before the checkpoint completes
        return state

    mp.setattr(sinks.TwoPhaseCommitFileSink, "pre_commit", pre_commit)


def _alignment_does_not_block(mp):
    mp.setattr(BarrierAligner, "blocked_channels", lambda self: set())


def _restore_skips_last_key_group(mp):
    orig = heap.HeapKeyedStateBackend.restore

    def restore(self, snapshots):
        for s in snapshots:
            s.key_groups.pop(self.key_group_range.end, None)
        orig(self, snapshots)

    mp.setattr(heap.HeapKeyedStateBackend, "restore", restore)


def _split_distribute_drops_remainder(mp):
    orig = rescale.repartition_operator_state

    def repartition(old, new_p):
        out = orig(old, new_p)
        for snap in out:
            for e in snap.states.values():
                if e.mode.value == "SPLIT_DISTRIBUTE" and isinstance(e.value, list) and len(old) != new_p:
                    total = sum(len(o.states[e.name].value) for o in old if e.name in o.states)
                    if len(e.value) > total // new_p:
                        e.value = e.value[: total // new_p]
        return out

    mp.setattr(rescale, "repartition_operator_state", repartition)


def _ttl_timestamps_reset_on_restore(mp):
    orig = heap.HeapKeyedStateBackend.restore

    def restore(self, snapshots):
        now = self.time_provider.now_ms()
        for s in snapshots:
            for per in s.key_groups.values():
                for per_ns in per.values():
                    for keys in per_ns.values():
                        for k, v in keys.items():
                            if isinstance(v, TtlValue) or (isinstance(v, tuple) and len(v) == 2):
                                keys[k] = TtlValue(v[0], now)
        orig(self, snapshots)

    mp.setattr(heap.HeapKeyedStateBackend, "restore", restore)


def _completes_with_an_ack_missing(mp):
    orig = coordinator.CheckpointCoordinator.acknowledge

    def acknowledge(self, cid, op, sub, handle, now, extra=None):
        p = self.pending.get(cid)
        if p is not None and len(p.waiting) == 2 and (op, sub) in p.waiting:
            p.waiting.clear()
            p.waiting.add((op, sub))  # forget the other task's ack
        return orig(self, cid, op, sub, handle, now, extra)

    mp.setattr(coordinator.CheckpointCoordinator, "acknowledge", acknowledge)


def _restore_ignores_metadata_validation(mp):
    def restore_latest(self, job_id):
        report = storage.RestoreReport(None)
        for _, d in self.checkpoint_dirs(job_id):
            if (d / "_metadata").is_file():
                try:
                    report.checkpoint = storage.load_metadata(d)  # no checksum validation of the files
                    return report
                except storage.CheckpointError:
                    continue
        return report

    mp.setattr(storage.FileSystemCheckpointStorage, "restore_latest", restore_latest)


def _source_ignores_restored_offsets(mp):
    orig = tasks.SourceTask.restore

    def restore(self, restored, checkpoint_id=None, path=None):
        orig(self, None, checkpoint_id, path)  # starts every split from the beginning

    mp.setattr(tasks.SourceTask, "restore", restore)


def _sink_restore_forgets_to_commit(mp):
    mp.setattr(
        sinks.TwoPhaseCommitFileSink,
        "_commit_txn",
        lambda self, cid, txn: None if self._open is None and not self.pending else None,
    )


def _sink_restore_commits_everything_pending(mp):
    orig = sinks.TwoPhaseCommitFileSink.restore

    def restore(self, entries, parallelism=1):
        for f in sorted((self.dir / "pending").glob("*.txn")):
            os.replace(f, self.dir / "committed" / f"{f.stem}.jsonl")
        orig(self, entries, parallelism)

    mp.setattr(sinks.TwoPhaseCommitFileSink, "restore", restore)


def _routing_by_python_hash(mp):
    mp.setattr(tasks.Partitioner, "_target", lambda self, key: hash(key) % self.p)


def _checkpoint_ids_restart_at_one(mp):
    orig = jobmaster.JobMaster.new_coordinator

    def new_coordinator(self, graph, notify, now_ms, failpoint=None):
        c = orig(self, graph, notify, now_ms, failpoint)
        c.next_id = c.first_id = 1
        return c

    mp.setattr(jobmaster.JobMaster, "new_coordinator", new_coordinator)


def _retention_deletes_the_newest(mp):
    def retain(self, job_id, n):
        completed = self.list_checkpoints(job_id)
        doomed = completed[n:] if len(completed) > n else []
        for cid in doomed:
            self.discard(job_id, cid)
        return doomed

    mp.setattr(storage.FileSystemCheckpointStorage, "retain", retain)


def _retention_keeps_one_too_many(mp):
    orig = storage.FileSystemCheckpointStorage.retain
    mp.setattr(
        storage.FileSystemCheckpointStorage, "retain", lambda self, job_id, n: orig(self, job_id, n + 1)
    )


def _completion_subsumes_newer_checkpoints(mp):
    orig = coordinator.CheckpointCoordinator._complete

    def _complete(self, p, now_ms):
        for newer in sorted(c for c in self.pending if c > p.checkpoint_id):
            self._abort(newer, now_ms, AbortCause.subsumed(p.checkpoint_id), failure=False)
        orig(self, p, now_ms)

    mp.setattr(coordinator.CheckpointCoordinator, "_complete", _complete)


def _coordinator_exceeds_max_concurrent(mp):
    orig = coordinator.CheckpointCoordinator.tick

    def tick(self, now_ms):
        cfg = self.config
        self.config = dataclasses.replace(cfg, max_concurrent=cfg.max_concurrent + 1)
        try:
            return orig(self, now_ms)
        finally:
            self.config = cfg

    mp.setattr(coordinator.CheckpointCoordinator, "tick", tick)


def _abort_does_not_release_alignment(mp):
    def notify_checkpoint_aborted(self, checkpoint_id):
        self._forward_cancellations()  # forgets to cancel its own alignment

    mp.setattr(tasks.StreamTask, "notify_checkpoint_aborted", notify_checkpoint_aborted)


def _ttl_expires_one_ms_late(mp):
    import reference_impl.state.handles as handles
    import reference_impl.ttl as ttl

    def late(ts, ttl_ms, now):  # off by one: still alive at last write + ttl
        return ttl.expiration_timestamp(ts, ttl_ms) < now

    for module in (ttl, heap, handles):
        mp.setattr(module, "is_expired", late)


# checkpoints overlap: barriers held back on a channel while the next checkpoint is triggered
# the checks of BASE but those judging restores: these scenarios restore nothing (unknown)
NO_RESTORE_CHECKS = ["exactly_once", "sequence", "checkpoint_integrity", "liveness"]
CONCURRENT = {
    "checks": NO_RESTORE_CHECKS,
    "checkpoint": {"interval_ms": 20, "max_concurrent": 3, "retained": 2},
    "faults": [
        {"at": f"checkpoint:{n}", "kind": "delay_barrier", "channel": "source[0]->count[1]", "delay_ms": 50}
        for n in (1, 3, 5)
    ],
}
# checkpoint 2 expires while count[1] waits for a barrier held back on one of its channels
EXPIRY = {
    "checks": NO_RESTORE_CHECKS,
    "records": 30_000,  # the sources are still running when the delayed barrier is due
    "checkpoint": {
        "interval_ms": 40,
        "timeout_ms": 60,
        "min_pause_ms": 200,
        "tolerable_failures": 5,
        "retained": 2,
    },
    "faults": [
        {"at": "checkpoint:1", "kind": "delay_barrier", "channel": "source[0]->count[1]", "delay_ms": 400}
    ],
}

# new checks of the coordinator's contract: each variant must be caught by exactly this check
ONLY = {
    "retention keeps one checkpoint too many": "checkpoint_integrity",
    "a completed checkpoint subsumes newer pending ones": "checkpoint_integrity",
    "an abort leaves the subtask blocked in alignment": "liveness",
    "the coordinator exceeds max_concurrent": "checkpoint_integrity",
    "TTL state still visible at the expiry instant": "ttl",
}

VARIANTS = {
    "sink commits before the checkpoint completes": (
        _sink_commits_at_precommit,
        {
            "checks": NO_RESTORE_CHECKS,  # the crash comes before any checkpoint completed
            "faults": [
                {
                    "at": {"failpoint": "after_snapshot_before_ack"},
                    "kind": "failpoint",
                    "action": "crash",
                    "target": "count[1]",
                }
            ]
        },
    ),
    "alignment does not block a channel": (
        _alignment_does_not_block,
        {
            "faults": [
                {
                    "at": "checkpoint:1",
                    "kind": "delay_barrier",
                    "channel": "source[0]->count[1]",
                    "delay_ms": 30,
                },
                {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
            ]
        },
    ),
    "restore skips the last key group of a range": (
        _restore_skips_last_key_group,
        {"keys": 300, "faults": CRASHES},
    ),
    "split-distribute drops the remainder": (
        _split_distribute_drops_remainder,
        {"keys": 41, "rescale": RESCALE},
    ),
    "TTL timestamps reset on restore": (
        _ttl_timestamps_reset_on_restore,
        {
            "job": "ttl_verify",
            "job_options": {"ttl_ms": 60},
            "faults": CRASHES,
            "checks": ["ttl", "restored_state", "exactly_once"],
        },
    ),
    "coordinator completes with an ack missing": (_completes_with_an_ack_missing, {"faults": CRASHES}),
    "restore trusts _metadata without validating files": (
        _restore_ignores_metadata_validation,
        {
            "checkpoint": {"interval_ms": 40, "retained": 3},
            "faults": [
                {"at": "checkpoint:3", "kind": "storage", "mode": "corrupt"},
                {"at": "checkpoint:3", "kind": "crash_task", "target": "count[0]"},
            ],
            "seed": 4,
        },
    ),
    "source ignores restored offsets": (_source_ignores_restored_offsets, {"faults": CRASHES}),
    "sink never commits transactions": (_sink_restore_forgets_to_commit, {}),
    "sink restore commits uncompleted transactions": (
        _sink_restore_commits_everything_pending,
        {
            "faults": [
                {
                    "at": {"failpoint": "after_snapshot_before_ack"},
                    "kind": "failpoint",
                    "action": "crash",
                    "target": "count[1]",
                }
            ]
            + CRASHES
        },
    ),
    "routing by Python's hash instead of key groups": (_routing_by_python_hash, {}),
    "checkpoint ids restart at 1 after a failover": (_checkpoint_ids_restart_at_one, {"faults": CRASHES}),
    "retention deletes the newest checkpoints": (_retention_deletes_the_newest, {"faults": CRASHES}),
    "retention keeps one checkpoint too many": (_retention_keeps_one_too_many, {"faults": CRASHES}),
    "a completed checkpoint subsumes newer pending ones": (
        _completion_subsumes_newer_checkpoints,
        CONCURRENT,
    ),
    "an abort leaves the subtask blocked in alignment": (_abort_does_not_release_alignment, EXPIRY),
    # reads exactly at the expiry instant (scenarios/ttl-expiry-instant-sim.yaml's shape)
    "TTL state still visible at the expiry instant": (
        _ttl_expires_one_ms_late,
        {
            "job": "ttl_verify",
            "job_options": {"ttl_ms": 4},
            "keys": 40,
            "checks": ["ttl", "exactly_once"],
            "sim": {"tick_ms": 1},  # the clock visits every millisecond: reads land on the expiry instant
        },
    ),
    "the coordinator exceeds max_concurrent": (
        _coordinator_exceeds_max_concurrent,
        {**CONCURRENT, "checkpoint": {"interval_ms": 20, "max_concurrent": 1, "retained": 2}},
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_broken_runtime_is_caught(sim_run, monkeypatch, name):
    breaker, overrides = VARIANTS[name]
    healthy = sim_run(**overrides)
    assert failed(healthy) == set(), f"the scenario must pass on the correct runtime: {healthy.verdicts}"
    breaker(monkeypatch)
    broken = sim_run(**overrides)
    caught = fails(broken)
    allure.dynamic.parameter("caught by", ", ".join(sorted(caught)) or "nothing")
    assert caught, f"no oracle caught: {name}"
    if name in ONLY:
        assert caught == {ONLY[name]}, f"{name}: caught by {caught}, expected only {ONLY[name]}"
        why = next(v for v in broken.verdicts if v["oracle"] == ONLY[name])
        allure.attach("\n".join([why["summary"], *why["details"]]), "evidence", allure.attachment_type.TEXT)
