"""Starting, waiting for and stopping a Structured Streaming query: the one skeleton behind the driver
under chaos (a processor's query, :mod:`harness.sss.driver`, and a builder's,
:mod:`harness.sss.query_driver`), the replay (:mod:`harness.sss.replay`) and ``validate``
(:mod:`harness.sss.analyse`). What the sink is (statechaos's exactly-once one or the user's
``foreachBatch``), where a sink-window fault strikes (:func:`harness.sss.sink.chaos_sink`) and what
is read after the stop are decided here once, whatever built the query.

A driver's ``WORKDIR`` holds ``run.json`` (the query, master, trigger, the cluster's driver settings,
the user's ``sink`` if any, the ``python_fault_file``), ``input/``, ``checkpoint/``, ``output/``
(statechaos's sink: batch N's rows in ``batch-N.json``, by rename, so a replayed batch replaces its
own file), ``sink/`` (the user's sink's folder), ``starts/`` (``N`` holds the pid of start N,
``N.spark`` appears once its Spark session is up, ``N.ready`` once its query runs, ``N.tasks`` counts
the Spark tasks it saw finish and the stages it saw run: the orchestrator counts each as progress, so a start or a first
micro-batch slowed by a loaded machine is not taken for a stall). A file
``stop`` asks the driver to stop the query and exit 0; a query that fails writes ``failure.txt`` and
exits 3, also when Spark's stream execution thread ended without an error in ``query.exception()``
(:func:`query_death`); exit 4: Spark cannot start here. The driver's stdout and stderr are
``driver.log`` (:data:`DRIVER_LOG`), where the JVM prints an error that killed a thread."""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.run_store import RunStore
from harness.sss.spec import load_function
from harness.sss.values import canon_row

__all__ = ["ROCKSDB", "EXIT_QUERY_FAILED", "EXIT_NO_SPARK", "DRIVER_LOG", "TRANSIENT", "transient", "spark_conf", "record_source_ids",
           "json_sink", "start_query", "run_query", "read_sink", "query_death"]  # fmt: skip

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
EXIT_QUERY_FAILED = 3
EXIT_NO_SPARK = 4  # Spark cannot run here (Java, memory): an environment problem, not a verdict
DRIVER_LOG = "driver.log"  # in WORKDIR: the driver's stdout and stderr, the JVM's included
# Spark's own words when a Python worker it started did not connect back within its fixed 10 s
# (``PythonWorkerFactory.createSimpleWorker``; transformWithStateInPandas starts one on the driver at
# every query start, to read the processor's state schema): the machine's load, not the query. A
# query that failed so committed nothing of the failed batch, and is started again.
TRANSIENT = ("Python worker failed to connect back",)
QUERY_STARTS = 4  # attempts per driver start (and per replay batch) when the failure is TRANSIENT


def spark_conf() -> dict[str, str]:
    """The state store settings every run uses: RocksDB (transformWithState requires it), changelog
    checkpointing on, and snapshots every 2 versions uploaded by a 1 s maintenance task, so a short run
    has snapshot (``N.zip``) and changelog (``N.changelog``) files for damage to hit; and every
    batch's logs kept."""
    return {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
        "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        # the oracles read every batch's offset log entry (which input it read); Spark's default of 100
        # purged the first ones of a run whose timers ran a batch every trigger while it stopped
        "spark.sql.streaming.minBatchesToRetain": "100000",
    }


def json_sink(output: Path) -> Callable[[Any, int], None]:
    """statechaos's exactly-once ``foreachBatch``: batch N's rows, canonical, to ``batch-N.json`` by
    rename (idempotent by batch id)."""

    def write_batch(df: Any, batch_id: int) -> None:
        rows = [canon_row(r) for r in df.collect()]
        tmp = output / f".batch-{batch_id}.json.tmp"
        tmp.write_text(json.dumps(rows, default=str))
        os.replace(tmp, output / f"batch-{batch_id}.json")

    return write_batch


def start_query(writer: Any, sink: Callable[[Any, int], None], checkpoint: Path, trigger_ms: int | None) -> Any:
    """``writer`` (a DataStreamWriter in its output mode) started through ``sink`` at ``checkpoint``,
    on a processing-time trigger, or with ``trigger_ms`` None for one batch (the replay, ``validate``)."""
    w = writer.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    w = w.trigger(once=True) if trigger_ms is None else w.trigger(processingTime=f"{trigger_ms} milliseconds")
    return w.start()


