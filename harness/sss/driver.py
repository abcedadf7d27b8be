"""The Spark driver of a processor's query under test (``python -m harness.sss.driver WORKDIR``), run as
its own process so that chaos can SIGKILL it and restart it from the query's checkpoint location.
The ``WORKDIR`` layout, files and exit codes are :mod:`harness.sss.query_run`'s; this driver also
writes ``state/``: what Spark's state data source read at each start (``start-N.json``) and after
the final stop (``final-N.json``), which the model's oracles judge.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness.run_store import RunStore
from harness.sss.checkpoint_log import committed_batches
from harness.sss.errors import spark_error_gist
from harness.sss.pyspark_env import has_state_source
from harness.sss.query import processor_frame
from harness.sss.query_run import EXIT_NO_SPARK, EXIT_QUERY_FAILED, ROCKSDB, run_query, spark_conf
from harness.sss.spec import APPLY, SssSpec, load_function
from harness.sss.state_vars import StateVar, discover_state_vars
from harness.sss.values import canon, canon_row

__all__ = ["ROCKSDB", "EXIT_NO_SPARK", "EXIT_QUERY_FAILED", "spark_conf", "defer_state_read", "main"]


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
    checkpoint = RunStore(workdir).query_checkpoint
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
    state_dir = RunStore(workdir).state_reads
    state_dir.mkdir(exist_ok=True)
    tmp = state_dir / f".{name}.json.tmp"
    tmp.write_text(json.dumps(out, default=str))
    tmp.rename(state_dir / f"{name}.json")


def defer_state_read(workdir: Path, name: str, batch: int, version: str) -> None:
    """Record that ``state/NAME.json`` (the state after ``batch``) is to be read after the run, by
    statechaos's own Spark (:mod:`harness.sss.deferred_state`): pyspark ``version`` has no state data source."""
    state_dir = RunStore(workdir).state_reads
    state_dir.mkdir(exist_ok=True)
    tmp = state_dir / f".{name}.json.tmp"
    tmp.write_text(json.dumps({"batch": batch, "deferred": f"pyspark {version} has no state data source",
                               "written_by": version}))  # fmt: skip
    tmp.rename(state_dir / f"{name}.json")


def _query(spark: Any, spec: SssSpec, source: Any, armed: str | None = None) -> Any:
    """The stateful query over ``source``, as a stream writer in the spec's output mode. The user's
    module is pickled by value, so executors that cannot import it (containers, a remote cluster)
    run it too. ``armed``: the file through which Python worker kills reach the processor's calls
    (:mod:`harness.sss.python_faults`)."""
    from pyspark import cloudpickle

    from harness.sss import python_faults

    module = sys.modules[load_function(spec.processor).__module__]
    cloudpickle.register_pickle_by_value(module)
    if armed:
        cloudpickle.register_pickle_by_value(python_faults)
    if spec.api == APPLY:
        func = load_function(spec.processor)
        func = python_faults.faulting_function(func, armed) if armed else func
        df = source.groupBy(spec.key).applyInPandasWithState(func, spec.output_schema, spec.state_schema,
                                                             spec.output_mode, spec.timeout)  # fmt: skip
        return df.writeStream.outputMode(spec.output_mode.lower())
    wrap = (lambda p: python_faults.FaultingProcessor(p, armed)) if armed else None
    return processor_frame(spark, spec, source, wrap).writeStream


def run(workdir: Path) -> int:
    spec = SssSpec.from_json(json.dumps(json.loads(RunStore(workdir).query_settings.read_text())["spec"]))

    def writer(spark: Any, cfg: dict[str, Any]) -> Any:
        stream = (
            spark.readStream.schema(spec.input_schema)
            .option("maxFilesPerTrigger", 1)
            .csv(str(RunStore(workdir).query_input))
        )
        return _query(spark, spec, stream, cfg.get("python_fault_file"))

    def on_stop(spark: Any, start_no: int) -> None:
        dump_state(spark, workdir, spec, f"final-{start_no}")
        if json.loads(RunStore(workdir).query_settings.read_text()).get("state_every_batch"):
            for b in committed_batches(RunStore(workdir).query_checkpoint):  # differential: the state after every batch
                dump_state(spark, workdir, spec, f"batch-{b:05d}", batch=b)

    return run_query(workdir, writer, lambda spark, n: dump_state(spark, workdir, spec, f"start-{n}"), on_stop)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.sss.driver WORKDIR", file=sys.stderr)
        return 2
    return run(Path(args[0]).resolve())  # absolute: executors resolve a relative checkpoint path in their own folder


if __name__ == "__main__":
    sys.exit(main())
