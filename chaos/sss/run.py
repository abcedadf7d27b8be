"""Run a Structured Streaming query under faults and judge it against the reference model.

The query's driver runs as a child process (:mod:`harness.sss.driver`) in its own process group, so
a driver kill takes its JVM and local-cluster executors with it, as losing the driver host would.
This process feeds the file source (one CSV file whenever the previous one has been planned into a
batch), applies the fault plan when enough micro-batches have committed, and finally stops the query
and runs the oracles. History events carry the micro-batch id each fault hit (the first batch not yet
committed when it struck).

On ``docker`` the driver stays on this host and the executors run in the compose stack's worker
containers (:func:`chaos.cluster.docker_spark.docker_cluster_for`): the run directory is bind-mounted
at the same path into every worker, so the file source and the checkpoint location are the same
files for the driver and the executors. Worker faults act on those containers. On a ``spark://``
master the run directory must be reachable at the same path by the cluster's executors (a shared
file system); process and damage faults need local executors and are refused there.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.metadata
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.faults import FAULT_KINDS
from chaos.faults.registry import SssFacts, SssTarget
from chaos.injectors.base import Injector, InjectorError
from chaos.schedule import Nemesis, PlannedFault
from chaos.scope import RunScope
from chaos.sss.driver_process import DriverProcess
from harness.engines import STRUCTURED_STREAMING as ENGINE
from harness.events import (
    BatchCommitted,
    BatchPlanned,
    DriverFailed,
    DriverStart,
    DriverStop,
    Event,
    FaultArmed,
    FaultDeferred,
    FaultEnd,
    FaultSkipped,
    FaultStart,
    JobRestart,
    RunStart,
    TimeLimit,
)
from harness.history import HistoryWriter
from harness.oracles.fault_schedule import planned_fault
from harness.progress import ProgressWatch
from harness.run_store import RunStore
from harness.spark.cluster import SparkEnvironmentError
from harness.sss.checkpoint_log import committed_batches, read_offsets, source_files
from harness.sss.deferred_state import read_deferred
from harness.sss.errors import spark_error_gist
from harness.sss.oracles import SssCheck, check_run
from harness.sss.outcome import SssOutcome
from harness.sss.pyspark_env import PysparkEnvError, check_java_for, ensure_env
from harness.sss.query import QuerySpec
from harness.sss.query_run import EXIT_NO_SPARK, transient
from harness.sss.sink import ARMED as SINK_ARMED
from harness.sss.sink import RELEASE as SINK_RELEASE
from harness.sss.sink import arm_sink, sink_hit
from harness.sss.spec import DEFAULT_MASTER, SssSpec
from harness.sss.user_error import raised_in_spark

__all__ = ["SssFault", "SssRun", "SssOutcome", "run_sss", "planned_faults", "sss_facts"]


@dataclass(frozen=True)
class SssFault:
    """``kind``: ``kill_executor``, ``pause_executor`` (SIGSTOP for ``seconds``, then SIGCONT),
    ``kill_driver`` (then restart from the checkpoint), or a damage class of
    :data:`chaos.faults.checkpoint_damage.DAMAGE_CLASSES` (driver killed, checkpoint damaged, restart); on docker
    also ``kill_worker`` (the container stays dead), ``stop_worker``, ``pause_worker`` and
    ``partition_worker`` (undone after ``seconds``), and ``network``: ``toxic`` (a Toxiproxy toxic
    or ``disable``) on the driver<->executor link for ``seconds``.
    It strikes once ``after_batches`` micro-batches have committed, and no later batch gets input
    before it has: batch ``after_batches`` runs under it whatever the machine's speed."""

    kind: str
    after_batches: int
    seconds: float = 5.0
    # ``network`` (docker): a Toxiproxy toxic on the driver's link (chaos.sss.driver_link) for ``seconds``
    toxic: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    stream: str = "downstream"
    process: str = "worker"  # kill_python_worker: the task's Python ``worker`` or its ``daemon``
    at: str = ""  # kill_driver/kill_executor: during_sink_write or after_sink_write (harness.sss.sink)

    # what the Nemesis reads of a planned fault (chaos.schedule.FaultEntry)
    @property
    def target(self) -> str | None:
        return None  # the kind's injector picks one (an executor, a worker, the driver)

    @property
    def duration_ms(self) -> int:
        return int(self.seconds * 1000)


