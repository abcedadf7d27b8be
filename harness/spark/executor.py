"""The ``spark`` executor's driver: the job's subtasks run as the tasks of one barrier-mode stage
(``RDD.barrier().mapPartitions``), followed by a shuffle so the barrier stage is a ShuffleMapStage,
which Spark relaunches as a whole when a task or an executor dies (a barrier ResultStage it never
retries). Every relaunch is a new *deployment*: the first task of a new attempt that registers makes
the driver retire the old checkpoint coordinator and plan a restore from the newest intact
checkpoint; every task of the deployment restores from it. When Spark gives up on the stage, the
driver's restart strategy resubmits the job (up to ``max_restarts``); a rescale stops the job (after
a savepoint, or at once) and resubmits it at the new parallelism. The coordinator, the history and
the chaos hooks live here, in the driver; tasks reach them over the coordinator link.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.coordinator import CheckpointConfig, CheckpointCoordinator, JobFailedError
from harness.history import HistoryWriter
from harness.input_gate import EndOfInputGate, hold_limit_ms
from harness.job import JobGraph, task_name
from harness.jobmaster import JobFailure, JobMaster, RescaleRequest, RescaleSchedule, RunSummary
from harness.run_store import RunStore
from harness.spark.cluster import SparkCluster
from harness.spark.inband_control import INBAND_MESSAGES, InbandFaults
from harness.spark.network import Endpoint, TaskNetwork, coordinator_link
from harness.spark.root_cause import root_cause
from harness.spark.task_runner import run_subtask
from harness.spark.transport import REJECTED, CoordinatorServer, RunSecret
from reference_impl.checkpoint import StateFileHandle

__all__ = ["SparkExecutor", "JOB_CODE_FAILED"]

# marks a task failure no restart can fix: the job's code does not load on the executor
JOB_CODE_FAILED = "statechaos: the job's code cannot be loaded on the executor"


def _stage_body(graph: JobGraph, run_dir: str, coordinators: dict[str, Endpoint], secret: RunSecret) -> Any:
    """The barrier stage's function. The run's secret travels inside it (Spark ships the closure to
    the executors), never on a command line, in a log or in a file. The job travels pickled, with the
    user's modules registered by value, so it is loaded on the executor where a failure can be told
    apart (its code cannot load there) from the job's own failures."""
    from pyspark import cloudpickle

    blob = cloudpickle.dumps(graph)  # user modules registered by value travel inside

    def body(it: Any) -> Any:
        import pickle
        import traceback

        from pyspark import BarrierTaskContext

        try:
            g = pickle.loads(blob)
        except Exception:  # e.g. a module the job imports is missing on the executor
            raise RuntimeError(f"{JOB_CODE_FAILED}\n{traceback.format_exc()}") from None
        list(it)
        ctx = BarrierTaskContext.get()
        yield run_subtask(g, run_dir, coordinators, secret, ctx.partitionId(), ctx, ctx.taskAttemptId())

    return body


@dataclass
class _Deployment:
    number: int
    graph: JobGraph
    checkpoint_path: str | None
    registered: set[str]
    restored: set[str]
    exhausted: set[str]
    ended: set[str] = field(default_factory=set)  # keyed subtasks end of input has passed
    input_ended: set[str] = field(default_factory=set)  # exhausted sources told to send end of input


