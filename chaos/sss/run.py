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
import dataclasses
import importlib.metadata
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.injectors.base import Injector, InjectorError
from chaos.scope import RunScope
from chaos.sss.cluster_faults import CLUSTER_FAULTS, cluster_injector
from chaos.sss.damage import DAMAGE_CLASSES, damage_injectors, damage_targets
from chaos.sss.driver_process import DriverProcess
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
    TimeLimit,
)
from harness.history import HistoryWriter
from harness.progress import ProgressWatch
from harness.run_store import RunStore
from harness.spark.cluster import SparkEnvironmentError
from harness.sss.checkpoint_log import committed_batches, read_offsets, source_files
from harness.sss.deferred_state import read_deferred
from harness.sss.errors import spark_error_gist
from harness.sss.oracles import SssCheck, check_run
from harness.sss.outcome import SssOutcome
from harness.sss.pyspark_env import PysparkEnvError, check_java_for, ensure_env
from harness.sss.python_faults import ARMED, arm, fired
from harness.sss.query import QuerySpec
from harness.sss.query_run import EXIT_NO_SPARK, transient
from harness.sss.sink import ARMED as SINK_ARMED
from harness.sss.sink import RELEASE as SINK_RELEASE
from harness.sss.sink import arm_sink, sink_hit
from harness.sss.spec import DEFAULT_MASTER, SssSpec
from harness.sss.user_error import raised_in_spark

__all__ = ["SssFault", "SssRun", "SssOutcome", "run_sss", "PYTHON_WORKER"]

PYTHON_WORKER = "kill_python_worker"


