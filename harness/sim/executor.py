"""The ``sim`` executor: every subtask in one process, in-memory channels, a seeded scheduler and a
simulated clock. Interleavings, barrier delays, crashes and rescales are reproducible from the
seed: the same seed gives the same history byte for byte.

Each tick of simulated time the coordinator may trigger a checkpoint, the fault scheduler (the chaos
layer's nemesis) sees the time, and every runnable subtask takes one step in a seeded order: a source
emits a seeded number of records (unless it read more than ``source_drift`` records beyond the
slowest subtask of its source), a keyed subtask consumes items from its unblocked channels. A crash
anywhere restarts the whole job (one failover region, as with Flink's all-to-all keyed edges) from
the newest intact checkpoint after a restart delay; a rescale restarts it at another parallelism from
a savepoint or the latest checkpoint. The task code is ``harness.tasks``, shared with Spark; what every
driver does the same way (coordinator, restarts, rescales, controls) is ``harness.driver.core``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.driver.controls import FaultPlan
from harness.driver.coordinator import CheckpointConfig, JobFailedError
from harness.driver.core import Driver
from harness.driver.jobmaster import JobFailure, RescaleRequest, RestorePlan, RunSummary
from harness.driver.messages import Ack, Decline, Message
from harness.driver.user_code import job_files, user_frame
from harness.events import RecordsIn, RecordsOut, TimersFired
from harness.history import HistoryWriter
from harness.job import JobGraph, task_name
from harness.job.job_graph import ChannelName
from harness.progress import ProgressWatch, Stalled
from harness.run_store import RunStore
from harness.sim.links import SimChannel, SimGateway, SimOutput
from harness.tasks import SourceTask, StreamTask, TaskEnv
from harness.tasks.failpoints import Failpoints, InjectedCrash
from harness.tasks.items import is_control
from harness.tasks.storage_gate import GatedStorage
from reference_impl.rescale import restore_subtask
from reference_impl.time import ManualClock, SkewedClock

__all__ = [  # RescaleRequest and RunSummary re-exported
    "DEFAULT_SOURCE_DRIFT",
    "DEFAULT_TICK_MS",
    "SimConfig",
    "RescaleRequest",
    "SimExecutor",
    "RunSummary",
]


# Simulated milliseconds per scheduler step, i.e. the pace of processing time. A source subtask emits
# 1..16 records a step, so about 1,700 records per second of processing time: 20,000 records on 2
# source subtasks last about 6 s, long enough for a processing-time timer of a few seconds to fire
# (docs/timers-event-time-broadcast.md, "Time on sim"; a scenario sets it as ``sim: {tick_ms: N}``).
DEFAULT_TICK_MS = 5

# Records one source subtask may read ahead of the slowest live subtask of its source before it skips
# its steps (one step's most), so parallel source subtasks progress at similar rates as in Flink and
# the watermark (their minimum) stays close behind; None leaves each subtask's pace independent.
DEFAULT_SOURCE_DRIFT = 16


@dataclass
class SimConfig:
    tick_ms: int = DEFAULT_TICK_MS
    source_batch: int = 16  # a source emits 1..source_batch records per tick
    source_drift: int | None = DEFAULT_SOURCE_DRIFT  # see DEFAULT_SOURCE_DRIFT
    task_budget: int = 256  # items a keyed subtask may consume per tick
    channel_latency_ms: int = 1
    ack_latency_ms: int = 1
    restart_delay_ms: int = 50
    max_restarts: int = 50
    time_limit_ms: int = 600_000
    stats_every_ms: int = 50
    # the run fails its liveness check when nothing progressed for this long (simulated time)
    stall_limit_ms: int = 120_000


def _reason(e: BaseException) -> str:
    if isinstance(e, (InjectedCrash, JobFailedError)):
        return str(e)
    return f"task failure: {type(e).__name__}: {e}"


class SimExecutor(Driver):
    """Runs one job graph to completion (or failure) under simulated time."""

    EXECUTOR = "sim"
    SIMULATED = True

    def __init__(
        self,
        graph: JobGraph,
        run_dir: Path,
        checkpoint: CheckpointConfig,
        seed: int = 0,
        faults: FaultPlan | None = None,
        rescales: list[RescaleRequest] | None = None,
        config: SimConfig | None = None,
        run_info: dict[str, Any] | None = None,
        keyed_backend_factory: Callable[..., Any] | None = None,
    ) -> None:
        graph.validate()
        self.cfg = config or SimConfig()
        self._job_files = job_files(graph)
        self.rng = random.Random(f"statechaos-sim-{seed}")
        self.clock = ManualClock(0)
        run_dir = Path(run_dir)
        super().__init__(
            graph,
            run_dir,
            checkpoint,
            HistoryWriter(RunStore(run_dir).history, self.clock.now_ms),
            seed=seed,
            faults=faults,
            rescales=rescales,
            max_restarts=self.cfg.max_restarts,
            hold_floor_ms=10_000,
            run_info=run_info,
            fsync=False,  # crashes here are of tasks, not of the machine
        )
        self.storage = GatedStorage(self.master.storage, sleep=self._sleep)
        self.failpoints = Failpoints(self.faults, sleep=self._sleep)
        self.keyed_backend_factory = keyed_backend_factory
        self.attempt = -1
        self.tasks: list[Any] = []
        self.sources: list[SourceTask] = []
        self.streams: list[tuple[StreamTask, list[SimChannel]]] = []
        self.channels: dict[str, SimChannel] = {}
        self.stalled: dict[str, int] = {}
        self._read: dict[str, int] = {}  # records each source subtask read in this deployment
        self.crash_requests: list[str | None] = []
        self._inbox: deque[tuple[int, Message]] = deque()
        self._step_delay = 0
        self._current: str | None = None
        self._finished = False
        self._last_stats = 0
        self._reported: dict[str, tuple[int, int]] = {}  # task -> counts already in the history
        self._timers_reported: dict[str, dict[str, int]] = {}  # task -> timers fired, per domain

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def _attempts(self) -> int:
        return self.attempt + 1

    # ------------------------------------------------------------------ how the controls reach the tasks

    def _crash(self, target: str | None) -> None:
        """At the next tick (any subtask's crash fails the whole job over: one failover region)."""
        self.crash_requests.append(target)

    def _delay_barrier(self, channel: str, delay_ms: int) -> None:
        self.channels[channel].barrier_delay_ms = delay_ms

    def _skew(self, target: str, skew_ms: int) -> None:
        for t in self.tasks:
            if t.name == target:
                t.env.clock.skew_ms = skew_ms

    def _gate_storage(self, mode: str | None, delay_ms: int) -> None:
        self.storage.set(mode, delay_ms)

    # ------------------------------------------------------------------ internals

    def _sleep(self, ms: int) -> None:
        """A delay inside a task step: its outputs and acks leave later, and it rests meanwhile."""
        self._step_delay = max(self._step_delay, int(ms))
        if self._current is not None:
            self.stalled[self._current] = self.now + self._step_delay

    def _to_coordinator(self, msg: Message) -> None:
        self._inbox.append((self.now + self.cfg.ack_latency_ms + self._step_delay, msg))

    def _each_task(self, tasks: list[Any], call: Callable[[Any], None]) -> None:
        """``call`` on every task, with delays inside it attributed to that task."""
        for t in tasks:
            self._current = t.name
            try:
                call(t)
            finally:
                self._current = None

    def _trigger_sources(self, checkpoint_id: int, kind: str) -> None:
        self._each_task(self.sources, lambda s: s.trigger_checkpoint(checkpoint_id, self.now, kind))

    def _tell_complete(self, checkpoint_id: int) -> None:
        self._each_task(self.tasks, lambda t: t.notify_checkpoint_complete(checkpoint_id))

    def _tell_aborted(self, checkpoint_id: int) -> None:
        for t in self.tasks:
            t.notify_checkpoint_aborted(checkpoint_id)

    def _final_checkpoint_done(self) -> None:
        self._finished = True

    # ------------------------------------------------------------------ deploy and restart

    def _deploy(self, graph: JobGraph) -> None:
        self.attempt += 1
        self.graph = graph
        self._reported = {}
        self._timers_reported = {}
        self.channels = {}
        self.stalled = {}
        self._read = {}
        self._inbox.clear()
        self.final_after = None
        plan: RestorePlan = self.master.plan_restore(graph, self.attempt)
        self.coord = None
        gateway = SimGateway(self)

        def env(name: str, output: Any) -> TaskEnv:
            clock = SkewedClock(self.clock, self.skews.get(name, 0))
            return TaskEnv(
                self.master.job_id,
                self.attempt,
                graph,
                self.storage,
                gateway,
                clock,
                self.history.emit,
                self.failpoints,
                self.run_dir,
                output,
                durable=False,
            )

        # one channel per (upstream, downstream) pair; a task's outputs in downstream order, its
        # inputs in upstream order (the channel index the task sees)
        outputs: dict[str, list[SimChannel]] = {}
        inputs: dict[str, list[SimChannel]] = {}
        for up, down in graph.channels():
            ch = self.channels[str(ChannelName(up, down))] = SimChannel()
            outputs.setdefault(up, []).append(ch)
            inputs.setdefault(down, []).append(ch)
        self.sources, self.streams = [], []
        for op, i, k in graph.subtasks():
            name = task_name(op, i)
            out = SimOutput(self, outputs[name]) if name in outputs else None
            if k < 0:
                self.sources.append(SourceTask(env(name, out), i, None if k == -1 else -2 - k))
            else:
                t = StreamTask(env(name, out), k, i, len(inputs[name]), self.keyed_backend_factory)
                self.streams.append((t, inputs[name]))
        self.tasks = [*self.sources, *(t for t, _ in self.streams)]
        path = plan.path(self.master.checkpoint_root)
        for t in self.tasks:
            self._current = t.name
            try:
                a = plan.assignments.get((t.operator, t.subtask))
                restored = (
                    restore_subtask(plan.checkpoint, a, graph.max_parallelism)
                    if a is not None and plan.checkpoint
                    else None
                )
                t.restore(restored, plan.checkpoint_id, path)
            finally:
                self._current = None
        self._new_coordinator(failpoint=lambda name: self.failpoints.hit(name, None))

    def _close_tasks(self) -> None:
        for t in self.tasks:
            try:
                t.close()
            except Exception:
                pass
        self.tasks, self.sources, self.streams = [], [], []

    def _fail_over(self, e: BaseException) -> None:
        """The job failed: tear it down, count the restart, wait the restart delay."""
        reason = _reason(e)
        self._retire(f"job restart: {reason}")
        self._attempt_lost(self.attempt + 1, reason, user_frame(e, self._job_files))
        self.clock.advance(self.cfg.restart_delay_ms)

    def _safe_deploy(self, graph: JobGraph) -> None:
        """Deploy ``graph``; a failure while deploying (e.g. during restore) fails over and retries."""
        while True:
            try:
                self._deploy(graph)
                return
            except JobFailure:
                raise
            except Exception as e:
                self._fail_over(e)

    def _rescale(self, req: RescaleRequest) -> None:
        self._safe_deploy(self._rescaled(req))

    # ------------------------------------------------------------------ the loop

    def _emit_stats(self) -> None:
        for t in self.tasks:
            n_in, n_out = self._reported.get(t.name, (0, 0))
            if t.records_in > n_in:
                self.history.emit(
                    RecordsIn(operator=t.operator, subtask=t.subtask, count=t.records_in - n_in)
                )
            if t.records_out > n_out:
                self.history.emit(
                    RecordsOut(operator=t.operator, subtask=t.subtask, count=t.records_out - n_out)
                )
            self._reported[t.name] = (t.records_in, t.records_out)
            fired, before = t.timers_fired, self._timers_reported.get(t.name, {})
            if fired != before:
                delta = {d: n - before.get(d, 0) for d, n in sorted(fired.items()) if n != before.get(d, 0)}
                self.history.emit(TimersFired(operator=t.operator, subtask=t.subtask, **delta))
                self._timers_reported[t.name] = dict(fired)

    def _step_source(self, s: SourceTask) -> None:
        if self.stopping:
            return
        if not s.exhausted() and not self._ahead(s):
            n = s.poll(self.rng.randint(1, self.cfg.source_batch))
            if n:
                self._count_records(n)
                self._read[s.name] = self._read.get(s.name, 0) + n
        s.announce_exhausted()
        if s.exhausted() and not s.finished and not self._input_kept_open():
            s.end_input()  # this subtask is done: end of input (the maximum watermark) flows downstream

    def _ahead(self, s: SourceTask) -> bool:
        """Whether ``s`` read more than ``source_drift`` records more than the slowest live subtask of
        its source in this deployment. Parallel source subtasks read at similar rates (each its own
        thread in Flink); drawn independently per step, their difference would be a random walk whose
        spread grows with the run, and with it the watermark's lag behind the faster ones (the
        minimum), i.e. the event-time state every stage holds open. A subtask held in a step (a fault's
        delay) does not hold the others back; once released, they wait until it has caught up."""
        bound = self.cfg.source_drift
        if bound is None:
            return False
        now, read = self.now, self._read
        slowest = min(
            (
                read.get(x.name, 0)
                for x in self.sources
                if x.operator == s.operator
                and x is not s
                and not x.exhausted()
                and self.stalled.get(x.name, -1) <= now
            ),
            default=None,
        )
        return slowest is not None and read.get(s.name, 0) - slowest > bound

    def _input_kept_open(self) -> bool:
        """A source that ran out keeps its end of input back while a planned trigger is pending (its
        channels still carry barriers, so faults aimed at them act), until the gate releases it."""
        return not self.gate.releases(all(x.exhausted() for x in self.sources), self.now)

    def _step_stream(self, t: StreamTask, inputs: list[SimChannel]) -> None:
        budget = self.cfg.task_budget
        now = self.now
        t.advance_time()
        while budget > 0:
            blocked = t.blocked_channels()
            ready = [i for i, ch in enumerate(inputs) if i not in blocked and ch.ready(now)]
            if not ready:
                return
            i = ready[self.rng.randrange(len(ready))] if len(ready) > 1 else ready[0]
            q = inputs[i].q
            if is_control(q[0][1]):
                t.on_control(i, q.popleft()[1])
                budget -= 1
                continue
            batch = []
            while q and budget > 0 and q[0][0] <= now and not is_control(q[0][1]):
                batch.append(q.popleft()[1])
                budget -= 1
            t.on_records(i, batch)

    def _deliver_to_coordinator(self) -> None:
        while self._inbox and self._inbox[0][0] <= self.now and self.coord is not None:
            _, msg = self._inbox.popleft()
            match msg:
                case Ack(_, cid, op, sub, handle, extra):
                    self.coord.acknowledge(cid, op, sub, handle, self.now, extra)
                case Decline(_, cid, op, sub, reason):
                    self.coord.decline(cid, op, sub, reason, self.now)
                case _:
                    raise TypeError(f"not a message for the coordinator: {msg!r}")

    def _tick(self) -> None:
        assert self.coord is not None
        if self.crash_requests:
            target = self.crash_requests.pop(0)
            raise InjectedCrash("crash_task", target)
        self._observe_time(self.now)
        self._deliver_to_coordinator()
        if self.rescales.ready is not None:
            return
        if not self.stopping:
            self.coord.tick(self.now)
        order = list(range(len(self.tasks)))
        self.rng.shuffle(order)
        n_src = len(self.sources)
        for idx in order:
            t = self.tasks[idx]
            if self.stalled.get(t.name, -1) > self.now:
                continue
            self._current, self._step_delay = t.name, 0
            try:
                if idx < n_src:
                    self._step_source(t)
                else:
                    self._step_stream(*self.streams[idx - n_src])
            finally:
                self._current, self._step_delay = None, 0
        if (
            self.final_after is None
            and not self.stopping
            and self.sources
            and all(s.finished for s in self.sources)
            and all(t.finished for t, _ in self.streams)  # the sources end only once the gate released
        ):
            self._trigger_final(self.now)
        if self.now - self._last_stats >= self.cfg.stats_every_ms:
            self._emit_stats()
            self._last_stats = self.now

    def _watch_progress(self, watch: ProgressWatch) -> None:
        """Raise :class:`Stalled` once nothing the run waits for moved for the stall limit: records
        emitted and processed, checkpoints completed, timers fired, deployments, subtasks ended."""
        watch.observe(
            records=self.records_emitted,
            records_processed=sum(t.records_in for t in self.tasks),
            checkpoints_completed=self.completed,
            timers_fired=sum(sum(t.timers_fired.values()) for t in self.tasks),
            deployments=self._attempts(),
            subtasks_ended=sum(1 for t in self.tasks if t.finished),
        )
        watch.hold(self._holding())
        stalled = watch.stalled()
        if stalled is not None:
            held = sorted(n for n, until in self.stalled.items() if until > self.now)
            waiting = (
                f"subtasks held in a step: {', '.join(held)}"
                if held
                else f"checkpoints pending: {sorted(self.coord.pending) if self.coord else []}"
            )
            raise Stalled(stalled, watch.stopped(), waiting, watch.bound_s)

    def _drive(self) -> None:
        self._safe_deploy(self.graph)
        watch = ProgressWatch(self.cfg.stall_limit_ms / 1000, clock=lambda: self.now / 1000)
        watched = -1
        while not self._finished:
            if self.now > self.cfg.time_limit_ms:
                raise JobFailure(f"simulated time limit of {self.cfg.time_limit_ms} ms reached")
            if self.now - watched >= self.cfg.stats_every_ms:
                self._watch_progress(watch)
                watched = self.now
            try:
                self._tick()
                req = self.rescales.take()
                if req is not None:
                    self._rescale(req)
                    continue
            except JobFailure:
                raise
            except Exception as e:  # any task failure fails the job over, as in Flink
                if self._finished:
                    break
                self._fail_over(e)
                # a rescale the failure left ready (its savepoint completed before the failure; one
                # still pending is due again, RescaleSchedule) restarts at the new parallelism at once,
                # from that savepoint, the latest checkpoint: the restore at
                # the new parallelism is the one that finds the failed attempt's work unfinished (a
                # lost commit notification: the sink's pending transactions of subtasks that are gone)
                req = self.rescales.take()
                self._safe_deploy(self.graph if req is None else self._rescaled(req))
                continue
            self.clock.advance(self.cfg.tick_ms)
        for s in self.sources:
            s.end_input()

    def _end_run(self, status: str, reason: str) -> None:
        self._emit_stats()
        super()._end_run(status, reason)
