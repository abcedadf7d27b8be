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

import contextlib
import dataclasses
import itertools
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.process import KillProcess, PauseProcess
from chaos.scope import RunScope
from chaos.sss.cluster_faults import CLUSTER_FAULTS, cluster_injector
from chaos.sss.damage import DAMAGE_CLASSES, damage_injectors, damage_targets
from chaos.sss.driver_process import DriverProcess
from harness.history import HistoryWriter
from harness.spark.cluster import SparkEnvironmentError
from harness.sss.checkpoint_log import committed_batches, read_offsets, source_files
from harness.sss.driver import EXIT_NO_SPARK
from harness.sss.errors import spark_error_gist
from harness.sss.oracles import SssCheck, check_run
from harness.sss.query import QuerySpec
from harness.sss.spec import DEFAULT_MASTER, SssSpec

__all__ = ["SssFault", "SssRun", "SssOutcome", "run_sss"]


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
    time_limit_s: float = 300.0
    seed: int = 0
    differential: bool = False  # also read Spark's state after every committed batch and compare each


@dataclass
class SssOutcome:
    """``verdict``: ``pass`` (oracles content), ``refused`` (Spark failed the query or would not read
    its state), ``caught`` (an oracle found wrong output or state), ``stuck`` (no progress),
    ``unknown`` (a user's query whose fault-free replays disagree: non-determinism, never a finding)."""

    verdict: str
    check: SssCheck
    events: list[dict[str, Any]]
    starts: int
    failures: list[str]

    def summary(self) -> str:
        lines = [f"verdict: {self.verdict} ({self.starts} driver starts, {self.check.batches_checked} "
                 f"batches and {self.check.states_checked} restored states checked)"]  # fmt: skip
        lines += [f"  refused: {r}" for r in self.check.refused + self.failures]
        lines += [f"  violation: {v}" for v in self.check.violations]
        lines += [f"  unknown: {u}" for u in getattr(self.check, "unknown", [])]
        if getattr(self.check, "replay_note", ""):
            lines.append(f"  replay: {self.check.replay_note}")
        return "\n".join(lines)


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text("".join(",".join(str(r[c]) for c in columns) + "\n" for r in rows))
    tmp.rename(path)


def _write_input(w: Path, spec: SssSpec | QuerySpec, n: int, step: Any) -> None:
    """Input step ``n``: one CSV file (a user's query: one per input, in ``input/<name>/``)."""
    if isinstance(spec, SssSpec):
        _write_csv(w / "input" / f"part-{n:05d}.csv", step, spec.input_columns())
        return
    for name in spec.inputs:
        (w / "input" / name).mkdir(parents=True, exist_ok=True)
        rows = step.get(name, []) if spec.several else step
        _write_csv(w / "input" / name / f"part-{n:05d}.csv", rows, spec.columns(name))


def _consumed(checkpoint: Path, spec: SssSpec | QuerySpec) -> int:
    """How many input steps every source has planned into a batch."""
    if isinstance(spec, SssSpec):
        return sum(len(v) for v in source_files(checkpoint).values())
    return min(sum(len(v) for v in source_files(checkpoint, s).values()) for s in range(len(spec.inputs)))


def run_sss(run: SssRun) -> SssOutcome:
    """Run ``run`` to the end of its input (or its time limit) and judge it."""
    run.spec.validate()
    run.workdir.mkdir(parents=True, exist_ok=True)
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
        return _run(run, docker, link)