def sss_facts(kind: str) -> SssFacts:
    """How fault kind ``kind`` applies to a query (:mod:`chaos.faults`); ValueError when it does not."""
    k = FAULT_KINDS.get(kind)
    if k is None or k.sss is None:
        raise ValueError(f"fault kind {kind!r} does not apply to a Structured Streaming query")
    return k.sss


def planned_faults(faults: list[SssFault], seed: int) -> list[PlannedFault]:
    """The query's faults as the Nemesis plans them, in the order they strike: each once
    ``after_batches`` micro-batches have committed (trigger kind ``batches``), with a random source of
    its own from the seed."""
    rng = random.Random(f"statechaos-schedule-{seed}")
    ordered = sorted(faults, key=lambda f: f.after_batches)
    return [PlannedFault(i + 1, f, "batches", f.after_batches, rng.getrandbits(32)) for i, f in enumerate(ordered)]


@dataclass
class SssRun:
    spec: SssSpec | QuerySpec  # a processor/function against the model, or a user's query against the replay
    # one CSV file per element, appended in order; for a QuerySpec each element maps input name -> rows
    inputs: list[list[dict[str, Any]]] | list[dict[str, list[dict[str, Any]]]]
    workdir: Path
    faults: list[SssFault] = field(default_factory=list)
    master: str = DEFAULT_MASTER  # or "docker", or a spark:// URL
    trigger_ms: int = 1000
    tail_ms: int = 0  # keep running until a batch this long after the last input's batch (timers)
    time_limit_s: float | None = None  # an overall cap, if any; the run is judged stuck on ``stall_s``
    stall_s: float = 120.0  # no batch planned or committed, no driver ready, this long with work pending
    sink: dict[str, str] | None = None  # the user's {foreach_batch, read} (harness.sss.sink), else ours
    seed: int = 0
    differential: bool = False  # also read Spark's state after every committed batch and compare each
    pyspark: str | None = None  # the query's PySpark (a cached venv, harness.sss.pyspark_env); None: ours
    spark_conf: dict[str, str] = field(default_factory=dict)  # the driver's settings over ours (spark_conf())


