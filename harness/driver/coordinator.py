"""The checkpoint coordinator, with Flink's semantics and defaults.

Executor-agnostic: time comes from the caller (``tick(now_ms)``), tasks are reached through a
``notify`` callback, and every decision is appended to the history through ``emit`` — so the
simulator drives it step by step and a Spark driver drives it from its network thread alike.

Flink's rules kept here: ids start at 1 and only grow; at most ``max_concurrent`` pending
checkpoints [1]; ``min_pause_ms`` between the end of one checkpoint and the next trigger [0]; a
checkpoint older than ``timeout_ms`` expires [10 min]; a decline aborts it; a completed checkpoint
subsumes older pending ones; more than ``tolerable_failures`` consecutive failures [0] fail the job;
``retained`` completed checkpoints are kept [1]. ``_metadata`` is written (by the storage) before
tasks are told a checkpoint completed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.driver.abort_cause import AbortCause, AbortReason
from harness.events import (
    CheckpointAborted,
    CheckpointAcked,
    CheckpointCompleted,
    CheckpointDeclined,
    CheckpointTriggered,
    Emit,
)
from reference_impl.checkpoint import FileSystemCheckpointStorage, StateFileHandle

__all__ = ["CheckpointConfig", "PendingCheckpoint", "CheckpointCoordinator", "JobFailedError"]


class JobFailedError(RuntimeError):
    """Too many consecutive checkpoint failures: the job must restart from the latest checkpoint."""


@dataclass(frozen=True)
class CheckpointConfig:
    interval_ms: int
    timeout_ms: int = 600_000
    max_concurrent: int = 1
    min_pause_ms: int = 0
    tolerable_failures: int = 0
    retained: int = 1

    def __post_init__(self) -> None:
        for name in ("interval_ms", "timeout_ms", "max_concurrent", "retained"):
            if getattr(self, name) < 1:
                raise ValueError(f"checkpoint {name} must be >= 1, got {getattr(self, name)}")
        if self.min_pause_ms < 0 or self.tolerable_failures < 0:
            raise ValueError("min_pause_ms and tolerable_failures must be >= 0")


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    trigger_ms: int
    waiting: set[tuple[str, int]]
    handles: list[StateFileHandle] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    kind: str = "checkpoint"  # or "savepoint"


Notify = Callable[[str, int], None]  # ("trigger" | "complete" | "abort", checkpoint_id)


class CheckpointCoordinator:
    """Triggers, collects acknowledgements, completes, aborts and retains checkpoints of one job."""

    def __init__(
        self,
        job_id: str,
        config: CheckpointConfig,
        tasks: list[tuple[str, int]],
        operators: dict[str, dict[str, Any]],
        storage: FileSystemCheckpointStorage,
        notify: Notify,
        emit: Emit,
        first_checkpoint_id: int = 1,
        failpoint: Callable[[str], None] | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("a coordinator needs at least one task to acknowledge checkpoints")
        self.job_id = job_id
        self.config = config
        self.tasks = set(tasks)
        self.operators = operators
        self.storage = storage
        self.notify = notify
        self.emit = emit
        self.next_id = first_checkpoint_id
        self.failpoint = failpoint or (lambda name: None)
        self.first_id = first_checkpoint_id
        self._done: set[int] = set()  # ids this coordinator completed (even if retention removed them)
        self.pending: dict[int, PendingCheckpoint] = {}
        self.completed: list[int] = []
        self.consecutive_failures = 0
        self.last_trigger_ms: int | None = None
        self.last_end_ms: int | None = None

    # ------------------------------------------------------------------ time

    def tick(self, now_ms: int) -> int | None:
        """Expire timed-out checkpoints, then trigger a new one if interval, pause and concurrency allow.
        Returns the id of a checkpoint triggered now, if any."""
        for cid, p in sorted(self.pending.items()):
            if now_ms - p.trigger_ms >= self.config.timeout_ms:
                self._abort(cid, now_ms, AbortCause(AbortReason.CHECKPOINT_EXPIRED), failure=True)
        if len(self.pending) >= self.config.max_concurrent:
            return None
        if self.last_trigger_ms is not None and now_ms - self.last_trigger_ms < self.config.interval_ms:
            return None
        if self.last_end_ms is not None and now_ms - self.last_end_ms < self.config.min_pause_ms:
            return None
        return self.trigger(now_ms)

    def trigger(self, now_ms: int, kind: str = "checkpoint") -> int:
        """Start checkpoint ``next_id`` now (sources inject its barrier when told). A savepoint is a
        checkpoint the user asked for (e.g. to rescale); it ignores the interval and concurrency."""
        cid = self.next_id
        self.next_id += 1
        self.pending[cid] = PendingCheckpoint(cid, now_ms, set(self.tasks), kind=kind)
        self.last_trigger_ms = now_ms
        self.emit(CheckpointTriggered(checkpoint_id=cid, kind=kind))
        self.notify("trigger", cid)
        return cid

    # ------------------------------------------------------------------ task messages

    def acknowledge(
        self,
        checkpoint_id: int,
        operator: str,
        subtask: int,
        handle: StateFileHandle | None,
        now_ms: int,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """A task snapshotted its state for ``checkpoint_id``. Returns True if this completed it.
        Acks for unknown (aborted, subsumed) checkpoints are ignored, as in Flink."""
        p = self.pending.get(checkpoint_id)
        task = (operator, subtask)
        if p is None or task not in p.waiting:
            if (
                p is None
                and self.first_id <= checkpoint_id < self.next_id
                and checkpoint_id not in self._done
            ):
                # a late ack of an aborted checkpoint: its state file must not outlive it (Flink
                # discards late subtask state the same way)
                self.storage.discard(self.job_id, checkpoint_id)
            return False
        p.waiting.discard(task)
        if handle is not None:
            p.handles.append(handle)
        for k, v in (extra or {}).items():
            if isinstance(v, dict):
                p.extra.setdefault(k, {}).update(v)
            else:
                p.extra[k] = v
        self.emit(CheckpointAcked(checkpoint_id=checkpoint_id, operator=operator, subtask=subtask))
        if not p.waiting:
            self._complete(p, now_ms)
            return True
        return False

    def decline(self, checkpoint_id: int, operator: str, subtask: int, reason: str, now_ms: int) -> None:
        """A task could not take the checkpoint: abort it (a failure for the tolerable count)."""
        if checkpoint_id not in self.pending:
            return
        self.emit(CheckpointDeclined(checkpoint_id=checkpoint_id, operator=operator, subtask=subtask, reason=reason))
        self._abort(checkpoint_id, now_ms, AbortCause.declined(operator, subtask, reason), failure=True)

    # ------------------------------------------------------------------ completion and abort

    def _complete(self, p: PendingCheckpoint, now_ms: int) -> None:
        del self.pending[p.checkpoint_id]
        chk = self.storage.finalize_checkpoint(
            self.job_id,
            p.checkpoint_id,
            p.handles,
            self.operators,
            extra=p.extra,
            timestamp_ms=now_ms,
            kind=p.kind,
        )
        self.completed.append(p.checkpoint_id)
        self._done.add(p.checkpoint_id)
        self.consecutive_failures = 0
        self.last_end_ms = now_ms
        self.emit(
            CheckpointCompleted(
                checkpoint_id=p.checkpoint_id,
                path=str(chk.directory.relative_to(self.storage.root)),
                source_offsets=p.extra.get("source_offsets", {}),
                kind=p.kind,
            )
        )
        # the checkpoint exists from here on; a crash now must still commit its sink transactions
        self.failpoint("between_metadata_and_commit")
        for older in sorted(cid for cid in self.pending if cid < p.checkpoint_id):
            self._abort(older, now_ms, AbortCause.subsumed(p.checkpoint_id), failure=False)
        for gone in self.storage.retain(self.job_id, self.config.retained):
            if gone in self.completed:
                self.completed.remove(gone)
        self.notify("complete", p.checkpoint_id)

    def abort_all(self, now_ms: int, reason: str) -> None:
        """Abort every pending checkpoint (the job is restarting); not counted as failures."""
        for cid in sorted(self.pending):
            self._abort(cid, now_ms, AbortCause(AbortReason.COORDINATOR_SUSPEND, detail=reason), failure=False, notify=False)

    def _abort(
        self, checkpoint_id: int, now_ms: int, cause: AbortCause, failure: bool, notify: bool = True
    ) -> None:
        self.pending.pop(checkpoint_id, None)
        self.storage.discard(self.job_id, checkpoint_id)
        self.last_end_ms = now_ms
        self.emit(CheckpointAborted.of(checkpoint_id, cause))
        if notify:
            self.notify("abort", checkpoint_id)
        if failure:
            self.consecutive_failures += 1
            if self.consecutive_failures > self.config.tolerable_failures:
                raise JobFailedError(
                    f"{self.consecutive_failures} consecutive checkpoint failure(s) exceed the tolerable "
                    f"{self.config.tolerable_failures} (last: checkpoint {checkpoint_id} {cause.text})"
                )