class SparkExecutor:
    """Runs one job graph on a Spark cluster (a started :class:`SparkCluster`)."""

    def __init__(
        self,
        graph: JobGraph,
        run_dir: Path,
        checkpoint: CheckpointConfig,
        cluster: SparkCluster,
        seed: int = 0,
        hooks: Any = None,
        rescales: list[RescaleRequest] | None = None,
        max_restarts: int = 10,
        time_limit_s: float = 600,
        run_info: dict[str, Any] | None = None,
        failpoints_on: bool = False,
        network: TaskNetwork | None = None,
        resume: bool = False,
        tls: bool = False,
        authenticate: bool = True,
    ) -> None:
        graph.validate()
        self.graph = graph
        # absolute: executors run in their own working directories and must find the same files
        self.run_dir = Path(run_dir).resolve()
        self.cluster = cluster
        self.seed = seed
        self.hooks = hooks
        self.rescales = RescaleSchedule(list(rescales or []))
        self.time_limit_s = time_limit_s
        self.run_info = run_info or {}
        self.failpoints_on = failpoints_on
        self._t0 = self._started = time.monotonic()
        # resume: this driver replaces one that died; it goes on with the same history and storage
        self.resume = resume
        self.history = HistoryWriter(
            RunStore(self.run_dir).history, lambda: int((time.monotonic() - self._t0) * 1000), append=resume
        )
        prior = self.history.last_event if resume else None
        if prior is not None:  # history time goes on from where the dead driver stopped
            self._t0 -= (int(prior["t"]) + 1) / 1000
        self.master = JobMaster(graph, self.run_dir, checkpoint, self.history, max_restarts=max_restarts)
        self.lock = threading.RLock()
        self.network = network or TaskNetwork()
        # a fresh secret per driver: tasks of a dead driver's job cannot talk to its replacement
        # (authenticate=False only lets chaos.bench measure what authentication costs)
        self.secret = (
            RunSecret.generate(self.run_dir.name, tls=tls)
            if authenticate
            else RunSecret.unauthenticated(self.run_dir.name)
        )
        self.server = CoordinatorServer(self.secret, self.network.coordinator_bind)
        self.coord: CheckpointCoordinator | None = None
        self.dep: _Deployment | None = None
        self.deployments = _attempts_so_far(RunStore(self.run_dir).history) if resume else 0
        self.skews: dict[str, int] = {}
        # in-band process faults (#25): tasks act on their own executor when asked over their link
        self.inband = InbandFaults(
            self.server.send, self.history.emit, lambda: cluster.app_id, self._deployment_number
        )
        self.storage_mode: tuple[str | None, int] = (None, 0)
        self.records_emitted = 0
        self.completed = 0
        self.final_after: int | None = None
        self.finishing = False
        self.stopping_for_rescale = False
        self._gate: EndOfInputGate | None = None  # built on first use: hooks may be attached later
        self.root_cause = ""  # the first real error behind the last stage Spark gave up on

    def _deployment_number(self) -> int:
        return self.dep.number if self.dep else -1

    def now(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    # ------------------------------------------------------------------ hooks for the chaos layer

    def task_names(self) -> list[str]:
        g = self.dep.graph if self.dep else self.graph
        return [task_name(op, i) for op, i, _ in g.subtasks()]

    def channel_names(self) -> list[str]:
        g = self.dep.graph if self.dep else self.graph
        return [f"{u}->{d}" for u, d in g.channels()]

    def crash(self, target: str | None = None) -> None:
        if target not in self.task_names():
            raise ValueError(f"no subtask {target!r} (running: {', '.join(self.task_names())})")
        self.server.send(target, ("crash",))

    def delay_next_barrier(self, channel: str, delay_ms: int) -> None:
        if channel not in self.channel_names():
            raise ValueError(f"no channel {channel!r} (channels: {', '.join(self.channel_names())})")
        up, down = channel.split("->")
        self.server.send(up, ("delay_barrier", down, int(delay_ms)))

    def skew_clock(self, target: str, skew_ms: int) -> None:
        if target not in self.task_names():
            raise ValueError(f"no subtask {target!r} (running: {', '.join(self.task_names())})")
        self.skews[target] = int(skew_ms)
        self.server.send(target, ("skew", int(skew_ms)))

    def storage_gate(self, mode: str | None, delay_ms: int = 0) -> None:
        self.storage_mode = (mode, int(delay_ms))
        self.server.broadcast(("storage", mode, int(delay_ms)))

    def latest_checkpoint_dir(self) -> Path | None:
        return self.master.latest_checkpoint_dir()

    # ------------------------------------------------------------------ coordinator callbacks

    def _notify(self, what: str, cid: int) -> None:
        if what == "trigger":
            assert self.coord is not None
            kind = self.coord.pending[cid].kind
            assert self.dep is not None
            for op, i, stage in self.dep.graph.subtasks():
                if stage < 0:
                    self.server.send(task_name(op, i), ("trigger", cid, self.now(), kind))
        elif what == "complete":
            self.completed += 1
            self.server.broadcast(("complete", cid))
            if self.hooks is not None:
                self.hooks.on_checkpoint_completed(cid)
            self.rescales.on_completed(cid)
            self.rescales.check(self.now(), self.records_emitted, self.coord, cid)
            if self.final_after is not None and cid >= self.final_after and not self.finishing:
                self.finishing = True
                self.server.broadcast(("finish",))
        elif what == "abort":
            self.server.broadcast(("abort", cid))
            self.rescales.on_lost(cid)

    def _on_failpoint(self, task: str, name: str, target: str | None) -> None:
        action = self.hooks.on_failpoint(name, target) if self.hooks is not None else None
        if action is None:
            self.server.send(task, ("failpoint_reply", None, 0))
        else:
            self.server.send(task, ("failpoint_reply", action.action, int(action.delay_ms)))

    # ------------------------------------------------------------------ messages from tasks

    def _new_deployment(self, graph: JobGraph, reason: str | None) -> None:
        self.master.retire(self.coord, self.now(), f"job restart: {reason}" if reason else "redeploy")
        self.coord = None
        self.rescales.on_lost()  # a pending savepoint died with the deployment
        if reason is not None:
            self.master.failover(self.deployments, reason)
        plan = self.master.plan_restore(graph, self.deployments)
        self.dep = _Deployment(
            self.deployments, graph, plan.path(self.master.checkpoint_root), set(), set(), set()
        )
        self.deployments += 1
        self.final_after = None
        self.finishing = False

    def _handle(self, task: str, msg: Any) -> None:
        kind = msg[0]
        dep = self.dep
        if kind == REJECTED:  # a connection to the coordinator that failed the handshake, or stale
            _, peer, reason = msg
            self.history.emit("connection_refused", listener="coordinator", peer=peer, task=task, reason=reason)
        elif kind == "refused":  # a task's input gate refused a connection
            self.history.emit("connection_refused", listener=f"input gate of {task}", peer=msg[1], reason=msg[2])
        elif kind == "listening":  # a task's input gate is up: where (the history documents every listener)
            attempt = None if dep is None else dep.number
            self.history.emit("listening", listener=f"input gate of {task}", endpoint=msg[1], attempt=attempt)
        elif kind == "register":
            assert dep is not None
            if task in dep.registered:  # a new attempt of a task already deployed: Spark relaunched the stage
                self._new_deployment(dep.graph, f"task {task} restarted by Spark (stage relaunch)")
                dep = self.dep
                assert dep is not None
            dep.registered.add(task)
            deploy = (dep.number, dep.checkpoint_path, self.failpoints_on, self.skews.get(task, 0))
            self.server.send(task, ("deploy", *deploy, self.network.task_settings()))
            if self.storage_mode[0] is not None:
                self.server.send(task, ("storage", *self.storage_mode))
            if self.stopping_for_rescale:
                self.server.send(task, ("cancel",))
        elif kind == "restored":
            assert dep is not None
            dep.restored.add(task)
            if len(dep.restored) == len(self.task_names()) and self.coord is None:
                self.coord = self.master.new_coordinator(
                    dep.graph, self._notify, self.now(), failpoint=lambda n: self._driver_failpoint(n)
                )
        elif kind == "emit":
            self.history.emit(msg[1], **msg[2])
        elif kind == "stats":
            op, sub = task.rstrip("]").split("[")
            if msg[1]:
                self.history.emit("records_in", operator=op, subtask=int(sub), count=int(msg[1]))
            if msg[2]:
                self.history.emit("records_out", operator=op, subtask=int(sub), count=int(msg[2]))
                if dep is not None and op == dep.graph.source.name:
                    self.records_emitted += int(msg[2])
                    if self.hooks is not None:
                        self.hooks.on_records(self.records_emitted)
        elif kind in ("ack", "decline"):
            if dep is None or int(msg[1]) != dep.number or self.coord is None:
                return  # a zombie of an older deployment
            if kind == "ack":
                _, _, cid, op, sub, handle, extra = msg
                h = None if handle is None else StateFileHandle(**handle)
                self.coord.acknowledge(int(cid), op, int(sub), h, self.now(), extra)
            else:
                _, _, cid, op, sub, reason = msg
                self.coord.decline(int(cid), op, int(sub), reason, self.now())
        elif kind == "exhausted":
            if dep is not None:
                dep.exhausted.add(task)
        elif kind == "ended":
            if dep is not None:
                dep.ended.add(task)
        elif kind == "failpoint":
            self._on_failpoint(task, msg[1], msg[2])
        elif kind == "route":
            self.server.send(task, ("route", *self._route(str(msg[1]), (str(msg[2]), int(msg[3])))))
        elif kind in INBAND_MESSAGES:  # in-band process faults (#25): where a task runs, what it did
            self.inband.on_message(task, msg)

    def _route(self, link: str, real: Endpoint) -> Endpoint:
        router = self.network.router
        return real if router is None else router(link, real)

    def _driver_failpoint(self, name: str) -> None:
        if self.hooks is None:
            return
        action = self.hooks.on_failpoint(name, None)
        if action is not None and action.action == "crash":
            # the driver's "crash" between _metadata and commit: every task fails over
            for t in self.task_names():
                self.server.send(t, ("crash",))
        elif action is not None and action.delay_ms:
            time.sleep(action.delay_ms / 1000)

    # ------------------------------------------------------------------ the job

    def _submit(self, graph: JobGraph) -> tuple[threading.Thread, dict[str, Any]]:
        sc = self.cluster.sc
        n = len(graph.subtasks())
        result: dict[str, Any] = {}
        real = self.network.coordinator_endpoint(self.server.endpoint[1])
        coords = {
            t: self._route(coordinator_link(t), real)
            for t in (task_name(o, i) for o, i, _ in graph.subtasks())
        }
        body = _stage_body(graph, str(self.run_dir), coords, self.secret)

        def run() -> None:
            try:
                rdd = sc.parallelize(range(n), n).barrier().mapPartitions(body)
                result["tasks"] = rdd.map(lambda r: (0, r)).groupByKey(1).values().collect()
            except BaseException as e:  # reported to the driver loop
                result["error"] = e

        th = threading.Thread(target=run, name="spark-job", daemon=True)
        th.start()
        return th, result

    def _drive_once(self, graph: JobGraph, reason: str | None) -> str:
        """One Spark job: returns "finished", "rescale" or "failed" (Spark gave up on the stage)."""
        self._new_deployment(graph, reason)
        th, result = self._submit(graph)
        while th.is_alive():
            if time.monotonic() - self._started > self.time_limit_s:
                self.cluster.sc.cancelAllJobs()
                th.join(30)
                raise JobFailure(f"time limit of {self.time_limit_s:.0f} s reached")
            try:
                while True:
                    task, msg = self.server.get(timeout_s=0.005)
                    with self.lock:
                        self._handle(task, msg)
            except Exception as e:
                if isinstance(e, JobFailure):
                    raise
                if not _is_empty(e):
                    if isinstance(e, JobFailedError):
                        self._fail_deployment(str(e))
                    else:
                        raise
            with self.lock:
                now = self.now()
                if self.hooks is not None:
                    self.hooks.on_time(now)
                self.rescales.check(now, self.records_emitted, self.coord)
                if self.rescales.ready is not None and not self.stopping_for_rescale:
                    self.stopping_for_rescale = True
                    self.server.broadcast(("cancel",))
                if self.coord is not None and not self.stopping_for_rescale:
                    try:
                        if self.rescales.savepoint is None:
                            self.coord.tick(now)
                    except JobFailedError as e:
                        self._fail_deployment(str(e))
                    dep = self.dep
                    if dep is not None and self.final_after is None:
                        self._end_input_when_released(dep, now)
        th.join()
        if "error" in result:
            if self.stopping_for_rescale:
                return "rescale"
            text = str(result["error"])
            if JOB_CODE_FAILED in text:  # no restart can fix this: fail now, with the executor's traceback
                self._record_failure(result["error"])
                tb = text[text.index(JOB_CODE_FAILED) :].split("\n\tat ")[0]
                raise JobFailure(tb.strip())
            return "failed:" + self._record_failure(result["error"])
        if self.stopping_for_rescale:
            return "rescale"
        return "finished"

    def _record_failure(self, error: BaseException) -> str:
        """Spark gave up on the stage: keep its whole error in ``logs/spark-error.txt`` and the root
        cause (the executor's Python traceback, not Py4J's wrapper); returns the cause's last line."""
        self.root_cause = root_cause(error)
        with contextlib.suppress(Exception):
            logs = RunStore(self.run_dir).logs
            logs.mkdir(parents=True, exist_ok=True)
            with open(logs / "spark-error.txt", "a", encoding="utf-8") as fh:
                fh.write(f"--- t={self.now()} ms\n{error}\n")
        last = [ln for ln in self.root_cause.splitlines() if ln.strip()]
        return last[-1].strip()[:300] if last else _short(error)

    def _end_input_when_released(self, dep: _Deployment, now: int) -> None:
        """An exhausted source keeps its end of input back while a planned trigger is pending (its
        channels still carry barriers); once every source is exhausted and the gate releases, end of
        input flows, and when it has passed every keyed subtask the final checkpoint is triggered."""
        exhausted_all = len(dep.exhausted) == sum(src.parallelism for src, _ in dep.graph.sources())
        if not self._input_held_gate().releases(exhausted_all, now):
            return
        for t in sorted(dep.exhausted - dep.input_ended):
            self.server.send(t, ("end_input",))
            dep.input_ended.add(t)
        if exhausted_all and len(dep.ended) == sum(st.parallelism for st in dep.graph.stages):
            assert self.coord is not None
            self.final_after = self.coord.next_id
            if not self.coord.pending:
                self.coord.trigger(now)

    def _input_held_gate(self) -> EndOfInputGate:
        if self._gate is None:
            limit = hold_limit_ms(self.master.config.interval_ms, 30_000)
            self._gate = EndOfInputGate(self.hooks, self.rescales, self.history.emit, limit)
        return self._gate

    def _fail_deployment(self, reason: str) -> None:
        """Too many checkpoint failures: fail every task, so Spark relaunches the stage."""
        self.history.emit("job_failover", reason=reason)
        for t in self.task_names():
            self.server.send(t, ("crash",))

    def run(self) -> RunSummary:
        if self.resume:
            # checkpoints the dead driver had in flight never completed: abort them as it would have
            storage = self.master.storage
            for cid, d in storage.checkpoint_dirs(self.graph.name):
                if not (d / "_metadata").is_file():
                    storage.discard(self.graph.name, cid)
                    self.history.emit(
                        "checkpoint_aborted",
                        checkpoint_id=cid,
                        reason="in flight when the previous driver died",
                    )
            self.history.emit(
                "driver_replaced",
                attempt=self.deployments,
                checkpoint_id=self.master.latest_checkpoint_id(),
                parallelism=self.graph.parallelism(),
                master=self.cluster.master,
            )
            return self._run()
        self.history.emit(
            "run_start",
            job=self.graph.name,
            executor="spark",
            seed=self.seed,
            parallelism=self.graph.parallelism(),
            max_parallelism=self.graph.max_parallelism,
            config={**self.run_info, "master": self.cluster.master},
        )
        return self._run()

    def _run(self) -> RunSummary:
        host, port = self.server.endpoint
        self.history.emit("listening", listener="coordinator", endpoint=f"{host}:{port}", tls=self.secret.tls)
        status, reason = "finished", "all input processed and committed"
        graph, why = self.graph, None
        try:
            while True:
                outcome = self._drive_once(graph, why)
                if outcome == "finished":
                    break
                if outcome == "rescale":
                    req = self.rescales.take()
                    assert req is not None
                    self.stopping_for_rescale = False
                    old = graph.parallelism()
                    graph = graph.with_parallelism(req.parallelism)
                    self.master.retire(self.coord, self.now(), "rescale")
                    self.coord = None
                    self.master.record_rescale(old, graph.parallelism(), req.savepoint)
                    why = None
                    continue
                why = f"Spark gave up on the stage: {outcome[7:]}"
        except JobFailure as e:
            status, reason = "failed", str(e)
        except BaseException as e:  # Ctrl-C or a driver bug: the history must not say "finished"
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            reason = f"{type(e).__name__}: {e}".rstrip(": ")
            raise
        finally:
            if self.hooks is not None:
                try:
                    self.hooks.heal_all()
                except Exception:
                    pass
            self.master.retire(self.coord, self.now(), "run end")
            self.server.close()
            self.master.end_run(status, reason, self.deployments)
        return RunSummary(
            status,
            reason,
            self.deployments,
            self.completed,
            self.records_emitted,
            self.now(),
            graph.parallelism(),
            simulated=False,
            root_cause=self.root_cause if status == "failed" else "",
        )


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


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"
