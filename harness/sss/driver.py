"""The Spark driver of a Structured Streaming query under test, run as its own process
(``python -m harness.sss.driver WORKDIR``) so that chaos can SIGKILL it and restart it from the
query's checkpoint location.

``WORKDIR`` holds ``run.json`` (spec, master, trigger, the cluster's driver settings), ``input/`` (the file source, CSV files the
orchestrator appends), ``checkpoint/``, ``output/`` (the exactly-once sink: ``foreachBatch`` writes
batch N's rows to ``batch-N.json`` by rename, so a replayed batch replaces its own file and never
adds rows), ``starts/`` (``N`` holds the pid of start N, ``N.ready`` appears once its query
runs) and ``state/`` (what Spark's state data source read at each start, ``start-N.json``, and after
the final stop, ``final-N.json``). A file ``stop`` asks
the driver to stop the query and exit 0. A query that fails writes ``failure.txt`` and exits 3; exit 4: Spark cannot start here.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from harness.sss.checkpoint_log import committed_batches
from harness.sss.errors import spark_error_gist
from harness.sss.pyspark_env import has_state_source
from harness.sss.sink import chaos_sink, user_sink
from harness.sss.spec import APPLY, SssSpec, load_function
from harness.sss.state_vars import StateVar, discover_state_vars
from harness.sss.values import canon, canon_row

__all__ = ["ROCKSDB", "spark_conf", "defer_state_read", "main"]

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
EXIT_QUERY_FAILED = 3
EXIT_NO_SPARK = 4  # Spark cannot run here (Java, memory): an environment problem, not a verdict


def spark_conf() -> dict[str, str]:
    """The state store settings every run uses: RocksDB (transformWithState requires it), changelog
    checkpointing on, and snapshots every 2 versions uploaded by a 1 s maintenance task, so a short run
    has snapshot (``N.zip``) and changelog (``N.changelog``) files for damage to hit."""
    return {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
        "spark.sql.streaming.stateStore.maintenanceInterval": "1s",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
    }


def read_state(spark: Any, checkpoint: Path, batch_id: int, var: StateVar) -> list[dict[str, Any]]:
    """Rows of one state variable at ``batch_id`` through Spark's own state data source."""
    reader = (
        spark.read.format("statestore")
        .option("path", str(checkpoint))
        .option("batchId", batch_id)
        .option("stateVarName", var.name)
    )
    return [_state_row(r) for r in reader.load().collect()]


def read_timers(spark: Any, checkpoint: Path, batch_id: int) -> list[dict[str, Any]]:
    reader = (
        spark.read.format("statestore")
        .option("path", str(checkpoint))
        .option("batchId", batch_id)
        .option("readRegisteredTimers", "true")
    )
    return [_state_row(r) for r in reader.load().collect()]


def _state_row(row: Any) -> dict[str, Any]:
    """A state data source row with its values canonical (:mod:`harness.sss.values`); a struct with a
    TTL (``value``, ``ttlExpirationMs``) and apply's ``groupState``/``timeoutTimestamp`` keep their
    field names, which the oracles read."""
    out: dict[str, Any] = {}
    for k, v in row.asDict(recursive=False).items():
        fields = set(v.__fields__) if hasattr(v, "__fields__") else set()
        # apply's state row has no timeoutTimestamp when the function has no timeout (NoTimeout)
        if fields in ({"value", "ttlExpirationMs"}, {"groupState", "timeoutTimestamp"}, {"groupState"}):
            out[k] = {f: canon(x) for f, x in v.asDict(recursive=False).items()}
        else:
            out[k] = canon(v)
    return out


def dump_state(spark: Any, workdir: Path, spec: SssSpec, name: str, batch: int | None = None) -> None:
    """Write what the state data source reads for ``batch`` (default: the last committed one) to
    ``state/NAME.json``, with the operator's ``state-metadata`` rows (an ``error`` entry instead when
    Spark refuses to read it)."""
    checkpoint = workdir / "checkpoint"
    done = committed_batches(checkpoint)
    if not done:
        return
    batch = max(done) if batch is None else batch
    import pyspark

    if not has_state_source(pyspark.__version__):  # read after the run, by statechaos's own Spark
        defer_state_read(workdir, name, batch, pyspark.__version__)
        return
    out: dict[str, Any] = {"batch": batch, "vars": {}, "timers": None, "metadata": None, "error": None}
    try:
        meta = spark.read.format("state-metadata").load(str(checkpoint)).collect()
        out["metadata"] = [canon_row(r) for r in meta]
        if spec.api == APPLY:  # one state row per key: {key, value: {groupState, timeoutTimestamp}}
            reader = spark.read.format("statestore").option("path", str(checkpoint)).option("batchId", batch)
            out["group_state"] = [_state_row(r) for r in reader.load().collect()]
        else:
            for var in discover_state_vars(spec.new_processor()):
                out["vars"][var.name] = read_state(spark, checkpoint, batch, var)
            if spec.time_mode != "None":
                out["timers"] = read_timers(spark, checkpoint, batch)
    except Exception as e:  # Spark refusing damaged state is a result, not a crash
        out["error"] = spark_error_gist(f"{type(e).__name__}: {e}")
    state_dir = workdir / "state"
    state_dir.mkdir(exist_ok=True)
    tmp = state_dir / f".{name}.json.tmp"
    tmp.write_text(json.dumps(out, default=str))
    tmp.rename(state_dir / f"{name}.json")