class QueryHistory:
    """The query run's history (``history.jsonl``), written as it goes so a long run can be followed.
    Fault windows are numbered as the runtime's (``fault_start``/``fault_end`` with a ``fault_id``,
    docs/runtime-contract.md), so the story, the timeline and Allure show them; each event type's count
    is a progress signal, so a stall names what stopped (a batch planned or committed, a fault, a
    driver start)."""

    def __init__(self, writer: HistoryWriter, watch: ProgressWatch, next_batch: Callable[[], int]) -> None:
        self.events: list[Event] = []
        self._writer = writer
        self._watch = watch
        self._next_batch = next_batch
        self._counts: collections.Counter[str] = collections.Counter()
        self._open: dict[int, int] = {}  # id(injector) -> fault_id of its fault_start
        self.batch: int | None = None  # the batch a fault strikes inside (a sink window), else the next one
        self._striking: tuple[int, str, int] = (0, "", 0)  # the batch, trigger and id of the fault now striking
        self._armed: dict[str, list[tuple[int, int]]] = {}  # kind -> (fault_id, batch) armed, not yet struck

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)
        self._writer.emit(ev)
        self._writer.flush()
        self._counts[ev.TAG] += 1
        self._watch.observe(**{ev.TAG: self._counts[ev.TAG]})

    def fault_start(self, inj: Injector | None, batch: int | None, trigger: str, described: dict[str, Any],
                    fault_id: int, **extra: Any) -> None:  # fmt: skip
        """``described``: the injector's kind, target and parameters (kept at the top level of the event);
        ``fault_id``: the planned fault's (run_start's plan), which each act of the fault carries."""
        d = dict(described)
        if inj is not None and not inj.instant:
            self._open[id(inj)] = fault_id
        self(FaultStart(fault_id=fault_id, kind=d.pop("kind"), target=d.pop("target", None), trigger=trigger,
                        details=d.pop("details", {}), extra={"batch": batch, **d, **extra}))  # fmt: skip

    def fault_end(self, inj: Injector, batch: int) -> None:
        d = inj.describe()
        self(FaultEnd(fault_id=self._open.pop(id(inj), None), kind=d.pop("kind"), extra={"batch": batch, **d}))

    # ---- the Nemesis' faults (chaos.schedule.FaultEvents), named by the micro-batch they hit
    def _batch(self) -> int:
        return self.batch if self.batch is not None else self._next_batch()

    def started(self, p: PlannedFault, details: dict[str, Any], target: str | None, trigger: str) -> None:
        self._striking = (self._batch(), trigger, p.fault_id)
        if getattr(p.injector, "armed", False):  # struck later by the query's own code: armed now
            opts = {k: v for k, v in details.items() if k in ("process", "at")}
            self._armed.setdefault(p.fault.kind, []).append((p.fault_id, self._striking[0]))
            self(FaultArmed(kind=p.fault.kind, batch=self._striking[0], trigger=trigger, fault_id=p.fault_id, **opts))
            return
        self.fault_start(p.injector, self._striking[0], trigger, details, p.fault_id)

    def failed(self, p: PlannedFault, target: str | None, error: str, trigger: str) -> None:
        self(FaultSkipped(kind=p.fault.kind, batch=self._batch(), why=error, fault_id=p.fault_id))

    def ended(self, p: PlannedFault, error: str | None = None) -> None:
        if error is not None:
            self(FaultSkipped(kind=p.fault.kind, batch=self._batch(), why=f"its injector failed to start: {error}",
                              fault_id=p.fault_id))  # fmt: skip
        elif p.injector is not None and not p.injector.instant:
            self.fault_end(p.injector, self._batch())

    def part(self, inj: Injector, **extra: Any) -> None:
        batch, trigger, fid = self._striking
        self.fault_start(inj, batch, trigger, inj.describe(), fid, **extra)

    def deferred(self, kind: str, why: str) -> None:
        self(FaultDeferred(kind=kind, batch=self._striking[0], why=why, fault_id=self._striking[2]))

    def _take_armed(self, kind: str) -> tuple[int, int | None]:
        """The oldest armed fault of ``kind`` not yet struck: (its fault id, the batch it was armed for)."""
        queue = self._armed.get(kind)
        return queue.pop(0) if queue else (-1, None)

    def confirmed(self, kind: str, target: str, trigger: str, **extra: Any) -> None:
        fid, batch = self._take_armed(kind)
        self.fault_start(None, batch, trigger, {"kind": kind, "target": target}, fid, **extra)

    def skipped(self, kind: str, why: str, armed_batch: bool = True) -> None:
        fid, batch = self._take_armed(kind)
        self(FaultSkipped(kind=kind, batch=batch if armed_batch else self._next_batch(), why=why, fault_id=fid))


class _Query:
    """The query's driver and executors as faults act through them (:class:`chaos.faults.registry.QueryControls`)."""

    def __init__(self, start: Callable[[], DriverProcess | None], history: QueryHistory) -> None:
        self.driver: DriverProcess | None = None
        self.restarts = 0
        self._start, self._history = start, history

    def kill_driver(self) -> None:
        if self.driver is not None:
            self.driver.kill()

    def restart_driver(self) -> None:
        self.restarts += 1
        self.driver = self._start()

    def executor_pids(self) -> list[int]:
        return self.driver.executor_pids() if self.driver is not None else []

    def part(self, inj: Injector, **extra: Any) -> None:
        self._history.part(inj, **extra)

    def deferred(self, kind: str, why: str) -> None:
        self._history.deferred(kind, why)

    def confirmed(self, kind: str, target: str, trigger: str, **extra: Any) -> None:
        self._history.confirmed(kind, target, trigger, **extra)

    def skipped(self, kind: str, why: str, armed_batch: bool = True) -> None:
        self._history.skipped(kind, why, armed_batch)


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text("".join(",".join(str(r[c]) for c in columns) + "\n" for r in rows))
    tmp.rename(path)


