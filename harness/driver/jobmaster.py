"""What every executor's driver does the same way: where checkpoints live, which checkpoint a
(re)start restores and what each new subtask gets from it, the coordinator of each attempt, and the
restart budget. Executors differ only in how they run tasks and move items between them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.driver.coordinator import CheckpointConfig, CheckpointCoordinator
from harness.driver.user_code import IDENTICAL_FAILURES, YOUR_JOB_RAISED, UserFrame
from harness.events import ABSENT, CheckpointSkipped, JobRestart, Rescale, RunEnd, SinkFence
from harness.history import HistoryWriter
from harness.job import JobGraph
from harness.job.job_errors import JobFailure
from harness.job.sinks import committed_files, write_fence
from harness.run_store import RunStore
from reference_impl.checkpoint import (
    CompletedCheckpoint,
    FileSystemCheckpointStorage,
    NoIntactCheckpointError,
    RestoreReport,
)
from reference_impl.checkpoint.completed import METADATA
from reference_impl.checkpoint.format import referenced_shared_files
from reference_impl.rescale import SubtaskAssignment, assign_state

__all__ = ["RestorePlan", "JobMaster", "JobFailure", "RescaleRequest", "RescaleSchedule", "RunSummary"]


@dataclass
class RescaleRequest:
    """Restart at ``parallelism`` when the trigger is reached (``kind``: checkpoint, time_ms, records)."""

    kind: str
    value: int
    parallelism: dict[str, int] | int
    savepoint: bool = True
    done: bool = False
    reason: str = "scheduled"  # or "adaptive" (harness.driver.adaptive: slots were lost or came back)
    slots: int | None = None  # adaptive: the task slots the new deployment takes

    def due(self, now_ms: int, records: int, checkpoint: int | None = None) -> bool:
        """Has the trigger been reached? ``checkpoint`` is a just-completed checkpoint id, if any."""
        reached = {"time_ms": now_ms, "records": records, "checkpoint": checkpoint}.get(self.kind)
        return not self.done and reached is not None and reached >= self.value


class RescaleSchedule:
    """When and from what a job rescales. A due request with ``savepoint`` triggers a savepoint (the
    executor stops its sources while it is pending) once the job runs (it has a coordinator), and
    becomes ready when the savepoint completes; without one it is ready at once. A rescale is never
    silently dropped:

    - a savepoint aborted while its attempt runs (expired, declined) falls back to the latest
      checkpoint: the request is ready at once;
    - a savepoint lost because its attempt ended (a task failed: the job restarts; adaptive recovery)
      makes the stop-with-savepoint fail, as in Flink: the job restarts from its latest checkpoint and
      the request is due again, so a new savepoint is taken once the restarted job runs (for a
      checkpoint trigger: at its next completed checkpoint), and the rescale restores from that;
    - a savepoint that completed before the failure stays ready: the rescale restores from it.
    """

    def __init__(self, requests: list[RescaleRequest]) -> None:
        self._requests = list(requests)
        self.savepoint: tuple[int, RescaleRequest] | None = None
        self.ready: RescaleRequest | None = None

    def add(self, req: RescaleRequest) -> None:
        """A request the run makes by itself (an adaptive scale-up), after the scenario's."""
        self._requests.append(req)

    def drop(self, reason: str) -> None:
        """Forget every request made for ``reason`` (pending, waiting for its savepoint, or ready)."""
        self._requests = [r for r in self._requests if r.reason != reason]
        if self.ready is not None and self.ready.reason == reason:
            self.ready = None
        if self.savepoint is not None and self.savepoint[1].reason == reason:
            self.savepoint = None

    def pending(self, kinds: tuple[str, ...]) -> list[RescaleRequest]:
        """Requests not acted on yet whose trigger is of one of ``kinds``."""
        return [r for r in self._requests if not r.done and r.kind in kinds]

    @property
    def busy(self) -> bool:
        return self.savepoint is not None or self.ready is not None

    def check(self, now_ms: int, records: int, coord: Any, completed: int | None = None) -> None:
        """Act on requests due now (``completed``: a checkpoint that just completed)."""
        for req in self._requests:
            if self.busy or not req.due(now_ms, records, completed):
                continue
            if req.savepoint and coord is None:  # no running job to take it from (yet): wait for one
                continue
            req.done = True
            if req.savepoint:
                self.savepoint = (coord.trigger(now_ms, kind="savepoint"), req)
            else:
                self.ready = req

    def on_completed(self, checkpoint_id: int) -> None:
        if self.savepoint is not None and self.savepoint[0] == checkpoint_id:
            self.ready, self.savepoint = self.savepoint[1], None

    def on_lost(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was aborted while its attempt runs: if it is the savepoint,
        the rescale falls back to the latest checkpoint."""
        if self.savepoint is not None and self.savepoint[0] == checkpoint_id:
            self.ready, self.savepoint = self.savepoint[1], None

    def on_attempt_ended(self) -> None:
        """The attempt ends (before its coordinator aborts what is pending) with the savepoint still
        pending: it can never complete. Its request is due again, for the next attempt to retry."""
        if self.savepoint is not None:
            self.savepoint[1].done = False
            self.savepoint = None

    def take(self) -> RescaleRequest | None:
        req, self.ready = self.ready, None
        return req


@dataclass
class RunSummary:
    status: str  # finished | failed
    reason: str
    attempts: int
    checkpoints_completed: int
    records_emitted: int
    time_ms: int
    parallelism: dict[str, int] = field(default_factory=dict)
    simulated: bool = True  # time_ms is simulated time (sim) or wall time (Spark)
    root_cause: str = ""  # a failed run: the first real error behind it (e.g. an executor's traceback)

    def to_stats(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "attempts": self.attempts,
            "checkpoints_completed": self.checkpoints_completed,
            "records_emitted": self.records_emitted,
            "sim_time_ms" if self.simulated else "wall_ms": self.time_ms,
            "final_parallelism": self.parallelism,
        } | ({"root_cause": self.root_cause} if self.root_cause else {})


@dataclass
class RestorePlan:
    checkpoint: CompletedCheckpoint | None
    report: RestoreReport
    assignments: dict[tuple[str, int], SubtaskAssignment] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> int | None:
        return None if self.checkpoint is None else self.checkpoint.checkpoint_id

    def path(self, root: Path) -> str | None:
        return None if self.checkpoint is None else str(self.checkpoint.directory.relative_to(root))


class JobMaster:
    """Checkpoint storage, restore planning and coordinators for one run of one job."""

    def __init__(
        self,
        graph: JobGraph,
        run_dir: Path,
        checkpoint: CheckpointConfig,
        history: HistoryWriter,
        keep_restore_evidence: bool = True,
        max_restarts: int = 50,
        fsync: bool = True,
    ) -> None:
        self.job_id = graph.name
        self.run_dir = Path(run_dir)
        self.checkpoint_root = RunStore(self.run_dir).checkpoints
        self.storage = FileSystemCheckpointStorage(self.checkpoint_root, sync=fsync)
        self.config = checkpoint
        self.history = history
        self.keep_restore_evidence = keep_restore_evidence
        self._keep_every = False
        self.next_checkpoint_id = 1
        self.max_restarts = max_restarts
        self.restarts = 0
        self._last_frame: UserFrame | None = None
        self._same_frame_failures = 0

    def plan_restore(self, graph: JobGraph, attempt: int = 0) -> RestorePlan:
        """The newest intact checkpoint (damaged newer ones are skipped and said so in the history) and
        each new subtask's share of it at ``graph``'s parallelism."""
        try:
            report = self.storage.restore_latest(self.job_id)
        except NoIntactCheckpointError as e:
            self._record_skipped(e.report)
            raise JobFailure(f"cannot restore: {e}") from None
        self._record_skipped(report)
        plan = RestorePlan(report.checkpoint, report)
        chk = report.checkpoint
        if chk is None:
            return plan
        self.next_checkpoint_id = max(self.next_checkpoint_id, chk.checkpoint_id + 1)
        if self.keep_restore_evidence:
            self._keep_evidence(chk)
        if report.skipped:
            fenced = write_fence(RunStore(self.run_dir).output, chk.checkpoint_id, attempt)
            if fenced:
                self.history.emit(SinkFence(restored_from=chk.checkpoint_id, txns=fenced, attempt=attempt))
        for op, p in graph.parallelism().items():
            if op not in chk.operators:
                continue  # a new operator starts empty
            info = chk.operators[op]
            if int(info["max_parallelism"]) != graph.max_parallelism:
                raise JobFailure(
                    f"checkpoint {chk.checkpoint_id} of operator {op!r} was taken with max_parallelism="
                    f"{info['max_parallelism']}, the job has {graph.max_parallelism}: max parallelism can "
                    "never change for existing state"
                )
            for a in assign_state(chk, op, p):
                plan.assignments[(op, a.subtask_index)] = a
        return plan

    def _record_skipped(self, report: RestoreReport) -> None:
        for path, why in report.skipped:
            self.history.emit(CheckpointSkipped(path=str(Path(path).relative_to(self.checkpoint_root)), reason=why))

    def _keep_evidence(self, chk: CompletedCheckpoint) -> None:
        """Copy a checkpoint as it was restored, so the restored-state oracle can read it after the run
        even when retention has deleted it (the copy is taken after validation)."""
        self._keep_copy(chk.directory)

    @property
    def keep_every_checkpoint(self) -> bool:
        """Keep a copy of every completed checkpoint (the ``checkpoint_state`` oracle judges them all),
        and have incremental checkpoints' tasks write a full snapshot beside each (``RunStore.witnesses``)."""
        return self._keep_every

    @keep_every_checkpoint.setter
    def keep_every_checkpoint(self, keep: bool) -> None:
        self._keep_every = keep
        if keep:
            RunStore(self.run_dir).witnesses.mkdir(parents=True, exist_ok=True)

    def keep_completed(self, checkpoint_id: int) -> None:
        """Copy a checkpoint as it completed (``keep_every_checkpoint``: the ``checkpoint_state``
        oracle judges every completed checkpoint, also those retention deletes)."""
        if self.keep_every_checkpoint:
            self._keep_copy(self.storage.checkpoint_dir(self.job_id, checkpoint_id))

    def _keep_copy(self, directory: Path) -> None:
        """Hard links where the file system allows (a completed checkpoint's files are never written
        again; a fault that damages one in place first gives it an inode of its own:
        ``chaos.injectors.storage_files``), else copies."""
        dst = RunStore(self.run_dir).restored_from / directory.name
        if not dst.exists():
            shutil.copytree(directory, dst, copy_function=_link_or_copy)
            # an incremental checkpoint's manifests name shared files relative to its directory
            for f in sorted(dst.glob("*.state")):
                for ref in referenced_shared_files(f.read_bytes(), str(f)):
                    target = (dst / ref.path).resolve()
                    if not target.exists():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        _link_or_copy(directory / ref.path, target)

    def new_coordinator(
        self, graph: JobGraph, notify: Any, now_ms: int, failpoint: Any = None
    ) -> CheckpointCoordinator:
        tasks = [(op, i) for op, p in graph.parallelism().items() for i in range(p)]
        operators = {
            op: {"parallelism": p, "max_parallelism": graph.max_parallelism}
            for op, p in graph.parallelism().items()
        }
        known = [n for n, _ in self.storage.checkpoint_dirs(self.job_id)]  # never reuse an id on disk
        first = max([self.next_checkpoint_id, *(k + 1 for k in known)])
        coord = CheckpointCoordinator(
            self.job_id,
            self.config,
            tasks,
            operators,
            self.storage,
            notify,
            self.history.emit,
            first_checkpoint_id=first,
            failpoint=failpoint,
        )
        coord.last_trigger_ms = now_ms  # the first checkpoint comes one interval after (re)start
        return coord

    def retire(self, coord: CheckpointCoordinator | None, now_ms: int, reason: str) -> None:
        """A failed or rescaled attempt: abort its pending checkpoints, remember where ids got to."""
        if coord is None:
            return
        coord.abort_all(now_ms, reason)
        self.next_checkpoint_id = max(self.next_checkpoint_id, coord.next_id)

    def discard_late_state(self, checkpoint_id: int) -> None:
        """A task of a retired deployment acknowledged ``checkpoint_id`` after its coordinator had
        aborted it (Flink discards a late ack's state too): ids are never reused, so that checkpoint
        never completes, and what the task wrote into its directory goes, unless it had completed."""
        d = self.storage.checkpoint_dir(self.job_id, checkpoint_id)
        if d.is_dir() and not (d / METADATA).exists():
            self.storage.discard(self.job_id, checkpoint_id)

    def latest_checkpoint_id(self) -> int | None:
        ids = self.storage.list_checkpoints(self.job_id)
        return ids[-1] if ids else None

    def latest_checkpoint_dir(self) -> Path | None:
        cid = self.latest_checkpoint_id()
        return None if cid is None else self.storage.checkpoint_dir(self.job_id, cid)

    def failover(self, attempt: int, reason: str, frame: UserFrame | None = None) -> None:
        """Count a restart against the budget (JobFailure when it is spent) and record it. A failure
        raised in the job's own code (``frame``) the same way as the ones before it, IDENTICAL_FAILURES
        times in a row, ends the run at once: restarting will not get it further."""
        self.restarts += 1
        same = frame is not None and self._last_frame == frame
        self._same_frame_failures = self._same_frame_failures + 1 if same else int(frame is not None)
        self._last_frame = frame
        if frame is not None and self._same_frame_failures >= IDENTICAL_FAILURES:
            raise JobFailure(
                f"{YOUR_JOB_RAISED} {frame.describe()}, the same on {self._same_frame_failures} attempts in a row"
            )
        if self.restarts > self.max_restarts:
            raise JobFailure(f"gave up after {self.max_restarts} restarts; last failure: {reason}")
        self.history.emit(JobRestart(attempt=attempt, reason=reason, checkpoint_id=self.latest_checkpoint_id()))

    def record_rescale(
        self,
        old: dict[str, int],
        new: dict[str, int],
        savepoint: bool,
        reason: str = "scheduled",
        slots: int | None = None,
    ) -> None:
        """A ``rescale`` event; an adaptive one (``harness.driver.adaptive``) names the task slots it fits."""
        self.history.emit(
            Rescale(
                from_=old,
                to=new,
                checkpoint_id=self.latest_checkpoint_id(),
                savepoint=savepoint,
                reason=reason,
                slots=ABSENT if slots is None else slots,
            )
        )

    def end_run(self, status: str, reason: str, attempts: int) -> None:
        """The last history event, with what the sink committed; closes the history."""
        committed = 0
        for f in committed_files(RunStore(self.run_dir).output):
            with open(f, encoding="utf-8") as fh:
                committed += sum(1 for _ in fh)
        self.history.emit(RunEnd(status=status, reason=reason, records_committed=committed, attempts=attempts))
        self.history.close()


def _link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
