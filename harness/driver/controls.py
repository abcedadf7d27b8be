"""The contract between an executor and the chaos layer, in both directions.

:class:`ExecutorControls` is what fault injectors may do to a running job; every executor offers it
with the same semantics (checked by ``suites/runtime/test_messages_and_controls.py`` on sim and by the
Spark executor tests on Spark); :class:`InbandControls` is what in-band faults add on Spark.
:class:`FaultPlan` is what an executor is given as a constructor argument (``chaos.schedule.NemesisPlan``)
and starts on itself; :class:`FaultScheduler` is what it tells the started scheduler (``chaos.schedule.Nemesis``).

Adding a control is one method on :class:`ExecutorControls` and its implementation in
``harness.driver.core.Driver`` (validation and what is remembered across restarts) plus, per executor, how
it reaches the tasks (``_crash``, ``_skew``, ... on ``SimExecutor`` and ``SparkExecutor``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.events import Emit

__all__ = ["ExecutorControls", "InbandControls", "ProcessHandles", "FaultPlan", "FaultScheduler", "Emit"]


@runtime_checkable
class ProcessHandles(Protocol):
    """The processes a run started on this host (Spark executors and their Python workers)."""

    def executor_pids(self) -> dict[str, int]:
        """Executor id -> pid of each live executor process of this run visible on this host."""
        ...

    def python_worker_pids(self) -> dict[str, list[int]]:
        """Executor id -> pids of its Python workers."""
        ...


@runtime_checkable
class ExecutorControls(Protocol):
    """What a fault injector may do to a running job. Names are subtask names (``count[1]``) and
    channel names (``source[0]->count[1]``) of the current deployment; an unknown name raises
    ``ValueError`` (the injector records the fault as not injected) on every executor."""

    def task_names(self) -> list[str]:
        """The subtasks of the current deployment, in deployment order (sources first)."""
        ...

    def channel_names(self) -> list[str]:
        """The data channels of the current deployment, sorted."""
        ...

    def crash(self, target: str | None = None) -> None:
        """Fail subtask ``target`` (None: every subtask) at its next step; the job fails over (one
        failover region) and restores from the newest intact checkpoint."""
        ...

    def delay_next_barrier(self, channel: str, delay_ms: int) -> None:
        """Hold the next checkpoint barrier written to ``channel`` (and what follows it) for ``delay_ms``."""
        ...

    def skew_clock(self, target: str, skew_ms: int) -> None:
        """Shift ``target``'s processing time by ``skew_ms`` (0 heals); survives restarts."""
        ...

    def storage_gate(self, mode: str | None, delay_ms: int = 0) -> None:
        """Checkpoint writes become ``slow`` (by ``delay_ms``), ``unavailable`` or ``full``; None heals.
        Survives restarts."""
        ...

    def latest_checkpoint_dir(self) -> Path | None:
        """The newest completed checkpoint's directory (storage faults damage its files)."""
        ...

    def processes(self) -> ProcessHandles | None:
        """The run's processes on this host, for process faults; None on an executor without any
        (sim: every subtask is in this process)."""
        ...


@runtime_checkable
class InbandControls(Protocol):
    """What faults the tasks act out themselves (in band) need, on an executor whose tasks run in other
    processes, possibly on other hosts (Spark): a control message to one task, and where each task runs
    (``harness.spark.inband_control.InbandFaults``: its executor, as the task reported). The sim offers
    neither: its subtasks all run in the driver's process, where the controls above reach them."""

    inband: Any

    def tell(self, task: str, msg: Any) -> bool:
        """Send the control message ``msg`` (``harness.driver.messages``) to ``task``; False when it is not
        connected (it gets the run's in-band state when it is deployed again)."""
        ...


class FaultPlan(Protocol):
    """What an executor is given: the run's planned faults. The executor records them in its
    ``run_start`` (``planned``) and, when it is constructed, starts them on its controls and its
    history's ``emit`` (FoundationDB's workload setup/start): the scheduler it gets back is whole."""

    def planned(self) -> list[dict[str, Any]]:
        """Each planned fault's id, kind and trigger (``harness.oracles.fault_schedule.planned_fault``)."""
        ...

    def start(self, controls: ExecutorControls, emit: Emit) -> FaultScheduler: ...


class FaultScheduler(Protocol):
    """What an executor tells the started fault scheduler while it runs."""

    def on_time(self, now_ms: int) -> None: ...

    def on_records(self, total_records: int) -> None: ...

    def on_checkpoint_completed(self, checkpoint_id: int) -> None: ...

    def on_failpoint(self, name: str, target: str | None = None) -> Any:
        """What to do at a failpoint: None, or an object with ``action`` ("crash"|"delay"|"drop") and ``delay_ms``."""
        ...

    def awaiting(self, kinds: tuple[str, ...]) -> list[str]:
        """Planned triggers of ``kinds`` not reached yet (the end-of-input gate waits for them)."""
        ...

    def holding(self) -> list[str]:
        """The planned pauses active now: faults with a duration that may hold tasks while they last
        (``holds_tasks``); the stall watch does not count their time."""
        ...

    def heal_all(self) -> None: ...