@dataclass(frozen=True)
class SssFault:
    """``kind``: ``kill_executor``, ``pause_executor`` (SIGSTOP for ``seconds``, then SIGCONT),
    ``kill_driver`` (then restart from the checkpoint), or a damage class of
    :data:`chaos.sss.damage.DAMAGE_CLASSES` (driver killed, checkpoint damaged, restart); on docker
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

    def __init__(self, writer: HistoryWriter, watch: ProgressWatch) -> None:
        self.events: list[Event] = []
        self._writer = writer
        self._watch = watch
        self._counts: collections.Counter[str] = collections.Counter()
        self._ids = itertools.count()
        self._open: dict[int, int] = {}  # id(injector) -> fault_id of its fault_start

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)
        self._writer.emit(ev)
        self._writer.flush()
        self._counts[ev.TAG] += 1
        self._watch.observe(**{ev.TAG: self._counts[ev.TAG]})

    def fault_start(self, inj: Injector | None, batch: int | None, trigger: str, described: dict[str, Any],
                    **extra: Any) -> None:  # fmt: skip
        """``described``: the injector's kind, target and parameters (kept at the top level of the event)."""
        d = dict(described)
        fid = next(self._ids)
        if inj is not None and not inj.instant:
            self._open[id(inj)] = fid
        self(FaultStart(fault_id=fid, kind=d.pop("kind"), target=d.pop("target", None), trigger=trigger,
                        details=d.pop("details", {}), extra={"batch": batch, **d, **extra}))  # fmt: skip

    def fault_end(self, inj: Injector, batch: int) -> None:
        d = inj.describe()
        self(FaultEnd(fault_id=self._open.pop(id(inj), None), kind=d.pop("kind"), extra={"batch": batch, **d}))


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
        if any(f.kind == "network" for f in run.faults):
            if docker is None:
                raise InjectorError("network faults on a Structured Streaming query need cluster docker "
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
                                            "python_fault_file": str(w / ARMED) if any(
                                                f.kind == PYTHON_WORKER for f in run.faults) else None}))  # fmt: skip
    t0 = time.monotonic()
    history = HistoryWriter(RunStore(w).history, clock=lambda: int((time.monotonic() - t0) * 1000))
    failures: list[str] = []
    raised = Raised(run.spec.builder if isinstance(run.spec, QuerySpec) else run.spec.processor)
    rng = random.Random(run.seed)
    checkpoint = RunStore(w).query_checkpoint
    driver: DriverProcess | None = None
    scope = RunScope(f"sss-{w.name}", pids=lambda: driver.executor_pids() if driver else [], paths=[checkpoint],
                     compose_project=docker.stack.project if docker else None)  # fmt: skip

    # the run is stuck when no event (a batch planned or committed, a fault, a driver start) came for
    # the stall bound: each event type's count is a progress signal, so the stall names what stopped
    watch = ProgressWatch(run.stall_s)
    emit = QueryHistory(history, watch)

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
    sink_armed: list[SssFault] = []  # armed in the sink's wrapper, not yet reached (one at a time)
    sink_file = -1  # the input file whose batch the armed sink fault waits for
    # with no timers, Spark runs no batch without input: there is no tail to wait for
    # a builder's query may hold event-time state: its tail (and the idle end below) closes windows
    tail_ms = run.tail_ms if isinstance(run.spec, QuerySpec) or run.spec.timers_on else 0
    pending = sorted(run.faults, key=lambda f: f.after_batches)
    heals: list[tuple[float, Injector]] = []  # (when, paused injector to resume)
    written = 0
    stuck = False
    seen: tuple[int, int] = (-1, -1)  # the newest planned and committed batch already in the history
    last_change = time.monotonic()  # when ``seen`` last moved
    try:
        driver = start()
        while driver is not None:
            done = committed_batches(checkpoint)
            before, seen = seen, _progress(checkpoint, seen, emit)
            if seen != before:
                last_change = time.monotonic()
            if driver.proc.poll() is not None:
                failures.append(_failure(w, f"driver exited {driver.proc.returncode} during the run", raised))
                emit(DriverFailed(returncode=driver.proc.returncode, next_batch=_next_batch(checkpoint)))
                driver.kill()
                driver = None
                break
            consumed = _consumed(checkpoint, run.spec)
            # a due fault strikes before the next batch gets input, so batch ``after_batches`` runs
            # under it however fast the machine finished the ones before (``seen[0]``: newest planned)
            # (but the file an armed sink fault waits for is written, or neither could strike)
            held = bool(pending) and seen[0] + 1 >= pending[0].after_batches
            held = held and not (sink_armed and written <= sink_file)
            if not held and written < len(run.inputs) and consumed >= written:
                _write_input(w, run.spec, written, run.inputs[written])
                written += 1
            if pending and pending[0].at and not sink_armed and len(done) >= pending[0].after_batches:
                fault = pending.pop(0)  # placed by the sink's wrapper in the batch that reads the next file
                arm_sink(w, fault.at, written)  # the batch that reads the next file (held until now)
                sink_file = written
                sink_armed.append(fault)
                emit(FaultArmed(kind=fault.kind, at=fault.at, batch=_next_batch(checkpoint),
                                trigger=f"{fault.after_batches} batches committed"))  # fmt: skip
                continue
            if sink_armed and (hit := sink_hit(w)) is not None:
                fault = dataclasses.replace(sink_armed.pop(0), at="")
                trigger = f"{hit[1]} of batch {hit[0]}"
                if fault.kind == "kill_driver":
                    driver, _ = _restart(fault, driver, checkpoint, scope, rng, emit, start, hit[0], trigger)
                else:
                    driver, _ = _inject(fault, driver, checkpoint, scope, rng, emit, start, heals, docker, link,
                                        trigger=trigger)  # fmt: skip
                    (w / SINK_RELEASE).write_text("")
                continue
            now_due = bool(pending) and not pending[0].at and len(done) >= pending[0].after_batches
            if now_due and _can_strike(pending[0], checkpoint):
                fault = pending.pop(0)
                driver, struck = _inject(
                    fault, driver, checkpoint, scope, rng, emit, start, heals, docker, link
                )
                if not struck:  # the file it needed went away meanwhile (a snapshot was uploaded): later
                    pending.insert(0, dataclasses.replace(fault, after_batches=len(done) + 1))
                continue
            if pending and written == len(run.inputs) and _finished(checkpoint, written, tail_ms):
                if pending[0].at:
                    emit(FaultSkipped(kind=pending[0].kind, batch=_next_batch(checkpoint),
                                      why=f"no batch reached the sink after {pending[0].after_batches} batches committed"))  # fmt: skip
                    pending.pop(0)
                elif pending[0].kind in DAMAGE_CLASSES:
                    emit(FaultSkipped(kind=pending[0].kind, batch=_next_batch(checkpoint),
                                      why="no file a restart would read was ever there to damage"))  # fmt: skip
                    pending.pop(0)
                else:  # every input committed, nothing due: strike now, on an idle query
                    fault = dataclasses.replace(pending.pop(0), after_batches=len(done))
                    driver, _ = _inject(fault, driver, checkpoint, scope, rng, emit, start, heals, docker, link,
                                        trigger="every input committed (the query is idle)")  # fmt: skip
                continue
            _python_kills(w, emit)
            for due, inj in [h for h in heals if h[0] <= time.monotonic()]:
                inj.stop()
                heals.remove((due, inj))
                emit.fault_end(inj, _next_batch(checkpoint))
            if (
                not pending
                and not heals
                and written == len(run.inputs)
                and _finished(checkpoint, written, tail_ms)
                and (isinstance(run.spec, SssSpec) or _idle(seen, last_change, run.trigger_ms)
                     or _settled(checkpoint))
            ):
                break
            # a planned pause (a paused executor or worker, a cut link) holds the query: its time does not count
            watch.hold([_paused(inj) for _, inj in heals])
            if (why := watch.stalled()) is not None or over_time():
                stuck = True
                what = _stall(checkpoint, written, len(run.inputs), tail_ms, run.stall_s, over_time())
                stalled.append(f"{what} ({why})" if why else what)
                emit(TimeLimit(committed=len(done), why=stalled[-1]))
                break
            time.sleep(0.1)
        _python_kills(w, emit)
        for fault in sink_armed:
            emit(FaultSkipped(kind=fault.kind, batch=_next_batch(checkpoint),
                              why=f"no batch reached the sink's {fault.at} after it was armed"))  # fmt: skip
        (w / SINK_ARMED).unlink(missing_ok=True)
        if (w / ARMED).exists():
            (w / ARMED).unlink()
            emit(FaultSkipped(kind=PYTHON_WORKER, batch=_next_batch(checkpoint),
                              why="no call of the processor came after it was armed (no batch with input or timers)"))  # fmt: skip
        if driver is not None:
            rc = driver.stop(w, stall_s=run.stall_s)  # ends on lack of progress, not after a fixed time
            emit(DriverStop(returncode=rc))
            if rc not in (0,):
                failures.append(_failure(w, f"driver stop returned {rc}", raised))
    finally:
        for _, inj in heals:
            inj.stop()
        if driver is not None and driver.proc.poll() is None:
            driver.kill()
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