def read_sink(spark: Any, read: str, workdir: Path) -> None:
    """What the user's ``read(spark, path)`` returns for the sink folder, canonical, to
    ``sink-read.json`` (the exactly-once oracle's input)."""
    store = RunStore(workdir)
    got = load_function(read)(spark, str(store.user_sink))
    rows = got.collect() if hasattr(got, "collect") else list(got)
    tmp = store.sink_read.with_name(f".{store.sink_read.name}.tmp")
    tmp.write_text(json.dumps([canon_row(r) for r in rows]))
    tmp.rename(store.sink_read)


def transient(error: object) -> bool:
    """Whether a query's failure is the machine's (:data:`TRANSIENT`), not the query's."""
    return any(t in str(error) for t in TRANSIENT)


Hook = Callable[[Any, int], None]


def query_death(query: Any, log: Path | None = None) -> str | None:
    """Spark's error when ``query`` has stopped running on its own, else None. ``query.exception()``
    holds it when the stream execution thread caught it; a thread killed by an error raised while it
    handled another (a ``StackOverflowError`` in Spark's own ``java.util.regex`` match of a long
    message) leaves it empty, with ``isActive`` false or the thread dead: the error is then the one the
    JVM printed for that thread in ``log``, and the query is reported failed instead of waited for."""
    if (exc := query.exception()) is not None:
        return str(exc)
    alive = _thread_alive(query)
    if query.isActive and alive is not False:
        return None
    if (exc := query.exception()) is not None:  # set just before the thread ended
        return str(exc)
    what = "is no longer active" if not query.isActive else "is marked active, but its thread is dead"
    return (f"Spark's stream execution thread of query {query.id} ended without an error in "
            f"query.exception() (the query {what}): {_thread_error(query.id, log)}")  # fmt: skip


def _thread_alive(query: Any) -> bool | None:
    """Whether the JVM thread running ``query``'s micro-batches is alive; None when Spark does not say
    (a query that is not a classic StreamExecution)."""
    try:
        return bool(query._jsq.streamingQuery().queryExecutionThread().isAlive())
    except Exception:
        return None


def _thread_error(query_id: str, log: Path | None) -> str:
    """The error the JVM printed for the stream execution thread of ``query_id`` in ``log``
    (``Exception in thread "stream execution thread for [id = ...`` and its first frames)."""
    try:
        lines = log.read_text(errors="replace").splitlines() if log is not None else []
    except OSError:
        lines = []
    for i in range(len(lines) - 1, -1, -1):
        if "stream execution thread for" in lines[i] and str(query_id) in lines[i]:
            head = lines[i].split('" ', 1)[-1] if "Exception in thread" in lines[i] else lines[i]
            frames = [ln.strip() for ln in lines[i + 1 : i + 4] if ln.lstrip().startswith("at ")]
            return "; ".join([head.strip(), *frames])
    return f"the JVM printed no error for it{f' in {log}' if log is not None else ''}"


def record_source_ids(query: Any, path: Path) -> bool:
    """Write which file source each offset log position of ``query`` reads (``[0, 0]``: one
    DataFrame used twice; :func:`harness.sss.checkpoint_log.source_ids`) to ``path``, once Spark has
    planned the query's sources; True once written. Spark numbers sources (``sources/N``) as they
    first appear in the plan and logs an offset per appearance, in the same order."""
    if path.exists():
        return True
    try:
        listed = query._jsq.streamingQuery().sources()
        found = [listed.apply(i) for i in range(listed.size())]
    except Exception:  # not a classic micro-batch query: one source per position is assumed
        return True
    if not found:
        return False  # not planned yet
    firsts: list[Any] = []
    ids = []
    for src in found:
        k = next((i for i, f in enumerate(firsts) if f.equals(src)), None)
        if k is None:
            firsts.append(src)
            k = len(firsts) - 1
        ids.append(k)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(ids))
    os.replace(tmp, path)
    return True