def _write_input(w: Path, spec: SssSpec | QuerySpec, n: int, step: Any) -> None:
    """Input step ``n``: one CSV file (a user's query: one per input, in ``input/<name>/``)."""
    if isinstance(spec, SssSpec):
        _write_csv(RunStore(w).query_input / f"part-{n:05d}.csv", step, spec.input_columns())
        return
    for name in spec.inputs:
        (RunStore(w).query_input / name).mkdir(parents=True, exist_ok=True)
        rows = step.get(name, []) if spec.several else step
        _write_csv(RunStore(w).query_input / name / f"part-{n:05d}.csv", rows, spec.columns(name))


def _consumed(checkpoint: Path, spec: SssSpec | QuerySpec) -> int:
    """How many input steps every source has planned into a batch."""
    if isinstance(spec, SssSpec):
        return sum(len(v) for v in source_files(checkpoint).values())
    return min(sum(len(v) for v in source_files(checkpoint, s).values()) for s in range(len(spec.inputs)))


def run_sss(run: SssRun) -> SssOutcome:
    """Run ``run`` to the end of its input (or its time limit) and judge it."""
    run.spec.validate()
    run.workdir.mkdir(parents=True, exist_ok=True)
    python = None
    # the user's version (unless it is ours): a Java it supports, and its venv (built once)
    if run.pyspark is not None and run.pyspark != importlib.metadata.version("pyspark"):
        try:
            check_java_for(run.pyspark)
            python = ensure_env(run.pyspark, say=lambda m: print(m, file=sys.stderr, flush=True))
        except PysparkEnvError as e:
            raise SparkEnvironmentError(str(e)) from None
    with contextlib.ExitStack() as stack:
        docker = None
        if run.master == "docker":
            from chaos.cluster.docker_spark import docker_cluster_for

            docker = stack.enter_context(docker_cluster_for(run.workdir, slots=2))
        link = None
        if linked := [f.kind for f in run.faults if sss_facts(f.kind).link]:
            if docker is None:
                raise InjectorError(f"{linked[0]} faults on a Structured Streaming query need cluster docker "
                                    "(docs/structured-streaming.md: what a toxic can reach)")  # fmt: skip
            from chaos.sss.driver_link import DriverLink

            link = DriverLink(docker, run.workdir.name)
            stack.callback(link.close)
        return _run(run, docker, link, python)


