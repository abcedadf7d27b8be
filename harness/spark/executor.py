"""The ``spark`` executor's driver: the job's subtasks run as the tasks of one barrier-mode stage
(``RDD.barrier().mapPartitions``), followed by a shuffle so the barrier stage is a ShuffleMapStage,
which Spark relaunches as a whole when a task or an executor dies (a barrier ResultStage it never
retries). Every relaunch is a new *deployment*: the first task of a new attempt that registers makes
the driver retire the old checkpoint coordinator and plan a restore from the newest intact
checkpoint; every task of the deployment restores from it. When Spark gives up on the stage, the
driver's restart strategy resubmits the job (up to ``max_restarts``); a rescale stops the job (after
a savepoint, or at once) and resubmits it at the new parallelism. Adaptive recovery
(``harness.driver.adaptive``): a lost deployment whose slots do not all come back within the resource
stabilization timeout is cancelled and resubmitted from the latest checkpoint at the parallelism the
slots left allow, and scaled up again when slots return. What every driver does the same
way (coordinator, restarts, rescales, the chaos controls, the fault scheduler) is ``harness.driver.core``;
this module keeps how the tasks run (a Spark job) and how they are reached (``harness.driver.messages`` over
each task's coordinator link).

One module although ~400 lines: the driver loop, the deployment it tracks and the handling of every
message a task sends all read and write the same deployment state under one lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness.driver.messages as ctl
from harness.driver.abort_cause import AbortCause, AbortReason
from harness.driver.adaptive import AdaptiveConfig, Fit, fit, slot_layout
from harness.driver.controls import FaultPlan, ProcessHandles
from harness.driver.coordinator import CheckpointConfig, JobFailedError
from harness.driver.core import Driver
from harness.driver.jobmaster import JobFailure, RescaleRequest
from harness.driver.user_code import job_files, user_frame_in_text
from harness.events import (
    CheckpointAborted,
    ConnectionRefused,
    DriverReplaced,
    InputHeld,
    InputReleased,
    JobFailover,
    Listening,
    RecordsIn,
    RecordsOut,
    ResourcesLost,
    SlotLayout,
    TaskRegistered,
    TaskSlots,
    TimersFired,
    from_fields,
)
from harness.history import HistoryWriter
from harness.job import JobGraph, task_name
from harness.job.job_graph import ChannelName, TaskName
from harness.progress import ProgressWatch, Stalled
from harness.run_store import RunStore
from harness.spark.cluster import SparkCluster
from harness.spark.inband_control import InbandFaults
from harness.spark.network import Endpoint, TaskNetwork, coordinator_link
from harness.spark.root_cause import record_stage_failure
from harness.spark.stage import JOB_CODE_FAILED, submit_stage
from harness.spark.transport import CoordinatorServer, RunSecret
from reference_impl.checkpoint.completed import METADATA

__all__ = ["SparkExecutor", "JOB_CODE_FAILED", "TASK_START_BOUND_S"]  # JOB_CODE_FAILED re-exported

# While a deployment's tasks start, Spark launches executors' Python workers that import the job: on a
# loaded machine that takes tens of seconds in which nothing the driver sees can move (Spark itself
# sets no bound there). A stall limit shorter than this is for a running job, not for its start-up.
TASK_START_BOUND_S = 120.0

# How often an end of input held for a scale-up asks the cluster how its executors come (a process
# scan on local-cluster: not every loop of the driver).
COMING_POLL_MS = 500


@dataclass
class _Deployment:
    number: int
    graph: JobGraph
    checkpoint_path: str | None
    registered: set[str]
    restored: set[str]
    exhausted: set[str]
    ended: set[str] = field(default_factory=set)  # keyed subtasks end of input has passed
    gathered: dict[str, str] = field(default_factory=dict)  # task -> its Gather value
    input_ended: set[str] = field(default_factory=set)  # exhausted sources told to send end of input


class SparkExecutor(Driver):
    """Runs one job graph on a Spark cluster (a started :class:`SparkCluster`)."""

    EXECUTOR = "spark"
    SIMULATED = False

    def __init__(
        self,
        graph: JobGraph,
        run_dir: Path,
        checkpoint: CheckpointConfig,
        cluster: SparkCluster,
        seed: int = 0,
        faults: FaultPlan | None = None,
        rescales: list[RescaleRequest] | None = None,
        max_restarts: int = 10,
        time_limit_s: float | None = None,
        stall_limit_s: float = 120,
        run_info: dict[str, Any] | None = None,
        failpoints_on: bool = False,
        network: TaskNetwork | None = None,
        resume: bool = False,
        tls: bool = False,
        authenticate: bool = True,
        adaptive: AdaptiveConfig | None = None,
    ) -> None:
        graph.validate()
        # absolute: executors run in their own working directories and must find the same files
        run_dir = Path(run_dir).resolve()
        self.cluster = cluster
        self.time_limit_s = time_limit_s  # a ceiling on the whole run, or None
        # the limit that matters: the run fails when nothing it waits for moved for this long
        self.progress = ProgressWatch(stall_limit_s)
        self.records_taken_in = 0  # records every task took in, as their Stats report (every 0.2 s)
        self.failpoints_on = failpoints_on
        self._t0 = self._started = time.monotonic()
        # resume: this driver replaces one that died; it goes on with the same history and storage
        self.resume = resume
        history = HistoryWriter(RunStore(run_dir).history, self.now_ms, append=resume)
        prior = history.last_event if resume else None
        if prior is not None:  # history time goes on from where the dead driver stopped
            self._t0 -= (int(prior["t"]) + 1) / 1000
        super().__init__(
            graph,
            run_dir,
            checkpoint,
            history,
            seed=seed,
            faults=faults,
            rescales=rescales,
            max_restarts=max_restarts,
            hold_floor_ms=30_000,
            run_info=run_info,
        )
        self.lock = threading.RLock()
        self.network = network or TaskNetwork()
        # a fresh secret per driver: tasks of a dead driver's job cannot talk to its replacement
        # (authenticate=False only lets chaos.extra.bench measure what authentication costs)
        self.secret = (
            RunSecret.generate(self.run_dir.name, tls=tls)
            if authenticate
            else RunSecret.unauthenticated(self.run_dir.name)
        )
        self.server = CoordinatorServer(self.secret, self.network.coordinator_bind)
        self.dep: _Deployment | None = None
        self.deployments = _attempts_so_far(RunStore(self.run_dir).history) if resume else 0
        # in-band process faults: tasks act on their own executor when asked over their link
        self.inband = InbandFaults(
            self._send, self.history.emit, lambda: cluster.app_id, self._deployment_number
        )
        self.finishing = False
        self.stopping_for_rescale = False
        # adaptive recovery: the parallelism asked for, the slots the deployment takes, since when it
        # waits for lost slots (monotonic s), the smaller deployment it is cancelled for, and since
        # when enough slots for a larger one are there
        self.adaptive = adaptive or AdaptiveConfig()
        self.configured = graph.parallelism()
        self.slots = len(graph.subtasks())
        self._raised = ""  # the traceback a failed task of the current deployment sent
        self.lost_at: float | None = None
        self.adapt_to: Fit | None = None
        self.capacity_since: float | None = None
        self._slots_polled = 0.0
        self._slots_seen: int | None = None  # the task slots last written to the history
        # the slots adaptive recovery chose the next deployment on (its slot_layout's slots_available)
        self._adapted_on: int | None = None
        self._job_group = ""  # the running Spark job's group (one per job, so a cancel hits only it)
        # jobs adaptive recovery cancelled whose thread still runs: a cancel reaches only a job Spark
        # has started, so one cancelled as it was being submitted is cancelled again until it ends
        self._cancelled_jobs: list[tuple[threading.Thread, str]] = []
        self._cancels_repeated = 0.0
        self.held_for_scale_up: int | None = None  # since when the end of input waits for a scale-up
        self._scale_up_watch: ProgressWatch | None = None  # what that wait follows (the cluster's moves)
        self._coming_polled: int | None = None  # when that watch last asked the cluster (run ms)
        # deployments a stage relaunch replaced while the Spark job that ran them goes on
        self._relaunched: set[int] = set()
        self.scale_up_given_up = False  # that wait ran out: the input ends at the parallelism there is

    def _deployment_number(self) -> int:
        return self.dep.number if self.dep else -1

    def now_ms(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    def _attempts(self) -> int:
        return self.deployments

    def processes(self) -> ProcessHandles | None:
        return self.cluster

    def _send(self, task: str, msg: ctl.Message) -> bool:
        return self.server.send(task, ctl.encode(msg))

    def tell(self, task: str, msg: ctl.Message) -> bool:
        """Send ``msg`` to ``task`` over its coordinator link, for faults acted out in band by the task
        itself (``harness.toxics.inband``); False when the task is not connected (it gets the run's
        in-band state when it is deployed again)."""
        return self._send(task, msg)

    def _broadcast(self, msg: ctl.Message) -> None:
        self.server.broadcast(ctl.encode(msg))

    # ------------------------------------------------------------------ how the controls reach the tasks

    def _crash(self, target: str | None) -> None:
        for t in self.task_names() if target is None else [target]:
            self._send(t, ctl.Crash())

    def _delay_barrier(self, channel: str, delay_ms: int) -> None:
        up, down = ChannelName.parse(channel)
        self._send(up, ctl.DelayBarrier(down, delay_ms))

    def _skew(self, target: str, skew_ms: int) -> None:
        self._send(target, ctl.Skew(skew_ms))

    def _gate_storage(self, mode: str | None, delay_ms: int) -> None:
        self._broadcast(ctl.StorageGate(mode, delay_ms))

    # ------------------------------------------------------------------ coordinator callbacks

    def _trigger_sources(self, checkpoint_id: int, kind: str) -> None:
        for op, i, stage in self.graph.subtasks():
            if stage < 0:
                self._send(task_name(op, i), ctl.Trigger(checkpoint_id, self.now_ms(), kind))

    def _tell_complete(self, checkpoint_id: int) -> None:
        self._broadcast(ctl.Complete(checkpoint_id))

    def _tell_aborted(self, checkpoint_id: int) -> None:
        self._broadcast(ctl.Abort(checkpoint_id))

    def _final_checkpoint_done(self) -> None:
        if not self.finishing:
            self.finishing = True
            self._broadcast(ctl.Finish())

    # ------------------------------------------------------------------ messages from tasks

    def _new_deployment(self, graph: JobGraph, reason: str | None) -> None:
        self._retire(f"job restart: {reason}" if reason else "redeploy")
        # the job's own frame in the traceback of the task that failed (or of the stage Spark gave up on)
        text = self._raised or (self.root_cause if reason is not None and reason.startswith(_GAVE_UP) else "")
        frame = user_frame_in_text(text, job_files(graph)) if reason is not None and text else None
        self._raised = ""
        self._attempt_lost(self.deployments, reason, frame)
        self.graph = graph
        plan = self.master.plan_restore(graph, self.deployments)
        self.dep = _Deployment(
            self.deployments, graph, plan.path(self.master.checkpoint_root), set(), set(), set()
        )
        self.deployments += 1
        self.final_after = None
        self.finishing = False

    def _handle(self, task: str, msg: ctl.Message) -> None:
        dep = self.dep
        match msg:
            case ctl.LinkRejected(peer, reason):  # a connection that failed the handshake, or stale
                self.history.emit(ConnectionRefused(listener="coordinator", peer=peer, task=task, reason=reason))
            case ctl.LinkDisconnected():  # a task that is gone fails its Spark task: Spark relaunches the stage
                if (
                    dep is not None
                    and task in dep.registered
                    and not (self.finishing or self.stopping_for_rescale)
                ):
                    self.lost_at = self.lost_at or time.monotonic()  # adaptive recovery's clock starts
            case ctl.LinkConnected():
                pass
            case ctl.Refused(peer, reason):  # a task's input gate refused a connection
                self.history.emit(ConnectionRefused(listener=f"input gate of {task}", peer=peer, reason=reason))
            case ctl.Listening(endpoint):  # a task's input gate is up (the history documents every listener)
                attempt = None if dep is None else dep.number
                self.history.emit(Listening(listener=f"input gate of {task}", endpoint=endpoint, attempt=attempt))
            case ctl.Register(_, job):
                # not a late task of a job cancelled (adaptive recovery) that connected before the
                # cancel; one connecting after it is refused by the server (``server.job``)
                if job == self._job_group:
                    self._register(task)
            case ctl.Gather(deployment, value):
                if dep is not None and deployment == dep.number:
                    self._gather(dep, task, value)
                else:  # a late task of a deployment that is gone: it must not wait for Peers
                    self._send(task, self._for_replaced(deployment))
            case ctl.Restored():
                assert dep is not None
                dep.restored.add(task)
                if len(dep.restored) == len(self.task_names()) and self.coord is None:
                    self.lost_at = None  # the deployment runs again: adaptive recovery's clock stops
                    self._new_coordinator(failpoint=self._driver_failpoint)
            case ctl.Emit(type_, fields):
                self.history.emit(from_fields(type_, fields))  # a task's event, as it sent it
            case ctl.Stats(n_in, n_out, fired):
                self._stats(task, n_in, n_out, fired)
            case ctl.Ack(deployment, cid, op, sub, handle, extra):
                if dep is not None and deployment == dep.number and self.coord is not None:
                    self.coord.acknowledge(cid, op, sub, handle, self.now_ms(), extra)
                elif dep is None or deployment != dep.number:  # a cancelled job's task, late
                    self.master.discard_late_state(cid)
            case ctl.Decline(deployment, cid, op, sub, reason):
                if dep is not None and deployment == dep.number and self.coord is not None:
                    self.coord.decline(cid, op, sub, reason, self.now_ms())
            case ctl.Exhausted():  # only from this deployment's tasks, not a cancelled job's late ones
                if dep is not None and task in dep.registered:
                    dep.exhausted.add(task)
            case ctl.Ended():
                if dep is not None and task in dep.registered:
                    dep.ended.add(task)
            case ctl.Raised(text):  # a task of this deployment failed: why, for the next restart
                if dep is not None and task in dep.registered:
                    self._raised = text
            case ctl.FailpointHit(name, target):
                action = self._failpoint_action(name, target)
                reply = (
                    ctl.FailpointReply(None, 0)
                    if action is None
                    else ctl.FailpointReply(action.action, int(action.delay_ms))
                )
                self._send(task, reply)
            case ctl.AskCancelled(job):  # a task whose peer closed: part of a cancel, or a failure?
                self._send(task, ctl.Cancel() if self._job_cancelled(job) else ctl.NotCancelled())
            case ctl.RouteRequest(link, host, port):
                self._send(task, ctl.Routed(*self._route(link, (host, port))))
            case (
                ctl.InbandHome() | ctl.InbandReply()
            ):  # in-band process faults: where a task runs, what it did
                self.inband.on_message(task, msg)
            case _:
                raise TypeError(f"{task} sent a message the driver does not take: {msg!r}")

    def _job_cancelled(self, job: str) -> bool:
        """Whether the driver cancelled Spark job group ``job``: for adaptive recovery (a job it
        watches until it ends) or by stopping the running one for a rescale."""
        if any(job == group for _, group in self._cancelled_jobs):
            return True
        return job == self._job_group and (self.stopping_for_rescale or self.adapt_to is not None)

    def _register(self, task: str) -> None:
        """A task came up: deploy it (a task of a deployment already registered means Spark relaunched
        the stage: a new deployment). While the job stops for a rescale (its savepoint completed, or
        fell back to the latest checkpoint) a task is not deployed but told ``Cancel``: it ends
        cleanly, so the Spark job ends and the rescale goes on from there. Such a task is one of a
        relaunch after a task failed during the stop, which Flink too leaves to the rescale once the
        savepoint is complete; deployed, it would wait for peers that had been cancelled already
        (the relaunched deployment registered, never restored, and the run stalled)."""
        dep = self.dep
        assert dep is not None
        if self.stopping_for_rescale:
            self._send(task, ctl.Cancel())
            return
        if task in dep.registered:  # a new attempt of a task already deployed: Spark relaunched the stage
            old = dep
            self._new_deployment(dep.graph, f"task {task} restarted by Spark (stage relaunch)")
            self._relaunched.add(old.number)
            if len(old.gathered) < len(old.graph.subtasks()):  # its tasks wait for Peers that never come
                for t in sorted(set(old.gathered) - {task}):
                    self._send(t, ctl.Crash())
            dep = self.dep
            assert dep is not None
        dep.registered.add(task)
        self.history.emit(TaskRegistered(task=task, attempt=dep.number))
        net = self.network.task_settings()
        self._send(
            task,
            ctl.Deploy(dep.number, dep.checkpoint_path, self.failpoints_on, self.skews.get(task, 0), net),
        )
        if self.storage_mode[0] is not None:
            self._send(task, ctl.StorageGate(*self.storage_mode))
        self._tell_waiting(dep)

    def _for_replaced(self, deployment: int) -> ctl.Message:
        """What a task of a deployment that is gone is told instead of its Peers. A task of a Spark job
        that was cancelled (a rescale, adaptive recovery) or gave up stops: ``Cancel``, it ends cleanly.
        A deployment a stage relaunch replaced runs in the Spark job still running, and its task may be
        of the relaunch itself: a late task of the attempt Spark failed registered in between (its
        Python code runs until Spark's kill lands, on a loaded machine long enough to register), and
        the relaunch's own task of that subtask then started yet another deployment. Ended cleanly,
        such a task would never run again (Spark relaunches a barrier stage only when a task fails),
        and the deployment would wait for it until the run stalls: it must fail, ``Crash``. A late task
        of the failed attempt fails too, which Spark ignores (its attempt is over)."""
        return ctl.Crash() if deployment in self._relaunched else ctl.Cancel()

    def _gather(self, dep: _Deployment, task: str, value: str) -> None:
        """Every task's Gather in, every task gets all values (in task order): the deployment's
        allGather, as fast as the coordinator links."""
        dep.gathered[task] = value
        names = [task_name(op, i) for op, i, _ in dep.graph.subtasks()]
        if len(dep.gathered) == len(names) and all(t in dep.gathered for t in names):
            peers = ctl.Peers([dep.gathered[t] for t in names])
            for t in names:
                self._send(t, peers)
        else:
            self._tell_waiting(dep)

    def _tell_waiting(self, dep: _Deployment) -> None:
        """Tasks waiting for the deployment's Peers learn that the deployment's start moves on."""
        n = len(dep.graph.subtasks())
        if len(dep.gathered) < n:
            waiting = ctl.Waiting(len(dep.registered), len(dep.gathered), n)
            for t in dep.gathered:
                self._send(t, waiting)

    def _stats(self, task: str, n_in: int, n_out: int, fired: dict[str, Any]) -> None:
        op, sub = TaskName.parse(task)
        if fired:
            self.history.emit(TimersFired(operator=op, subtask=sub, **fired))
        self.records_taken_in += n_in
        if n_in:
            self.history.emit(RecordsIn(operator=op, subtask=sub, count=n_in))
        if n_out:
            self.history.emit(RecordsOut(operator=op, subtask=sub, count=n_out))
            if self.dep is not None and op == self.dep.graph.source.name:
                self._count_records(n_out)

    def _route(self, link: str, real: Endpoint) -> Endpoint:
        router = self.network.router
        return real if router is None else router(link, real)

    def _driver_failpoint(self, name: str) -> None:
        action = self._failpoint_action(name, None)
        if action is not None and action.action == "crash":
            self._crash(None)  # the driver's "crash" between _metadata and commit: every task fails over
        elif action is not None and action.delay_ms:
            time.sleep(action.delay_ms / 1000)

    # ------------------------------------------------------------------ the job

    def _submit(self, graph: JobGraph) -> tuple[threading.Thread, dict[str, Any]]:
        real = self.network.coordinator_endpoint(self.server.endpoint[1])
        coords = {
            t: self._route(coordinator_link(t), real)
            for t in (task_name(o, i) for o, i, _ in graph.subtasks())
        }
        layout = slot_layout(graph.subtasks(), self.slots)
        adapted_on, self._adapted_on = self._adapted_on, None
        attempt = self.dep.number if self.dep else self.deployments
        tasks_per_slot = [len(slot) for slot in layout]
        self.history.emit(
            SlotLayout(attempt=attempt, parallelism=graph.parallelism(), tasks_per_slot=tasks_per_slot)
            if adapted_on is None
            else SlotLayout(
                attempt=attempt,
                parallelism=graph.parallelism(),
                tasks_per_slot=tasks_per_slot,
                slots_available=adapted_on,
                reason="adaptive",
            )
        )
        self._job_group = f"statechaos-{self.run_dir.name}-{self.deployments}"
        self.server.job = self._job_group  # a task of a job cancelled before is refused on connecting
        return submit_stage(
            self.cluster.sc, graph, str(self.run_dir), coords, self.secret, layout, self._job_group,
            self.start_bound_s,
        )

    def _drive_once(self, graph: JobGraph, reason: str | None) -> _Outcome:
        """One Spark job, until it finished, stopped for a rescale or Spark gave up on the stage."""
        self._new_deployment(graph, reason)
        th, result = self._submit(graph)
        while th.is_alive():
            try:
                why = self._out_of_time()
            except Stalled:
                self.cluster.sc.cancelAllJobs()
                th.join(30)
                raise
            if why is not None:
                self.cluster.sc.cancelAllJobs()
                th.join(30)
                raise JobFailure(why)
            try:
                while True:
                    task, raw = self.server.get(timeout_s=0.005)
                    with self.lock:
                        self._handle(task, ctl.decode(raw))
            except Exception as e:
                if isinstance(e, JobFailure):
                    raise
                if not _is_empty(e):
                    if isinstance(e, JobFailedError):
                        self._fail_deployment(str(e))
                    else:
                        raise
            with self.lock:
                now = self.now_ms()
                self._observe_time(now)
                self._adapt(now)
                self._cancel_again()
                if self.adapt_to is not None:  # the cancelled job ends on its own: no task of it joins
                    self._cancelled_jobs.append((th, self._job_group))
                    return _Outcome("adapt")
                if self.rescales.ready is not None and not self.stopping_for_rescale:
                    self.stopping_for_rescale = True
                    self._broadcast(ctl.Cancel())
                if self.coord is not None and not self.stopping_for_rescale:
                    try:
                        if not self.stopping:
                            self.coord.tick(now)
                    except JobFailedError as e:
                        self._fail_deployment(str(e))
                    dep = self.dep
                    if dep is not None and self.final_after is None:
                        self._end_input_when_released(dep, now)
        th.join()
        if "error" in result:
            if self.stopping_for_rescale:
                return _Outcome("rescale")
            text = str(result["error"])
            if JOB_CODE_FAILED in text:  # no restart can fix this: fail now, with the executor's traceback
                self._record_failure(result["error"])
                tb = text[text.index(JOB_CODE_FAILED) :].split("\n\tat ")[0]
                raise JobFailure(tb.strip())
            return _Outcome("failed", self._record_failure(result["error"]))
        return _Outcome("rescale" if self.stopping_for_rescale else "finished")

    def _out_of_time(self) -> str | None:
        """Why the run must stop waiting, or None: the optional ceiling on the whole run passed.
        Raises :class:`Stalled` when nothing it waits for progressed for the stall limit (records
        emitted and processed, completed checkpoints, deployments, tasks registered, restored,
        exhausted and ended)."""
        dep = self.dep
        self.progress.observe(
            records=self.records_emitted,
            records_processed=self.records_taken_in,
            checkpoints_completed=self.completed,
            deployments=self.deployments,
            tasks_registered=len(dep.registered) if dep else 0,
            tasks_restored=len(dep.restored) if dep else 0,
            sources_exhausted=len(dep.exhausted) if dep else 0,
            subtasks_ended=len(dep.ended) if dep else 0,
        )
        self.progress.hold(self._holding())
        bound = self.progress.bound_s if dep is None or self._started_up(dep) else self.start_bound_s
        stalled = self.progress.stalled(bound)
        if stalled is not None:
            raise Stalled(stalled, self.progress.stopped(bound), self._waiting_for(), bound)
        if self.time_limit_s is not None and time.monotonic() - self._started > self.time_limit_s:
            return f"time limit of {self.time_limit_s:.0f} s reached ({self._waiting_for()})"
        return None

    def _started_up(self, dep: _Deployment) -> bool:
        """Has every task of the deployment registered? Until then Spark is still launching its tasks
        (executor, Python worker, imports), which nothing the driver sees reports on."""
        return len(dep.registered) >= len(self.task_names())

    @property
    def start_bound_s(self) -> float:
        """The stall bound while a deployment's tasks start: the scenario's, but never less than
        :data:`TASK_START_BOUND_S`, and the bound of the tasks' own start-up waits."""
        return max(self.progress.bound_s, TASK_START_BOUND_S)

    def _cancel_again(self) -> None:
        """Cancel each cancelled job whose thread still runs once Spark has started it (polled every
        0.5 s). ``cancelJobGroup`` misses a job Spark has not started: a barrier job waiting for more
        slots than there are is resubmitted every 15 s until they are there. Started later, it took the
        slots the next deployment waited for, and its tasks (refused by the coordinator) held them."""
        t = time.monotonic()
        if not self._cancelled_jobs or t - self._cancels_repeated < 0.5:
            return
        self._cancels_repeated = t
        self._cancelled_jobs = [(th, g) for th, g in self._cancelled_jobs if th.is_alive()]
        tracker = self.cluster.sc.statusTracker()
        active = set(tracker.getActiveJobsIds())
        for _, group in self._cancelled_jobs:
            if active.intersection(tracker.getJobIdsForGroup(group)):
                self.cluster.sc.cancelJobGroup(group)

    def _waiting_for(self) -> str:
        """What the driver still waits for, for a time limit's message."""
        dep, parts = self.dep, []
        if dep is not None:
            names = self.task_names()  # the deployment's graph
            missing = [n for n in names if n not in dep.registered]
            parts.append(
                f"deployment {dep.number}: {len(names) - len(missing)}/{len(names)} tasks registered, "
                f"{len(dep.restored)}/{len(names)} restored"
            )
            if missing:
                parts.append(
                    f"{self.cluster.task_slots()} slots for {self.slots}, waiting for {', '.join(missing)}"
                )
        if self.coord is not None and self.coord.pending:
            parts.append(f"checkpoints in flight {sorted(self.coord.pending)}")
        if self.stopping_for_rescale:
            parts.append("stopping for a rescale")
        if self.finishing:
            parts.append("finishing")
        alive = [g for th, g in self._cancelled_jobs if th.is_alive()]
        if alive:
            parts.append(f"cancelled Spark jobs still running: {', '.join(alive)}")
        return "; ".join(parts) or "no deployment"

    def _record_failure(self, error: BaseException) -> str:
        """Spark gave up on the stage: the cause's last line (``root_cause`` keeps the whole cause)."""
        self.root_cause, last = record_stage_failure(RunStore(self.run_dir).logs, error, self.now_ms())
        return last

    def _end_input_when_released(self, dep: _Deployment, now: int) -> None:
        """An exhausted source keeps its end of input back while a planned trigger is pending (its
        channels still carry barriers); once every source is exhausted and the gate releases, end of
        input flows, and when it has passed every keyed subtask the final checkpoint is triggered."""
        exhausted_all = len(dep.exhausted) == sum(src.parallelism for src, _ in dep.graph.sources())
        if self._holds_for_scale_up(exhausted_all, now) or not self.gate.releases(exhausted_all, now):
            return
        for t in sorted(dep.exhausted - dep.input_ended):
            self._send(t, ctl.EndInput())
            dep.input_ended.add(t)
        if exhausted_all and len(dep.ended) == sum(st.parallelism for st in dep.graph.stages):
            self._trigger_final(now)

    def _adapt(self, now: int) -> None:
        """Adaptive recovery, polled from the driver loop (slots at most every 200 ms). A deployment
        lost (a task's link closed, or Spark's scheduler has fewer slots than the running deployment
        takes: an executor it ran on is gone) for longer than the resource stabilization timeout, with
        fewer slots than it takes, is cancelled (``_drive`` resubmits it smaller); a deployment smaller
        than the configured one rescales up (stop with a savepoint) once enough slots for a larger one
        have stayed as long."""
        cfg = self.adaptive
        t = time.monotonic()
        if not cfg.enabled or self.adapt_to is not None or t - self._slots_polled < 0.2:
            return
        self._slots_polled = t
        bound = cfg.resource_stabilization_timeout_ms / 1000
        slots = self.cluster.task_slots()
        if slots is None or self.stopping_for_rescale:  # slots unknown here; a stop is on its way
            return
        if slots != self._slots_seen:
            self._slots_seen = slots
            self.history.emit(TaskSlots(slots=slots))
        if self.lost_at is None and slots < self.slots and (self.coord is not None or self.deployments > 1):
            # Spark removed an executor the running deployment had a task on, or a redeployment
            # (a restart, a rescale) waits for more slots than there are
            self.lost_at = t
        if self.lost_at is not None:
            if t - self.lost_at >= bound and 1 <= slots < self.slots:
                self.adapt_to, self._adapted_on = fit(self.configured, slots), slots
                self.history.emit(
                    ResourcesLost(slots=slots, needed=self.slots, waited_ms=int((t - self.lost_at) * 1000))
                )
                # the job first: a task that ends cleanly after it cannot complete part of a relaunch
                self.cluster.sc.cancelJobGroup(self._job_group)
                self._broadcast(ctl.Cancel())  # tasks still running end now, not when Spark kills them
            return
        larger = fit(self.configured, max(slots, 1))
        if (
            self.coord is None
            or self.final_after is not None
            or self.rescales.busy
            or self.stopping_for_rescale
            or (sum(larger.parallelism.values()), larger.slots)
            <= (sum(self.graph.parallelism().values()), self.slots)  # more subtasks, or unshared
        ):
            self.capacity_since = None
            return
        self.capacity_since = self.capacity_since or t
        if t - self.capacity_since >= bound:
            self.capacity_since = None
            self.rescales.add(
                RescaleRequest("time_ms", 0, larger.parallelism, True, reason="adaptive", slots=larger.slots)
            )

    def _drop_adaptive_requests(self) -> None:
        self.rescales.drop("adaptive")

    def _holds_for_scale_up(self, exhausted_all: bool, now: int) -> bool:
        """The end of input waits while the job runs smaller than configured, so that it ends at its
        configured parallelism. Once every source is exhausted the wait follows progress, not the
        clock: it goes on while the cluster moves towards the slots (``SparkCluster.executors_coming``,
        polled every :data:`COMING_POLL_MS`: executors registering, a worker relaunching a lost
        executor's JVM and that JVM starting, task slots changing) and while the scale-up is on its
        way (its slots stabilizing, its stop-with-savepoint); it lets go when nothing moved towards
        the slots for the gate's limit (``input_held``'s limit_ms, at least 30 s on Spark), and the
        job ends at the parallelism it has (``input_released``)."""
        full = sum(self.configured.values())
        smaller = self.graph.parallelism() != self.configured  # a scale-up would change the parallelism
        if self.adaptive.enabled and smaller and not self.scale_up_given_up:
            if not exhausted_all:
                return True
            if self.held_for_scale_up is None or self._scale_up_watch is None:
                self.held_for_scale_up, self._coming_polled = now, None
                clock_s = lambda: self.now_ms() / 1000  # noqa: E731
                self._scale_up_watch = ProgressWatch(self.gate.limit_ms / 1000, clock=clock_s)
                waiting = [f"adaptive scale-up to {self.configured} on {full} task slots"]
                self.history.emit(InputHeld(waiting=waiting, limit_ms=self.gate.limit_ms))
            watch = self._scale_up_watch
            if self._coming_polled is None or now - self._coming_polled >= COMING_POLL_MS:
                self._coming_polled = now
                watch.observe(**self.cluster.executors_coming())
            watch.hold(self._scale_up_on_its_way())
            if watch.stalled() is None:
                return True
            self.scale_up_given_up = True  # nothing moved towards the slots: the job ends smaller
        if self.held_for_scale_up is not None:
            self.history.emit(InputReleased(waiting=[], held_ms=now - self.held_for_scale_up))
            self.held_for_scale_up = self._scale_up_watch = None
        return False

    def _scale_up_on_its_way(self) -> list[str]:
        """What brings the scale-up once the slots are there (each bounded on its own): they stay for
        the resource stabilization timeout, then a stop-with-savepoint restarts the job larger."""
        out = ["task slots for a scale-up stabilizing"] if self.capacity_since is not None else []
        if self.rescales.busy or any(r.reason == "adaptive" for r in self.rescales.pending(("time_ms",))):
            out.append("an adaptive scale-up under way")
        return out

    def _fail_deployment(self, reason: str) -> None:
        """Too many checkpoint failures: fail every task, so Spark relaunches the stage."""
        self.history.emit(JobFailover(reason=reason))
        self._crash(None)

    def _start(self) -> None:
        if not self.resume:
            super()._start()
        else:
            # checkpoints the dead driver had in flight never completed: abort them as it would have
            storage = self.master.storage
            for cid, d in storage.checkpoint_dirs(self.graph.name):
                if not (d / METADATA).is_file():
                    storage.discard(self.graph.name, cid)
                    self.history.emit(
                        CheckpointAborted.of(cid, AbortCause(AbortReason.COORDINATOR_SHUTDOWN))
                    )
            self.history.emit(
                DriverReplaced(
                    attempt=self.deployments,
                    checkpoint_id=self.master.latest_checkpoint_id(),
                    parallelism=self.graph.parallelism(),
                    master=self.cluster.master,
                )
            )
        host, port = self.server.endpoint
        self.history.emit(Listening(listener="coordinator", endpoint=f"{host}:{port}", tls=self.secret.tls))

    def _run_config(self) -> dict[str, Any]:
        adaptive = {
            "enabled": self.adaptive.enabled,
            "resource_stabilization_timeout_ms": self.adaptive.resource_stabilization_timeout_ms,
        }
        return {**self.run_info, "master": self.cluster.master, "adaptive_recovery": adaptive}

    def _drive(self) -> None:
        graph, why = self.graph, None
        while True:
            outcome = self._drive_once(graph, why)
            match outcome.kind:
                case "finished":
                    return
                case "rescale":
                    req = self.rescales.take()
                    assert req is not None
                    self.stopping_for_rescale = False
                    slots = self.cluster.task_slots()
                    if req.reason == "adaptive" and slots:  # what the slots allow now, not when queued
                        now_fit = fit(self.configured, slots)
                        req.parallelism, req.slots = now_fit.parallelism, now_fit.slots
                        self._adapted_on = slots
                    elif isinstance(req.parallelism, dict):  # a step naming some operators: the rest
                        req.parallelism = {**self.configured, **req.parallelism}  # as configured
                    graph, why = self._rescaled(req), None
                    self.slots = req.slots or len(graph.subtasks())
                    if req.reason != "adaptive":  # a planned rescale sets the parallelism to adapt from
                        self.configured = graph.parallelism()
                case "adapt":
                    target, self.adapt_to, self.lost_at = self.adapt_to, None, None
                    assert target is not None
                    self._drop_adaptive_requests()  # a scale-up queued before the loss is stale
                    old, self.slots = self.graph.parallelism(), target.slots
                    self._retire("resources lost")
                    self.master.record_rescale(
                        old, target.parallelism, False, reason="adaptive", slots=target.slots
                    )
                    graph = self.graph.with_parallelism(target.parallelism)
                    why = f"an executor was lost: {target.slots} task slots left"
                case "failed":
                    why = f"{_GAVE_UP}: {outcome.error}"

    def _shutdown(self) -> None:
        self.server.close()


_GAVE_UP = "Spark gave up on the stage"


@dataclass(frozen=True)
class _Outcome:
    """How one Spark job ended: "finished", "rescale", "adapt" (cancelled by adaptive recovery: resubmit
    smaller), or "failed" (Spark gave up on the stage: ``error``)."""

    kind: str
    error: str = ""


def _attempts_so_far(history: Path) -> int:
    """The first deployment number a replacement driver may use: after every one the history names
    (transaction names carry it, so a reused number could collide with a dead driver's)."""
    from harness.history import read_history

    if not history.is_file():
        return 0
    seen = [int(e["attempt"]) for e in read_history(history) if isinstance(e.get("attempt"), int)]
    return max(seen, default=-1) + 1


def _is_empty(e: BaseException) -> bool:
    import queue

    return isinstance(e, queue.Empty | TimeoutError)