def defer_state_read(workdir: Path, name: str, batch: int, version: str) -> None:
    """Record that ``state/NAME.json`` (the state after ``batch``) is to be read after the run, by
    statechaos's own Spark (:mod:`harness.sss.deferred_state`): pyspark ``version`` has no state data source."""
    state_dir = workdir / "state"
    state_dir.mkdir(exist_ok=True)
    tmp = state_dir / f".{name}.json.tmp"
    tmp.write_text(json.dumps({"batch": batch, "deferred": f"pyspark {version} has no state data source",
                               "written_by": version}))  # fmt: skip
    tmp.rename(state_dir / f"{name}.json")


def read_sink(spark: Any, read: str, workdir: Path) -> None:
    """What the user's ``read(spark, path)`` returns for the sink folder, canonical, to
    ``sink-read.json`` (the exactly-once oracle's input)."""
    got = load_function(read)(spark, str(workdir / "sink"))
    rows = got.collect() if hasattr(got, "collect") else list(got)
    tmp = workdir / ".sink-read.json.tmp"
    tmp.write_text(json.dumps([canon_row(r) for r in rows]))
    tmp.rename(workdir / "sink-read.json")


def _sink(output: Path) -> Any:
    def write_batch(df: Any, batch_id: int) -> None:
        rows = [canon_row(r) for r in df.collect()]
        tmp = output / f".batch-{batch_id}.json.tmp"
        tmp.write_text(json.dumps(rows, default=str))
        os.replace(tmp, output / f"batch-{batch_id}.json")  # idempotent by batch id

    return write_batch


def _query(spark: Any, spec: SssSpec, source: Any, armed: str | None = None) -> Any:
    """The stateful query over ``source``, as a stream writer in the spec's output mode. The user's
    module is pickled by value, so executors that cannot import it (containers, a remote cluster)
    run it too. ``armed``: the file through which Python worker kills reach the processor's calls
    (:mod:`harness.sss.python_faults`)."""
    from pyspark import cloudpickle

    from harness.sss import python_faults

    module = sys.modules[load_function(spec.processor).__module__]
    cloudpickle.register_pickle_by_value(module)
    grouped = source.groupBy(spec.key)
    if armed:
        cloudpickle.register_pickle_by_value(python_faults)
    if spec.api == APPLY:
        func = load_function(spec.processor)
        func = python_faults.faulting_function(func, armed) if armed else func
        df = grouped.applyInPandasWithState(func, spec.output_schema, spec.state_schema,
                                            spec.output_mode, spec.timeout)  # fmt: skip
        return df.writeStream.outputMode(spec.output_mode.lower())
    processor = spec.new_processor()
    processor = python_faults.FaultingProcessor(processor, armed) if armed else processor
    df = grouped.transformWithStateInPandas(processor, spec.output_schema, spec.output_mode,
                                            spec.time_mode)  # fmt: skip
    return df.writeStream


def run(workdir: Path) -> int:
    from harness.spark.cluster import SparkCluster, SparkEnvironmentError

    cfg = json.loads((workdir / "run.json").read_text())
    spec = SssSpec.from_json(json.dumps(cfg["spec"]))
    starts = workdir / "starts"
    starts.mkdir(exist_ok=True)
    start_no = sum(1 for p in starts.iterdir() if p.name.isdigit())
    (starts / str(start_no)).write_text(str(os.getpid()))
    output = workdir / "output"
    output.mkdir(exist_ok=True)
    (workdir / "sink").mkdir(exist_ok=True)  # the user's sink's folder (sink.foreach_batch)
    kwargs = dict(cfg.get("cluster_kwargs") or {})  # a docker stack's: driver address, executors' Python
    conf = {**spark_conf(), **kwargs.pop("extra_conf", {})}
    cluster = SparkCluster(cfg["master"], extra_conf=conf, app_name=f"statechaos-sss-{start_no}", **kwargs)
    try:
        cluster.start()
    except SparkEnvironmentError as e:
        (workdir / "failure.txt").write_text(str(e))
        return EXIT_NO_SPARK
    try:
        spark = cluster.spark
        dump_state(spark, workdir, spec, f"start-{start_no}")
        stream = (
            spark.readStream.schema(spec.input_schema)
            .option("maxFilesPerTrigger", 1)
            .csv(str(workdir / "input"))
        )
        sink = cfg.get("sink") or {}
        write = user_sink(sink["foreach_batch"], workdir / "sink") if sink else _sink(output)
        query = (
            _query(spark, spec, stream, cfg.get("python_fault_file"))
            .foreachBatch(chaos_sink(write, workdir))
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(processingTime=f"{cfg['trigger_ms']} milliseconds")
            .start()
        )
        (starts / f"{start_no}.ready").write_text(str(query.id))
        while not (workdir / "stop").exists():
            if query.exception() is not None:
                (workdir / "failure.txt").write_text(str(query.exception()))
                return EXIT_QUERY_FAILED
            time.sleep(0.05)
        query.stop()
        if sink:
            read_sink(spark, sink["read"], workdir)
        dump_state(spark, workdir, spec, f"final-{start_no}")
        if cfg.get("state_every_batch"):  # differential mode: the state after every committed batch
            for b in committed_batches(workdir / "checkpoint"):
                dump_state(spark, workdir, spec, f"batch-{b:05d}", batch=b)
        return 0
    except Exception:
        (workdir / "failure.txt").write_text(traceback.format_exc())
        return EXIT_QUERY_FAILED
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.sss.driver WORKDIR", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