def _run(run: SssRun, docker: Any, link: Any, python: Path | None = None) -> SssOutcome:
    w = run.workdir
    RunStore(w).query_input.mkdir(parents=True, exist_ok=True)
    master, kwargs = (docker.master_url, docker.spark_kwargs()) if docker else (run.master, {})
    if run.spark_conf:  # the user's settings, under any the run's own wiring needs (a toxic's ports)
        kwargs["extra_conf"] = {**run.spark_conf, **kwargs.get("extra_conf", {})}
    if link is not None:
        kwargs["extra_conf"] = {**kwargs.get("extra_conf", {}), **link.conf}
    if docker:
        # transformWithStateInPandas also starts a Python runner on the driver, with the executors'
        # Python: a name both resolve on their PATH (the image's venv leads the containers' PATH, this
        # interpreter's folder the driver's), not the image's absolute path
        kwargs["executor_python"] = "python3"
    what = "query" if isinstance(run.spec, QuerySpec) else "spec"
    RunStore(w).query_settings.write_text(json.dumps({what: json.loads(run.spec.to_json()), "master": master,
                                            "cluster_kwargs": kwargs, "trigger_ms": run.trigger_ms,
                                            "state_every_batch": run.differential, "sink": run.sink,
                                            "python_fault_file": None, **_driver_settings(run)}))  # fmt: skip
    t0 = time.monotonic()
    history = HistoryWriter(RunStore(w).history, clock=lambda: int((time.monotonic() - t0) * 1000))
    failures: list[str] = []
    raised = Raised(run.spec.builder if isinstance(run.spec, QuerySpec) else run.spec.processor)
    checkpoint = RunStore(w).query_checkpoint

    # the run is stuck when no event (a batch planned or committed, a fault, a driver start) came for
    # the stall bound: each event type's count is a progress signal, so the stall names what stopped
    watch = ProgressWatch(run.stall_s)
    emit = QueryHistory(history, watch, lambda: _next_batch(checkpoint))
    planned = planned_faults(run.faults, run.seed)

    def start() -> DriverProcess | None:
        n = (
            sum(1 for p in RunStore(w).driver_starts.glob("[0-9]*") if p.name.isdigit())
            if RunStore(w).driver_starts.exists()
            else 0
        )
        d = DriverProcess(w, "harness.sss.query_driver" if isinstance(run.spec, QuerySpec) else "harness.sss.driver",
                          python)  # fmt: skip
        emit(DriverStart(start=n, next_batch=_next_batch(checkpoint)))
        if n:
            done = committed_batches(checkpoint)
            emit(JobRestart(attempt=n, reason="driver restarted from the checkpoint location",
                            checkpoint_id=f"commits/{max(done)}" if done else "none (no batch committed)"))  # fmt: skip
        while watch.stalled() is None and not over_time():
            if (RunStore(w).driver_starts / f"{n}.ready").exists():
                return d
            # the driver's own milestones are progress: its Spark session up (a JVM and executors
            # to start, which took over 80 s on a loaded machine), then its query
            watch.observe(driver_spark_up=sum(1 for _ in RunStore(w).driver_starts.glob("*.spark")))
            if d.proc.poll() == EXIT_NO_SPARK:
                d.kill()
                raise SparkEnvironmentError(_failure(w, "the query's driver could not start Spark"))
            if d.proc.poll() is not None:
                failures.append(_failure(w, f"driver start {n} exited {d.proc.returncode}", raised))
                emit(DriverFailed(start=n, returncode=d.proc.returncode))
                d.kill()
                return None
            time.sleep(0.1)
        stalled.append(f"driver start {n} was not running its query after {run.stall_s:.0f} s")
        d.kill()
        return None

    def over_time() -> bool:
        return run.time_limit_s is not None and time.monotonic() - t0 > run.time_limit_s

    stalled: list[str] = []
    query = _Query(start, emit)
    scope = RunScope(f"sss-{w.name}", pids=query.executor_pids, paths=[checkpoint],
                     compose_project=docker.stack.project if docker else None)  # fmt: skip
    # every fault is its kind's injector (chaos.faults: its ``sss`` facts) on the run's target, fired and
    # healed by the Nemesis; this loop places them: once ``after_batches`` batches committed, inside
    # a batch's sink window (``at``), or on the idle query at the end
    target = SssTarget(docker, link, scope, query, w, checkpoint)
    nemesis = Nemesis(planned, lambda p, rng: sss_facts(p.fault.kind).injector(p.fault, target, rng), emit,
                      events=emit)  # fmt: skip

    def now_ms() -> int:
        return int((time.monotonic() - t0) * 1000)

    # the plan, as the runtime records it: the fault_schedule oracle judges the history against it
    emit(RunStart(job=run.spec.builder if isinstance(run.spec, QuerySpec) else run.spec.processor,
                  executor=ENGINE, seed=run.seed, parallelism={}, max_parallelism=0,
                  config={"master": master, "trigger_ms": run.trigger_ms},
                  plan={"faults": [planned_fault(p.fault_id, p.fault.kind, p.trigger) for p in planned],
                        "rescales": 0}))  # fmt: skip

    def fire(p: PlannedFault, trigger: str, batch: int | None = None) -> tuple[bool, bool]:
        """Fire ``p``: (whether it struck, whether it restarted the driver to do so)."""
        restarts, emit.batch = query.restarts, batch
        try:
            nemesis.on_time(now_ms())
            return nemesis.fire(p, trigger), query.restarts != restarts
        finally:
            emit.batch = None

    # the kinds the query's own code strikes once armed (a Python worker kill): each watches for it
    watched = [(k, w_) for k in dict.fromkeys(f.kind for f in run.faults) if (w_ := sss_facts(k).watch) is not None]

    def watch_armed(final: bool) -> None:
        for kind, watch_kind in watched:
            watch_kind(kind, target, final)

    sink_armed: list[PlannedFault] = []  # armed in the sink's wrapper, not yet reached (one at a time)
    sink_file = -1  # the input file whose batch the armed sink fault waits for
    # with no timers, Spark runs no batch without input: there is no tail to wait for
    # a builder's query may hold event-time state: its tail (and the idle end below) closes windows
    tail_ms = run.tail_ms if isinstance(run.spec, QuerySpec) or run.spec.timers_on else 0
    # (after how many committed batches, the fault): a deferred fault is placed after a later batch
    pending: list[tuple[int, PlannedFault]] = [(p.value, p) for p in planned]
    written = 0
    stuck = False
    seen: tuple[int, int] = (-1, -1)  # the newest planned and committed batch already in the history
    last_change = time.monotonic()  # when ``seen`` last moved
    try:
        query.driver = start()
        while (driver := query.driver) is not None:
            done = committed_batches(checkpoint)
            before, seen = seen, _progress(checkpoint, seen, emit)
            if seen != before:
                last_change = time.monotonic()
            if driver.proc.poll() is not None:
                failures.append(_failure(w, f"driver exited {driver.proc.returncode} during the run", raised))
                emit(DriverFailed(returncode=driver.proc.returncode, next_batch=_next_batch(checkpoint)))
                driver.kill()
                query.driver = None
                break
            consumed = _consumed(checkpoint, run.spec)
            # a due fault strikes before the next batch gets input, so batch ``after_batches`` runs
            # under it however fast the machine finished the ones before (``seen[0]``: newest planned)
            # (but the file an armed sink fault waits for is written, or neither could strike)
            held = bool(pending) and seen[0] + 1 >= pending[0][0]
            held = held and not (sink_armed and written <= sink_file)
            if not held and written < len(run.inputs) and consumed >= written:
                _write_input(w, run.spec, written, run.inputs[written])
                written += 1
            if pending and _sink_window(pending[0][1]) and not sink_armed and len(done) >= pending[0][0]:
                after, p = pending.pop(0)  # placed by the sink's wrapper in the batch that reads the next file
                arm_sink(w, _sink_window(p), written)  # the batch that reads the next file (held until now)
                sink_file = written
                sink_armed.append(p)
                emit(FaultArmed(kind=p.fault.kind, at=_sink_window(p), batch=_next_batch(checkpoint),
                                trigger=f"{after} batches committed", fault_id=p.fault_id))  # fmt: skip
                continue
            if sink_armed and (hit := sink_hit(w)) is not None:
                _, restarted = fire(sink_armed.pop(0), f"{hit[1]} of batch {hit[0]}", batch=hit[0])
                if not restarted:  # the driver lives on: its sink goes on writing
                    (w / SINK_RELEASE).write_text("")
                continue
            if pending and not _sink_window(pending[0][1]) and len(done) >= pending[0][0]:
                after, p = pending[0]
                struck, restarted = fire(p, f"{after} batches committed")
                if struck:
                    pending.pop(0)
                    continue
                if restarted:  # what it needed went away meanwhile (a snapshot was uploaded): later
                    pending[0] = (len(done) + 1, p)
                    continue
                # nothing to act on yet (no file a restart would read): it waits, and holds the input
            if pending and written == len(run.inputs) and _finished(checkpoint, written, tail_ms):
                after, p = pending.pop(0)
                if _sink_window(p):
                    nemesis.skip(p, f"no batch reached the sink after {after} batches committed")
                elif p.not_ready is None:  # every input committed, nothing due: strike now, on an idle query
                    struck, _ = fire(p, "every input committed (the query is idle)")
                    if not struck:
                        nemesis.skip(p, f"nothing to strike on the idle query: {p.not_ready}")
                else:
                    nemesis.skip(p, f"nothing to strike after {after} batches committed: {p.not_ready}")
                continue
            watch_armed(final=False)
            nemesis.on_time(now_ms())  # heals the faults whose duration is over
            if (
                not pending
                and not nemesis.active
                and written == len(run.inputs)
                and _finished(checkpoint, written, tail_ms)
                and (isinstance(run.spec, SssSpec) or _idle(seen, last_change, run.trigger_ms)
                     or _settled(checkpoint))
            ):
                break
            tasks, stages = _spark_work(w)  # a long batch whose Spark work goes on is slow, not stuck
            watch.observe(spark_tasks_finished=tasks, spark_stages_seen=stages)
            # a planned pause (a paused executor or worker, a cut link) holds the query: its time does not count
            watch.hold([_paused(p.injector) for p in nemesis.active if p.injector is not None])
            if (why := watch.stalled()) is not None or over_time():
                stuck = True
                what = _stall(checkpoint, written, len(run.inputs), tail_ms, run.stall_s, over_time())
                stalled.append(f"{what} ({why})" if why else what)
                emit(TimeLimit(committed=len(done), why=stalled[-1]))
                break
            time.sleep(0.1)
        watch_armed(final=True)
        for p in sink_armed:
            nemesis.skip(p, f"no batch reached the sink's {_sink_window(p)} after it was armed")
        (w / SINK_ARMED).unlink(missing_ok=True)
        if query.driver is not None:
            rc = query.driver.stop(w, stall_s=run.stall_s)  # ends on lack of progress, not after a fixed time
            emit(DriverStop(returncode=rc))
            if rc not in (0,):
                failures.append(_failure(w, f"driver stop returned {rc}", raised))
    finally:
        for p in nemesis.active:  # a planned pause cut short (a stall, Ctrl-C): nothing stays paused
            if p.injector is not None:
                p.injector.stop()
        if query.driver is not None and query.driver.proc.poll() is None:
            query.driver.kill()
        history.close()
    if isinstance(run.spec, QuerySpec):
        from harness.sss.replay_oracle import check_replay

        check: SssCheck = check_replay(w, run.spec, written, python=python, version=run.pyspark)
    else:
        read_deferred(w)  # a pyspark without a state data source: its checkpoint read by ours
        check = check_run(w, run.spec, written)
    processor_errors = [f"in Spark: {e}" for e in raised.errors] + check.processor_errors
    machine = [f for f in failures if transient(f)]
    failures = [f for f in failures if not transient(f)]
    if processor_errors:
        verdict = "processor_raised"
    elif failures or check.refused:
        verdict = "refused"
    elif [v for v in check.violations if not v.startswith("liveness:")] or (check.violations and not stalled):
        verdict = "caught"
    elif stuck or stalled:  # unread input of a run that stopped progressing: stuck, not a wrong result
        verdict = "stuck"
    elif machine or getattr(check, "unknown", None) or getattr(check, "state_unknown", None):
        verdict = "unknown"
    else:
        verdict = "pass"
    starts = sum(1 for p in RunStore(w).driver_starts.glob("[0-9]*") if p.name.isdigit())
    return SssOutcome(verdict, check, emit.events, starts, failures, processor_errors, "; ".join(stalled),
                      run.pyspark or importlib.metadata.version("pyspark"), machine)  # fmt: skip


