"""What every subtask has: its place in the job (operator, index, key-group range), its operator
state, its record counts, and its failpoints. ``SourceTask`` and ``StreamTask`` build on it."""

from __future__ import annotations

from typing import Any

from harness.events import Restore
from harness.job import task_name
from harness.run_store import RunStore
from harness.tasks.task_env import TaskEnv
from reference_impl.checkpoint.format import encode_subtask_state
from reference_impl.keygroups import (
    compute_key_group_range_for_operator_index,
)
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.rescale import RestoredSubtask
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = ["TaskBase"]


class TaskBase:
    operator: str

    def __init__(self, env: TaskEnv, operator: str, subtask: int, parallelism: int) -> None:
        self.env = env
        self.operator = operator
        self.subtask = subtask
        self.parallelism = parallelism
        self.max_p = env.graph.max_parallelism
        self.name = task_name(operator, subtask)
        self.key_group_range = compute_key_group_range_for_operator_index(self.max_p, parallelism, subtask)
        self.op_state = OperatorStateBackend()
        self.records_in = 0
        self.records_out = 0
        self.timers_fired: dict[str, int] = {}  # per time domain: evidence of what the run exercised
        self.keyed: Any = None  # the keyed state backend, for keyed stages

    def _hit(self, failpoint: str) -> bool:
        """True: the failpoint's action drops what follows it (``Failpoints.hit``)."""
        return self.env.failpoints.hit(failpoint, self.name)

    def _restore_state(self, restored: RestoredSubtask | None) -> None:
        self._hit("during_restore")
        if restored is not None:
            if self.keyed is not None:
                self.keyed.restore(restored.keyed)
            self.op_state.restore(restored.operator)

    def _subtask_snapshot(self, keyed: bool = True, shared: bool = False) -> SubtaskStateSnapshot:
        """Keyed (if any, and if asked) and operator state of this subtask, as checkpoints and restored
        files hold it. ``shared``: for a snapshot encoded before the task touches state again, keyed
        values are not copied (``HeapKeyedStateBackend.snapshot``)."""
        return SubtaskStateSnapshot(
            self.operator,
            self.subtask,
            self.parallelism,
            self.max_p,
            keyed=None if self.keyed is None or not keyed else self.keyed.snapshot(shared=shared),
            operator=self.op_state.snapshot(),
        )

    @property
    def _incremental(self) -> bool:
        return self.keyed is not None and self.env.graph.state_backend.incremental

    def _checkpoint_snapshot(self) -> SubtaskStateSnapshot:
        """What a checkpoint writes: with incremental checkpoints the keyed part is written from the
        backend itself (only changed key groups) when the snapshot is persisted. It is written
        synchronously, before the task processes anything else (``_write_and_ack``), so its keyed
        values are the live ones, not copies."""
        return self._subtask_snapshot(keyed=not self._incremental, shared=True)

    def _write_restored_file(self, checkpoint_id: int | None, path: str | None) -> None:
        """Record what this subtask actually holds after restore: the restored-state oracle compares it
        with the checkpoint (read independently) and with a sequential model."""
        d = RunStore(self.env.run_dir).restored
        d.mkdir(parents=True, exist_ok=True)
        fname = f"a{self.env.attempt:04d}-{self.operator}-{self.subtask}.state"
        (d / fname).write_bytes(encode_subtask_state(self._subtask_snapshot(shared=True)))
        self.env.emit(
            Restore(
                checkpoint_id=checkpoint_id,
                path=path,
                attempt=self.env.attempt,
                operator=self.operator,
                subtask=self.subtask,
                parallelism=self.parallelism,
                key_group_range=[self.key_group_range.start, self.key_group_range.end],
                restored_state_file=f"restored/{fname}",
                **self._restore_event_extra(),
            )
        )

    def _restore_event_extra(self) -> dict[str, Any]:
        return {}

    def _write_and_ack(
        self, checkpoint_id: int, snap: SubtaskStateSnapshot, extra: dict[str, Any] | None
    ) -> None:
        try:
            if self._incremental:
                handle = self.keyed.checkpoint_incremental(
                    self.env.storage,
                    self.env.job_id,
                    checkpoint_id,
                    self.operator,
                    self.subtask,
                    self.parallelism,
                    snap.operator,
                ).handle
                self._write_witness(checkpoint_id)
            else:
                handle = self.env.storage.write_subtask_state(self.env.job_id, checkpoint_id, snap)
        except OSError as e:  # storage unavailable or full: this checkpoint cannot complete
            self.env.gateway.decline(checkpoint_id, self.operator, self.subtask, f"state write failed: {e}")
            return
        self._hit("after_snapshot_before_ack")
        self.env.gateway.ack(checkpoint_id, self.operator, self.subtask, handle, extra)

    def _write_witness(self, checkpoint_id: int) -> None:
        """When the run asks for it (``RunStore.witnesses`` exists), the keyed backend's full snapshot
        at this barrier, taken after the incremental write (so a write the delta missed is still in
        the backend): ``checkpoint_state`` compares the checkpoint's delta chains with it, which a
        job whose state depends on interleaving has no model for."""
        d = RunStore(self.env.run_dir).witnesses
        if not d.is_dir():
            return
        keyed = self.keyed.snapshot()
        snap = SubtaskStateSnapshot(self.operator, self.subtask, self.parallelism, self.max_p, keyed, None)
        (d / f"c{checkpoint_id:08d}-{self.operator}-{self.subtask}.state").write_bytes(
            encode_subtask_state(snap)
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass

    def close(self) -> None:
        pass
