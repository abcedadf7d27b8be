"""What a subtask reaches the outside through (:class:`TaskEnv`): checkpoint storage, the
coordinator gateway, the output writer, the history, the failpoints. Each executor provides them its
own way (in-memory on sim, sockets on Spark); the task code never knows which."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.events import Emit
from harness.job import JobGraph
from harness.tasks.failpoints import Failpoints
from reference_impl.checkpoint import StateFileHandle
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.time import TimeProvider

__all__ = ["CheckpointWriter", "CoordinatorGateway", "OutputWriter", "TaskEnv", "Emit"]



class CheckpointWriter(Protocol):
    def write_subtask_state(
        self, job_id: str, checkpoint_id: int, state: SubtaskStateSnapshot
    ) -> StateFileHandle: ...


class CoordinatorGateway(Protocol):
    def ack(
        self,
        checkpoint_id: int,
        operator: str,
        subtask: int,
        handle: StateFileHandle | None,
        extra: dict[str, Any] | None = None,
    ) -> None: ...

    def decline(self, checkpoint_id: int, operator: str, subtask: int, reason: str) -> None: ...


class OutputWriter(Protocol):
    """Output channels of one subtask, one per downstream subtask; control items go to all."""

    def send_records(self, target: int, records: list[Any]) -> None:
        """Records for downstream subtask ``target``, in order (one call per batch, not per record)."""

    def broadcast(self, item: Any) -> None: ...


@dataclass
class TaskEnv:
    job_id: str
    attempt: int
    graph: JobGraph
    storage: CheckpointWriter
    gateway: CoordinatorGateway
    clock: TimeProvider
    emit: Emit
    failpoints: Failpoints
    run_dir: Path
    output: OutputWriter | None = None
    durable: bool = True  # fsync what the sink writes (the sim's crashes are never of the machine)