def _driver_settings(run: SssRun) -> dict[str, Any]:
    """What the query's driver needs for the run's faults (their kinds' ``sss.settings``)."""
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(f.kind for f in run.faults):
        if (settings := sss_facts(kind).settings) is not None:
            out.update(settings(run.workdir))
    return out


def _sink_window(p: PlannedFault) -> str:
    """The sink window a query's fault strikes inside (``at``), or ""."""
    return p.fault.at if isinstance(p.fault, SssFault) else ""


def _next_batch(checkpoint: Path) -> int:
    done = committed_batches(checkpoint)
    return max(done) + 1 if done else 0


def _failure(w: Path, what: str, raised: Raised | None = None) -> str:
    """What the driver's ``failure.txt`` says, in one line; when Spark's error is the user's processor
    raising (its file in the Python worker's traceback), also added to ``raised``."""
    f = RunStore(w).driver_failure
    text = f.read_text().strip() if f.exists() else ""
    with contextlib.suppress(FileNotFoundError):
        f.rename(RunStore(w).earlier_failure(time.monotonic_ns()))
    gist = spark_error_gist(text)
    line = f"{what}: {gist}" if gist else what
    if raised is not None and (where := raised_in_spark(text, raised.processor)):
        raised.errors.append(f"{where} (Spark: {gist})")
    return line