def _python_kills(w: Path, emit: QueryHistory) -> None:
    """History events for the armed Python worker kills that fired (or could not) since the last look;
    each names the batch it was armed for (the batch whose first processor call took it)."""
    for f in fired(w):
        armed = [e for e in emit.events if isinstance(e, FaultArmed)]
        batch = armed[-1].batch if armed else None
        if "why" in f:
            emit(FaultSkipped(kind=PYTHON_WORKER, batch=batch, why=f["why"]))
        else:
            emit.fault_start(None, batch, "first processor call after it was armed",
                             {"kind": PYTHON_WORKER, "target": f"python {f['process']} pid {f['pid']}"},
                             process=f["process"])  # fmt: skip


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


def _can_strike(fault: SssFault, checkpoint: Path) -> bool:
    if fault.kind not in DAMAGE_CLASSES:
        return True
    try:
        damage_targets(fault.kind, checkpoint)
        return True
    except InjectorError:
        return False


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


def _inject(fault: SssFault, driver: DriverProcess, checkpoint: Path, scope: RunScope, rng: random.Random,
            emit: QueryHistory, start: Any, heals: list[tuple[float, Injector]], docker: Any,
            link: Any = None, trigger: str = "") -> tuple[DriverProcess | None, bool]:  # fmt: skip
    """Strike ``fault``; the driver to go on with, and whether the fault struck."""
    batch = _next_batch(checkpoint)
    trigger = trigger or f"{fault.after_batches} batches committed"
    if fault.kind == PYTHON_WORKER:  # in band: the next processor call kills its own worker/daemon
        arm(checkpoint.parent, fault.process)
        emit(FaultArmed(kind=fault.kind, process=fault.process, batch=batch, trigger=trigger))
        return driver, True
    if fault.kind not in CLUSTER_FAULTS:  # kill_driver or a damage class: the driver restarts
        return _restart(fault, driver, checkpoint, scope, rng, emit, start, batch, trigger)
    try:  # the kind's own injector (chaos.faults: sss_injector) on the run's executors, workers or link
        inj = cluster_injector(fault.kind, docker, link, scope, rng, fault.toxic, fault.attributes, fault.stream,
                               driver.executor_pids)  # fmt: skip
    except InjectorError as e:  # nothing to strike (no executor running): the fault schedule says so
        emit(FaultSkipped(kind=fault.kind, batch=batch, why=str(e)))
        return driver, True
    inj.start()
    emit.fault_start(inj, batch, trigger, inj.describe())
    if not inj.instant:
        heals.append((time.monotonic() + fault.seconds, inj))
    return driver, True


def _restart(fault: SssFault, driver: DriverProcess, checkpoint: Path, scope: RunScope, rng: random.Random,
             emit: QueryHistory, start: Any, batch: int, trigger: str) -> tuple[DriverProcess | None, bool]:  # fmt: skip
    """``kill_driver`` or a damage class: the driver killed, the checkpoint damaged, a new driver."""
    driver.kill()
    emit.fault_start(None, batch, trigger, {"kind": "kill_driver", "target": "driver process group"})
    struck = True
    if fault.kind != "kill_driver":
        try:
            injectors = damage_injectors(fault.kind, checkpoint, scope, rng)
        except InjectorError as e:
            emit(FaultDeferred(kind=fault.kind, batch=batch, why=str(e)))
            injectors, struck = [], False
        for inj in injectors:
            inj.start()
            emit.fault_start(inj, batch, trigger, inj.describe(), damage=fault.kind)
    return start(), struck