def _run(run: SssRun, docker: Any, link: Any) -> SssOutcome:
    w = run.workdir
    (w / "input").mkdir(parents=True, exist_ok=True)
    master, kwargs = (docker.master_url, docker.spark_kwargs()) if docker else (run.master, {})
    if link is not None:
        kwargs["extra_conf"] = {**kwargs.get("extra_conf", {}), **link.conf}
    if docker:
        # transformWithStateInPandas also starts a Python runner on the driver, with the executors'
        # Python: a name both resolve on their PATH (the image's venv leads the containers' PATH, this
        # interpreter's folder the driver's), not the image's absolute path
        kwargs["executor_python"] = "python3"
    what = "query" if isinstance(run.spec, QuerySpec) else "spec"
    (w / "run.json").write_text(json.dumps({what: json.loads(run.spec.to_json()), "master": master,
                                            "cluster_kwargs": kwargs, "trigger_ms": run.trigger_ms,
                                            "state_every_batch": run.differential}))  # fmt: skip
    t0 = time.monotonic()
    history = HistoryWriter(w / "history.jsonl", clock=lambda: int((time.monotonic() - t0) * 1000))
    events: list[dict[str, Any]] = []
    failures: list[str] = []
    rng = random.Random(run.seed)
    checkpoint = w / "checkpoint"
    driver: DriverProcess | None = None
    scope = RunScope(f"sss-{w.name}", pids=lambda: driver.executor_pids() if driver else [], paths=[checkpoint],
                     compose_project=docker.stack.project if docker else None)  # fmt: skip

    fault_ids = itertools.count()
    open_faults: dict[int, int] = {}  # id(injector) -> fault_id of its fault_start

    def emit(type_: str, _inj: Any = None, **fields: Any) -> None:
        """One history event; fault windows as the runtime's (``fault_start``/``fault_end`` with a
        ``fault_id``, docs/runtime-contract.md), so the story, the timeline and Allure show them."""
        if type_ == "fault_start":
            fields = {"fault_id": next(fault_ids), "details": {}, **fields}
            if _inj is not None and not _inj.instant:
                open_faults[id(_inj)] = fields["fault_id"]
        elif type_ == "fault_end":
            fields = {"fault_id": open_faults.pop(id(_inj), None), **fields}
        events.append({"type": type_, **fields})
        history.emit(type_, **fields)

    def start() -> DriverProcess | None:
        n = (
            sum(1 for p in (w / "starts").glob("[0-9]*") if p.name.isdigit())
            if (w / "starts").exists()
            else 0
        )
        d = DriverProcess(w, "harness.sss.query_driver" if isinstance(run.spec, QuerySpec) else "harness.sss.driver")
        emit("driver_start", start=n, next_batch=_next_batch(checkpoint))
        if n:
            emit(
                "job_restart",
                attempt=n,
                reason="driver restarted from the checkpoint location",
                checkpoint_id=None,
            )
        while time.monotonic() - t0 < run.time_limit_s:
            if (w / "starts" / f"{n}.ready").exists():
                return d
            if d.proc.poll() == EXIT_NO_SPARK:
                d.kill()
                raise SparkEnvironmentError(_failure(w, "the query's driver could not start Spark"))
            if d.proc.poll() is not None:
                failures.append(_failure(w, f"driver start {n} exited {d.proc.returncode}"))
                emit("driver_failed", start=n, returncode=d.proc.returncode)
                d.kill()
                return None
            time.sleep(0.1)
        d.kill()
        return None

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
                failures.append(_failure(w, f"driver exited {driver.proc.returncode} during the run"))
                emit("driver_failed", returncode=driver.proc.returncode, next_batch=_next_batch(checkpoint))
                driver.kill()
                driver = None
                break
            consumed = _consumed(checkpoint, run.spec)
            # a due fault strikes before the next batch gets input, so batch ``after_batches`` runs
            # under it however fast the machine finished the ones before (``seen[0]``: newest planned)
            held = bool(pending) and seen[0] + 1 >= pending[0].after_batches
            if not held and written < len(run.inputs) and consumed >= written:
                _write_input(w, run.spec, written, run.inputs[written])
                written += 1
            if pending and len(done) >= pending[0].after_batches and _can_strike(pending[0], checkpoint):
                fault = pending.pop(0)
                driver, struck = _inject(
                    fault, driver, checkpoint, scope, rng, emit, start, heals, docker, link
                )
                if not struck:  # the file it needed went away meanwhile (a snapshot was uploaded): later
                    pending.insert(0, dataclasses.replace(fault, after_batches=len(done) + 1))
                continue
            if pending and written == len(run.inputs) and _finished(checkpoint, written, run.tail_ms):
                emit("fault_skipped", kind=pending[0].kind, batch=_next_batch(checkpoint),
                     why="no file a restart would read was ever there to damage")  # fmt: skip
                pending.pop(0)
                continue
            for due, inj in [h for h in heals if h[0] <= time.monotonic()]:
                inj.stop()
                heals.remove((due, inj))
                emit("fault_end", inj, batch=_next_batch(checkpoint), **inj.describe())
            if (
                not pending
                and not heals
                and written == len(run.inputs)
                and _finished(checkpoint, written, run.tail_ms)
                and (isinstance(run.spec, SssSpec) or _idle(seen, last_change, run.trigger_ms))
            ):
                break
            if time.monotonic() - t0 > run.time_limit_s:
                stuck = True
                emit("time_limit", committed=len(done))
                break
            time.sleep(0.1)
        if driver is not None:
            rc = driver.stop(w, timeout_s=300 if run.differential else 120)
            emit("driver_stop", returncode=rc)
            if rc not in (0,):
                failures.append(_failure(w, f"driver stop returned {rc}"))
    finally:
        for _, inj in heals:
            inj.stop()
        if driver is not None and driver.proc.poll() is None:
            driver.kill()
        history.close()
    if isinstance(run.spec, QuerySpec):
        from harness.sss.replay_oracle import check_replay

        check: SssCheck = check_replay(w, run.spec, written)
    else:
        check = check_run(w, run.spec, written)
    if failures or check.refused:
        verdict = "refused"
    elif check.violations:
        verdict = "caught"
    elif stuck:
        verdict = "stuck"
    elif getattr(check, "unknown", None):
        verdict = "unknown"
    else:
        verdict = "pass"
    starts = sum(1 for p in (w / "starts").glob("[0-9]*") if p.name.isdigit())
    return SssOutcome(verdict, check, events, starts, failures)