def _stop_between_batches(query: Any, limit_s: float = 900.0) -> None:
    """Stop ``query`` between two micro-batches where it can: a query whose batches follow the clock
    (processing-time timers, TTL) is never idle, and a batch cut short at the stop may have reached the
    sink without being committed, which the replay (committed batches only) cannot account for. The
    wait is for the running batch, however slow a loaded machine makes it; ``limit_s`` only ends a
    hang, which the orchestrator ends first when the driver stops progressing
    (``chaos.sss.driver_process.DriverProcess.stop``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s and query.status.get("isTriggerActive"):
        time.sleep(0.02)
    query.stop()


class FinishedTasks:
    """The Spark tasks a driver start has seen finish and the stages it has seen run, written to
    ``N.tasks`` as ``tasks stages`` (by rename, so a reader never sees half of it) at most once a
    second: a micro-batch whose work goes on is slow, not stuck (a first batch starting Python workers
    in containers took over 120 s at load 35). Spark's status tracker lists only active stages, so a
    stage's count is its highest seen; a stage shorter than a poll may go unseen, which only matters
    for batches that are quick anyway."""

    def __init__(self, spark: Any, path: Path) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._path = path
        self._done: dict[int, int] = {}
        self._written = ""
        self._next = 0.0

    def poll(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 1.0
        for sid in self._tracker.getActiveStageIds():
            info = self._tracker.getStageInfo(sid)
            if info is not None:
                self._done[sid] = max(self._done.get(sid, 0), int(info.numCompletedTasks))
        text = f"{sum(self._done.values())} {len(self._done)}"
        if text != self._written:
            tmp = self._path.with_name(self._path.name + ".part")
            tmp.write_text(text)
            os.replace(tmp, self._path)
            self._written = text


def run_query(workdir: Path, make_writer: Callable[[Any, dict[str, Any]], Any],
              on_start: Hook | None = None, on_stop: Hook | None = None) -> int:  # fmt: skip
    """One driver start in ``workdir``: start Spark, ``on_start(spark, start_no)``, start the query
    ``make_writer(spark, run_config)`` returns through the sink (the user's ``sink.foreach_batch`` or
    :func:`json_sink`, wrapped by :func:`chaos_sink` for sink-window faults), run it until ``stop``
    appears, stop it, read the user's sink, ``on_stop(spark, start_no)``. The exit code."""
    from harness.spark.cluster import SparkCluster, SparkEnvironmentError
    from harness.sss.sink import chaos_sink, user_sink

    store = RunStore(workdir)
    cfg = json.loads(store.query_settings.read_text())
    starts = store.driver_starts
    starts.mkdir(exist_ok=True)
    start_no = sum(1 for p in starts.iterdir() if p.name.isdigit())
    (starts / str(start_no)).write_text(str(os.getpid()))
    output = store.output
    output.mkdir(exist_ok=True)
    store.user_sink.mkdir(exist_ok=True)  # the user's sink's folder (sink.foreach_batch)
    kwargs = dict(cfg.get("cluster_kwargs") or {})  # a docker stack's: driver address, executors' Python
    conf = {**spark_conf(), **kwargs.pop("extra_conf", {})}
    cluster = SparkCluster(cfg["master"], extra_conf=conf, app_name=f"statechaos-sss-{start_no}", **kwargs)
    try:
        cluster.start()
    except SparkEnvironmentError as e:
        store.driver_failure.write_text(str(e))
        return EXIT_NO_SPARK
    try:
        spark = cluster.spark
        (starts / f"{start_no}.spark").write_text("")
        if on_start is not None:
            on_start(spark, start_no)
        sink = cfg.get("sink") or {}
        write = user_sink(sink["foreach_batch"], store.user_sink) if sink else json_sink(output)
        def start() -> Any:
            return start_query(make_writer(spark, cfg), chaos_sink(write, workdir), store.query_checkpoint,
                               cfg["trigger_ms"])  # fmt: skip

        query, attempts = start(), 1
        (starts / f"{start_no}.ready").write_text(str(query.id))
        tasks = FinishedTasks(spark, store.driver_tasks(start_no))
        sources_known = False
        while not store.stop_request.exists():
            tasks.poll()
            sources_known = sources_known or record_source_ids(query, store.query_source_ids)
            if (death := query_death(query, workdir / DRIVER_LOG)) is not None:
                if transient(death) and attempts < QUERY_STARTS:
                    print(f"query start {attempts} failed for the machine's sake, again: {death}"[:400], flush=True)
                    query, attempts = start(), attempts + 1
                    continue
                store.driver_failure.write_text(death)
                return EXIT_QUERY_FAILED
            time.sleep(0.05)
        _stop_between_batches(query)
        if sink:
            read_sink(spark, sink["read"], workdir)
        if on_stop is not None:
            on_stop(spark, start_no)
        return 0
    except Exception:
        store.driver_failure.write_text(traceback.format_exc())
        return EXIT_QUERY_FAILED
    finally:
        cluster.stop()