@dataclass
class Raised:
    """The user's processor raising inside Spark, as the driver's failures show it."""

    processor: str
    errors: list[str] = field(default_factory=list)


def _paused(inj: Injector) -> str:
    """A planned pause as the stall message names it: ``pause_executor on executor:1``."""
    d = inj.describe()
    return f"{d.get('kind', type(inj).__name__)} on {d.get('target', '?')}"


def _spark_work(w: Path) -> tuple[int, int]:
    """The Spark tasks the query's driver starts saw finish and the stages they saw run, summed over
    the starts (:class:`harness.sss.query_run.FinishedTasks`)."""
    starts = RunStore(w).driver_starts
    tasks = stages = 0
    for path in starts.glob("*.tasks") if starts.exists() else ():
        with contextlib.suppress(OSError, ValueError):
            t, s = (int(x) for x in path.read_text().split())
            tasks, stages = tasks + t, stages + s
    return tasks, stages


def _stall(checkpoint: Path, written: int, files: int, tail_ms: int, bound_s: float, capped: bool) -> str:
    """What stopped progressing, in words, for the stuck verdict."""
    done = set(committed_batches(checkpoint))
    offsets = {b.batch: b.source_offset for b in read_offsets(checkpoint)}
    read = max((offsets.get(b, -1) for b in done), default=-1) + 1
    when = "the run reached its time limit" if capped else f"no micro-batch was planned or committed for {bound_s:.0f} s"
    if read < files:
        return f"{when} while {files - read} of {files} input files were not committed ({len(done)} batches committed)"
    return f"{when} while the tail of {tail_ms} ms past the last input (timers) was not reached"