def _next_batch(checkpoint: Path) -> int:
    done = committed_batches(checkpoint)
    return max(done) + 1 if done else 0


def _failure(w: Path, what: str) -> str:
    f = w / "failure.txt"
    text = f.read_text().strip() if f.exists() else ""
    with contextlib.suppress(FileNotFoundError):
        f.rename(w / f"failure-{time.monotonic_ns()}.txt")
    gist = spark_error_gist(text)
    return f"{what}: {gist}" if gist else what


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


def _can_strike(fault: SssFault, checkpoint: Path) -> bool:
    if fault.kind not in DAMAGE_CLASSES:
        return True
    try:
        damage_targets(fault.kind, checkpoint)
        return True
    except InjectorError:
        return False


def _progress(checkpoint: Path, seen: tuple[int, int], emit: Any) -> tuple[int, int]:
    """History events for batches newly planned (offset log) and committed (commit log), so a fault's
    effect on the micro-batches shows in the timeline."""
    planned = max((b.batch for b in read_offsets(checkpoint)), default=-1)
    committed = max(committed_batches(checkpoint), default=-1)
    for b in range(seen[0] + 1, planned + 1):
        emit("batch_planned", batch=b)
    for b in range(seen[1] + 1, committed + 1):
        emit("batch_committed", batch=b)
    return max(planned, seen[0]), max(committed, seen[1])


def _inject(fault: SssFault, driver: DriverProcess, checkpoint: Path, scope: RunScope, rng: random.Random,
            emit: Any, start: Any, heals: list[tuple[float, Injector]], docker: Any,
            link: Any = None) -> tuple[DriverProcess | None, bool]:  # fmt: skip
    """Strike ``fault``; the driver to go on with, and whether the fault struck."""
    batch = _next_batch(checkpoint)
    trigger = f"{fault.after_batches} batches committed"
    inj: Injector
    if fault.kind in CLUSTER_FAULTS and (
        docker is not None or fault.kind not in ("kill_executor", "pause_executor")
    ):
        inj = cluster_injector(
            fault.kind, docker, link, scope, rng, fault.toxic, fault.attributes, fault.stream
        )
    elif fault.kind in ("kill_executor", "pause_executor"):
        pids = driver.executor_pids()
        if not pids:
            emit("fault_skipped", kind=fault.kind, batch=batch, why="no executor running")
            return driver, True
        pid = rng.choice(pids)
        inj = KillProcess(scope, pid) if fault.kind == "kill_executor" else PauseProcess(scope, pid)
    else:
        return _restart(fault, driver, checkpoint, scope, rng, emit, start, batch, trigger)
    inj.start()
    emit("fault_start", inj, batch=batch, trigger=trigger, **inj.describe())
    if not inj.instant:
        heals.append((time.monotonic() + fault.seconds, inj))
    return driver, True


def _restart(fault: SssFault, driver: DriverProcess, checkpoint: Path, scope: RunScope, rng: random.Random,
             emit: Any, start: Any, batch: int, trigger: str) -> tuple[DriverProcess | None, bool]:  # fmt: skip
    """``kill_driver`` or a damage class: the driver killed, the checkpoint damaged, a new driver."""
    driver.kill()
    emit("fault_start", batch=batch, trigger=trigger, kind="kill_driver", target="driver process group")
    struck = True
    if fault.kind != "kill_driver":
        try:
            injectors = damage_injectors(fault.kind, checkpoint, scope, rng)
        except InjectorError as e:
            emit("fault_deferred", kind=fault.kind, batch=batch, why=str(e))
            injectors, struck = [], False
        for inj in injectors:
            inj.start()
            emit("fault_start", inj, batch=batch, trigger=trigger, damage=fault.kind, **inj.describe())
    return start(), struck
