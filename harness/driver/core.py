"""The driver core every executor shares: the checkpoint coordinator of each attempt and what its
notifications set off, the rescale schedule, the end-of-input gate and the final checkpoint, restarts
counted against the budget, the chaos controls (validated, and remembered across restarts), the fault
scheduler's observations, and the run's first and last history events.

An executor subclasses :class:`Driver` and keeps only how its tasks run and how they are reached:
``SimExecutor`` (``harness.sim.executor``) steps them in this process under simulated time; ``SparkExecutor``
(``harness.spark.executor``) runs them as a Spark barrier stage and reaches them over coordinator links
(``harness.driver.messages``). The hooks it implements are the ``_``-methods below that raise
``NotImplementedError``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, ClassVar

from harness.driver.controls import ExecutorControls, FaultPlan, FaultScheduler, ProcessHandles
from harness.driver.coordinator import CheckpointConfig, CheckpointCoordinator
from harness.driver.input_gate import EndOfInputGate, hold_limit_ms
from harness.driver.jobmaster import JobFailure, JobMaster, RescaleRequest, RescaleSchedule, RunSummary
from harness.driver.user_code import UserFrame
from harness.events import RunStalled, RunStart
from harness.history import HistoryWriter
from harness.job import JobGraph, task_name
from harness.job.job_graph import ChannelName
from harness.progress import Stalled

__all__ = ["Driver"]


class Driver(ExecutorControls):
    """One run of one job graph: ``run()`` drives it to completion (or failure) and always writes
    ``run_end``. ``faults`` (the chaos layer's plan, or None) is started on this driver's controls."""

    EXECUTOR: ClassVar[str] = ""  # the executor's name in ``run_start``
    SIMULATED: ClassVar[bool] = False  # is the run's time simulated (sim) or wall time?

    def __init__(
        self,
        graph: JobGraph,
        run_dir: Path,
        checkpoint: CheckpointConfig,
        history: HistoryWriter,
        *,
        seed: int,
        faults: FaultPlan | None,
        rescales: list[RescaleRequest] | None,
        max_restarts: int,
        hold_floor_ms: int,
        run_info: dict[str, Any] | None,
        fsync: bool = True,
    ) -> None:
        self.graph = graph  # the current deployment's graph (a rescale replaces it)
        self.run_dir = run_dir
        self.seed = seed
        self.history = history
        self.run_info = run_info or {}
        self.master = JobMaster(graph, run_dir, checkpoint, history, max_restarts=max_restarts, fsync=fsync)
        # the run's plan (fault_schedule judges it), then its faults started on this driver's controls
        self.plan = {"faults": faults.planned() if faults is not None else [], "rescales": len(rescales or [])}
        self.faults: FaultScheduler | None = faults.start(self, history.emit) if faults is not None else None
        self.rescales = RescaleSchedule(list(rescales or []))
        self.gate = EndOfInputGate(
            self.faults, self.rescales, history.emit, hold_limit_ms(checkpoint.interval_ms, hold_floor_ms)
        )
        self.coord: CheckpointCoordinator | None = None
        self.skews: dict[str, int] = {}  # task -> clock skew, applied again to every new attempt
        self.storage_mode: tuple[str | None, int] = (None, 0)
        self.records_emitted = 0
        self.completed = 0
        self.final_after: int | None = None  # a checkpoint with this id or later ends the job
        self.root_cause = ""  # a failed run: the first real error behind it

    # ------------------------------------------------------------------ what each executor implements

    def now_ms(self) -> int:
        raise NotImplementedError

    def _attempts(self) -> int:
        """Deployments so far (the ``attempts`` of ``run_end``)."""
        raise NotImplementedError

    def _drive(self) -> None:
        """Run the job until it is done; raise :class:`JobFailure` when it cannot go on."""
        raise NotImplementedError

    def _trigger_sources(self, checkpoint_id: int, kind: str) -> None:
        raise NotImplementedError

    def _tell_complete(self, checkpoint_id: int) -> None:
        raise NotImplementedError

    def _tell_aborted(self, checkpoint_id: int) -> None:
        raise NotImplementedError

    def _final_checkpoint_done(self) -> None:
        """The final checkpoint completed: the job is done."""
        raise NotImplementedError

    def _crash(self, target: str | None) -> None:
        raise NotImplementedError

    def _delay_barrier(self, channel: str, delay_ms: int) -> None:
        raise NotImplementedError

    def _skew(self, target: str, skew_ms: int) -> None:
        raise NotImplementedError

    def _gate_storage(self, mode: str | None, delay_ms: int) -> None:
        raise NotImplementedError

    def _close_tasks(self) -> None:
        """After the attempt's coordinator retired: release what its tasks hold (default: nothing)."""

    def _shutdown(self) -> None:
        """After the last attempt: release what the run holds (links, servers; default: nothing)."""

    # ------------------------------------------------------------------ the chaos controls

    def task_names(self) -> list[str]:
        return [task_name(op, i) for op, i, _ in self.graph.subtasks()]

    def channel_names(self) -> list[str]:
        return sorted(str(ChannelName(u, d)) for u, d in self.graph.channels())

    def _check_task(self, target: str) -> None:
        if target not in self.task_names():
            raise ValueError(f"no subtask {target!r} (running: {', '.join(self.task_names())})")

    def crash(self, target: str | None = None) -> None:
        if target is not None:
            self._check_task(target)
        self._crash(target)

    def delay_next_barrier(self, channel: str, delay_ms: int) -> None:
        if channel not in self.channel_names():
            raise ValueError(f"no channel {channel!r} (channels: {', '.join(self.channel_names())})")
        self._delay_barrier(channel, int(delay_ms))

    def skew_clock(self, target: str, skew_ms: int) -> None:
        self._check_task(target)
        self.skews[target] = int(skew_ms)
        self._skew(target, int(skew_ms))

    def storage_gate(self, mode: str | None, delay_ms: int = 0) -> None:
        self.storage_mode = (mode, int(delay_ms))
        self._gate_storage(mode, int(delay_ms))

    def latest_checkpoint_dir(self) -> Path | None:
        return self.master.latest_checkpoint_dir()

    def processes(self) -> ProcessHandles | None:
        return None

    # ------------------------------------------------------------------ observations and notifications

    def _notify(self, what: str, checkpoint_id: int) -> None:
        """The coordinator's callback: a checkpoint was triggered, completed or aborted."""
        if what == "trigger":
            kind = self.coord.pending[checkpoint_id].kind if self.coord else "checkpoint"
            self._trigger_sources(checkpoint_id, kind)
        elif what == "complete":
            self.completed += 1
            self.master.keep_completed(checkpoint_id)
            # a rescale's savepoint is complete once stored, before its notices reach the tasks: a
            # task failing on its notice (a sink's commit) then finds the rescale ready, as Flink's
            # stop-with-savepoint completes with the savepoint and a failure after it restarts the job
            self.rescales.on_completed(checkpoint_id)
            self._tell_complete(checkpoint_id)
            if self.faults is not None:
                self.faults.on_checkpoint_completed(checkpoint_id)
            self.rescales.check(self.now_ms(), self.records_emitted, self.coord, checkpoint_id)
            if self.final_after is not None and checkpoint_id >= self.final_after:
                self._final_checkpoint_done()
        elif what == "abort":
            self._tell_aborted(checkpoint_id)
            self.rescales.on_lost(checkpoint_id)

    def _count_records(self, n: int) -> None:
        """The sources emitted ``n`` more records."""
        self.records_emitted += n
        if self.faults is not None:
            self.faults.on_records(self.records_emitted)

    def _observe_time(self, now_ms: int) -> None:
        """Once per step of the driver: faults and rescales due by time or record count act."""
        if self.faults is not None:
            self.faults.on_time(now_ms)
        self.rescales.check(now_ms, self.records_emitted, self.coord)

    def _holding(self) -> list[str]:
        """The planned pauses holding tasks now (the stall watch does not count their time)."""
        return self.faults.holding() if self.faults is not None else []

    def _failpoint_action(self, name: str, target: str | None) -> Any:
        return self.faults.on_failpoint(name, target) if self.faults is not None else None

    @property
    def stopping(self) -> bool:
        """Sources stop while a savepoint for a rescale is pending (stop-with-savepoint)."""
        return self.rescales.savepoint is not None

    def _trigger_final(self, now_ms: int) -> None:
        """End of input has passed every operator (timers fired, their output sent on): a checkpoint
        triggered from now on covers everything, as Flink's final checkpoint (FLIP-147)."""
        assert self.coord is not None
        self.final_after = self.coord.next_id
        if not self.coord.pending:
            self.coord.trigger(now_ms)

    # ------------------------------------------------------------------ attempts

    def _new_coordinator(self, failpoint: Any) -> None:
        self.coord = self.master.new_coordinator(self.graph, self._notify, self.now_ms(), failpoint=failpoint)

    def _retire(self, reason: str) -> None:
        """The attempt ends: abort its pending checkpoints, drop its coordinator, release its tasks. A
        pending stop-with-savepoint fails with it; its rescale is retried once the job runs again
        (``RescaleSchedule.on_attempt_ended``)."""
        self.rescales.on_attempt_ended()
        self.master.retire(self.coord, self.now_ms(), reason)
        self.coord = None
        self._close_tasks()

    def _attempt_lost(self, attempt: int, reason: str | None, frame: UserFrame | None = None) -> None:
        """After ``_retire``: a failure (``reason``, raised in the job's own code at ``frame`` if known)
        counts against the restart budget (:class:`JobFailure` when it is spent, or when the job's code
        fails the same way again)."""
        if reason is not None:
            self.master.failover(attempt, reason, frame)

    def _rescaled(self, req: RescaleRequest) -> JobGraph:
        """Stop the attempt for ``req``; the graph to deploy next."""
        old = self.graph.parallelism()
        graph = self.graph.with_parallelism(req.parallelism)
        self._retire("rescale")
        self.master.record_rescale(old, graph.parallelism(), req.savepoint, req.reason, req.slots)
        return graph

    # ------------------------------------------------------------------ the run

    def _start(self) -> None:
        """The run's first history event."""
        self.history.emit(
            RunStart(
                job=self.graph.name,
                executor=self.EXECUTOR,
                seed=self.seed,
                parallelism=self.graph.parallelism(),
                max_parallelism=self.graph.max_parallelism,
                config=self._run_config(),
                plan=self.plan,
            )
        )

    def _run_config(self) -> dict[str, Any]:
        return self.run_info

    def run(self) -> RunSummary:
        """Run until the bounded job has committed everything, or fails; always writes ``run_end``
        (Ctrl-C or a driver bug end it as ``interrupted`` or ``failed``, never ``finished``)."""
        self._start()
        status, reason = "finished", "all input processed and committed"
        try:
            self._drive()
        except JobFailure as e:
            status, reason = "failed", str(e)
            if isinstance(e, Stalled):  # a finding for the liveness verdict, not a give-up
                self.history.emit(RunStalled(**e.event_fields()))
        except BaseException as e:
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            reason = f"{type(e).__name__}: {e}".rstrip(": ")
            raise
        finally:
            self._end_run(status, reason)
        return RunSummary(
            status,
            reason,
            self._attempts(),
            self.completed,
            self.records_emitted,
            self.now_ms(),
            self.graph.parallelism(),
            simulated=self.SIMULATED,
            root_cause=self.root_cause if status == "failed" else "",
        )

    def _end_run(self, status: str, reason: str) -> None:
        if self.faults is not None:
            with contextlib.suppress(Exception):  # nothing stays paused, cut or gated
                self.faults.heal_all()
        self._retire("run end")
        self._shutdown()
        self.master.end_run(status, reason, self._attempts())