def _finished(checkpoint: Path, files: int, tail_ms: int) -> bool:
    """All ``files`` read by committed batches, and a committed batch ``tail_ms`` after that one."""
    done = set(committed_batches(checkpoint))
    offsets = [b for b in read_offsets(checkpoint) if b.batch in done]
    read_at = next((b for b in offsets if min(b.source_offsets or (b.source_offset,)) >= files - 1), None)
    return read_at is not None and offsets[-1].timestamp_ms >= read_at.timestamp_ms + tail_ms


def _idle(seen: tuple[int, int], last_change: float, trigger_ms: int) -> bool:
    """A user's query is done once every planned batch committed and three triggers passed with no
    new batch: an event-time query runs no-data batches while its watermark still moves (windows
    close, state is evicted), and those belong to the run."""
    return seen[0] == seen[1] and time.monotonic() - last_change > 3 * trigger_ms / 1000


def _settled(checkpoint: Path, n: int = 3) -> bool:
    """A user's query whose last ``n`` committed batches read no new input and kept the same watermark:
    what runs on is driven by the clock alone (processing-time timers, TTL, which run a batch every
    trigger), the event-time state has nothing left to do, and the run may end."""
    done = set(committed_batches(checkpoint))
    last = [b for b in read_offsets(checkpoint) if b.batch in done][-(n + 1):]
    return len(last) == n + 1 and len({(b.source_offsets, b.watermark_ms) for b in last}) == 1


def _progress(checkpoint: Path, seen: tuple[int, int], emit: QueryHistory) -> tuple[int, int]:
    """History events for batches newly planned (offset log) and committed (commit log), so a fault's
    effect on the micro-batches shows in the timeline."""
    planned = max((b.batch for b in read_offsets(checkpoint)), default=-1)
    committed = max(committed_batches(checkpoint), default=-1)
    for b in range(seen[0] + 1, planned + 1):
        emit(BatchPlanned(batch=b))
    for b in range(seen[1] + 1, committed + 1):
        emit(BatchCommitted(batch=b))
    return max(planned, seen[0]), max(committed, seen[1])
