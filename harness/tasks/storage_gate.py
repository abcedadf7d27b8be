"""Checkpoint storage as tasks see it, with a gate the chaos layer can close: ``slow`` (each state
write waits), ``unavailable`` (writes fail with EIO) or ``full`` (writes fail with ENOSPC). A failed
write makes the task decline the checkpoint, as a failed async snapshot does in Flink."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

from reference_impl.checkpoint import FileSystemCheckpointStorage, StateFileHandle
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = ["GatedStorage", "STORAGE_MODES"]

STORAGE_MODES = ("slow", "unavailable", "full")


class GatedStorage:
    def __init__(
        self, storage: FileSystemCheckpointStorage, sleep: Callable[[int], None] | None = None
    ) -> None:
        self.storage = storage
        self.sleep = sleep or (lambda ms: None)
        self.mode: str | None = None
        self.delay_ms = 0

    def set(self, mode: str | None, delay_ms: int = 0) -> None:
        if mode is not None and mode not in STORAGE_MODES:
            raise ValueError(
                f"unknown storage gate mode {mode!r}; expected one of {', '.join(STORAGE_MODES)}"
            )
        self.mode, self.delay_ms = mode, int(delay_ms)

    def _gate(self) -> None:
        if self.mode == "unavailable":
            raise OSError(errno.EIO, "checkpoint storage unavailable (injected)")
        if self.mode == "full":
            raise OSError(errno.ENOSPC, "no space left on checkpoint storage (injected)")
        if self.mode == "slow" and self.delay_ms:
            self.sleep(self.delay_ms)

    def write_subtask_state(
        self, job_id: str, checkpoint_id: int, state: SubtaskStateSnapshot
    ) -> StateFileHandle:
        self._gate()
        return self.storage.write_subtask_state(job_id, checkpoint_id, state)

    def write_shared_file(self, job_id: str, name: str, data: bytes) -> int:
        """A shared file of an incremental checkpoint: gated like every state write."""
        self._gate()
        return self.storage.write_shared_file(job_id, name, data)

    def write_subtask_file(
        self, job_id: str, checkpoint_id: int, operator_id: str, subtask_index: int, data: bytes
    ) -> StateFileHandle:
        return self.storage.write_subtask_file(job_id, checkpoint_id, operator_id, subtask_index, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)
