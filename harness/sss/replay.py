"""The fault-free replay of a query's recorded micro-batches, and the state reads of both checkpoints
(``python -m harness.sss.replay REQUEST.json``, a child of the orchestrator, on a ``local[1,4]`` session:
one task slot, and a failed task tried again up to 4 times, as on any cluster).

A replay runs the user's query again over *exactly* the micro-batches the chaos run committed: its
checkpoint starts with the chaos run's ``metadata`` and file-source logs (``sources/``), and, batch by
batch, the chaos run's ``offsets/N`` is copied in and the query started with a one-batch trigger.
Spark then recovers batch N from its offset log entry, as after any restart: the same input files,
the same ``batchWatermarkMs`` and (unless the request rewrites it) the same ``batchTimestampMs``,
so event-time operators see the same watermarks and processing-time ones the same clock. Its output
goes through the same sink; after every batch the state of every operator and store in the plan is
read through Spark's state data source (``statestore``), as it is from the chaos checkpoint at the
batches the request names.

The result (``REQUEST``'s ``result`` path) is JSON: ``replays`` (one per requested clock: ``outputs``
by batch, ``state`` by batch and store, ``seconds`` (``state_seconds`` of it reading state),
``checkpoint``), ``chaos_state`` (by batch: store -> rows, or ``error``: what Spark said when it would
not read the state), ``reads_clock`` (:func:`harness.sss.plan_clock.reads_clock`: then every replay
is on the recorded clock, two of them) and the seconds of the Spark start and of the chaos state reads.

Where the time goes (a 6-batch windowed aggregation, a 25-batch ``applyInPandasWithState``): a query
start is 0.01-0.2 s of a batch and a run of all batches in one query start was no faster; a batch of a
pandas UDF is 8-16 s without worker reuse, most of it starting fresh Python workers (hence
:mod:`harness.sss.python_daemon`); a state read 0.4-2 s per batch; the Spark session 10 s.

A query that runs on the user's pyspark (``spark:``) is replayed on it too, by the same command in
that version's environment. Before 4.0 that pyspark has no state data source: the replay then says
``state_deferred``, and ``python -m harness.sss.replay --state REQUEST.json`` on statechaos's own
pyspark fills in ``state`` and ``chaos_state`` from both checkpoints afterwards (Spark reads the
checkpoints earlier versions wrote), as :mod:`harness.sss.deferred_state` does for a processor's run.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from harness.run_store import RunStore
from harness.sss.plan_clock import plan_text, reads_clock
from harness.sss.query import QuerySpec, build_query
from harness.sss.query_run import QUERY_STARTS, json_sink, spark_conf, start_query, transient
from harness.sss.values import canon

__all__ = ["read_all_state", "read_deferred_state", "rewrite_timestamp", "run_batch", "CANONICAL_T0", "REPLAY_MASTER", "main"]

CANONICAL_T0 = 1_600_000_000_000  # the clock-free replay's first batch timestamp; then +1 s per batch


def _operator_rows(spark: Any, checkpoint: Path) -> list[dict[str, Any]]:
    """The ``state-metadata`` rows of ``checkpoint``; for a checkpoint whose version wrote no operator
    metadata (before 4.0), the stores its ``state/<operator>/<partition>/`` folders hold: ``default``,
    or each subfolder with state versions of its own (a join's four stores)."""
    try:
        rows = [r.asDict(recursive=True) for r in spark.read.format("state-metadata").load(str(checkpoint)).collect()]
    except Exception:  # no operator metadata at all
        rows = []
    if rows:
        return rows
    versions = ("*.zip", "*.changelog", "*.delta", "*.snapshot")
    out = []
    for op in sorted((p for p in (checkpoint / "state").glob("*") if p.name.isdigit()), key=lambda p: int(p.name)):
        part = next((p for p in sorted(op.iterdir()) if p.name.isdigit()), None)
        subs = sorted(d for d in part.iterdir() if d.is_dir()) if part else []
        named = [d.name for d in subs if any(next(d.glob(v), None) for v in versions)]
        for store in named or ["default"]:
            out.append({"operatorId": int(op.name), "stateStoreName": store, "operatorName": "",
                        "operatorProperties": None})  # fmt: skip
    return out


def _stores(spark: Any, checkpoint: Path) -> list[dict[str, Any]]:
    """The plan's state stores as ``state-metadata`` lists them, as state data source options."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for m in _operator_rows(spark, checkpoint):
        op, store, name = int(m["operatorId"]), m["stateStoreName"], m["operatorName"]
        if store.startswith(("left-", "right-")):  # a stream-stream join: both stores of a side at once
            side = store.split("-", 1)[0]
            reads = [(f"op{op}/{side}", {"operatorId": op, "joinSide": side})]
        elif "transformWithState" in name and m.get("operatorProperties"):
            props = json.loads(m["operatorProperties"])
            reads = [(f"op{op}/{v['stateName']}", {"operatorId": op, "stateVarName": v["stateName"]})
                     for v in props.get("stateVariables", [])
                     if not v["stateName"].startswith("$")]  # fmt: skip  ($: Spark's own, e.g. timers)
            if props.get("timeMode", "NoTime") not in ("NoTime", "None"):
                reads.append((f"op{op}/$timers", {"operatorId": op, "readRegisteredTimers": "true"}))
        else:
            reads = [(f"op{op}/{store}", {"operatorId": op, "storeName": store})]
        for label, options in reads:
            if label not in seen:
                seen.add(label)
                out.append({"label": label, "operator": name, "options": options})
    return out


def read_all_state(spark: Any, checkpoint: Path, batch: int) -> dict[str, list[dict[str, Any]]]:
    """Every store's rows at ``batch``: label (``op<id>/<store or side or variable>``) -> rows."""
    out = {}
    for s in _stores(spark, checkpoint):
        reader = spark.read.format("statestore").option("path", str(checkpoint)).option("batchId", batch)
        for k, v in s["options"].items():
            reader = reader.option(k, v)
        out[s["label"]] = [_named(r) for r in reader.load().collect()]
    return out


# one task slot; a failed task is tried again up to 4 times (spark.task.maxFailures' default on a
# cluster, where the chaos run ran), not given up at once as plain ``local[1]`` does: a query whose
# code fails a task now and then (Spark's own applyInPandasWithState test exits its Python worker at
# random) runs through on the cluster, and its replay must too, or nothing can be judged
REPLAY_MASTER = "local[1,4]"


def _named(v: Any) -> Any:
    """A state row in the canonical value form (:mod:`harness.sss.values`), its structs kept as
    named fields, so a difference names its nested column (``value.sum``)."""
    if isinstance(v, tuple) and hasattr(v, "asDict"):  # a pyspark Row (a struct)
        return {k: _named(x) for k, x in v.asDict(recursive=False).items()}
    if isinstance(v, list):
        return [_named(x) for x in v]
    return canon(v)


def rewrite_timestamp(entry: str, timestamp_ms: int) -> str:
    """An ``offsets/N`` entry with its ``batchTimestampMs`` replaced (line 2 is the batch's metadata)."""
    lines = entry.split("\n")
    meta = json.loads(lines[1])
    meta["batchTimestampMs"] = timestamp_ms
    lines[1] = json.dumps(meta, separators=(",", ":"))
    return "\n".join(lines)


def _recorded_folders(chaos: Path, spec: QuerySpec) -> dict[str, Path] | None:
    """One input's folder as the chaos run's file-source log records it (a processor-path run keeps
    its files in ``input/``, a builder's in ``input/<name>/``): Spark wants a logged file under the
    source's path."""
    if spec.several:
        return None
    from harness.sss.checkpoint_log import source_files

    paths = [p for names in source_files(RunStore(chaos).query_checkpoint, 0, full=True).values() for p in names]
    if not paths:
        return None
    return {next(iter(spec.inputs)): Path(paths[0].removeprefix("file:")).parent}


def run_batch(start_and_wait: Any, attempts: int = QUERY_STARTS) -> None:
    """One replay batch: ``start_and_wait()`` (start the query for one batch, wait for it), started
    again on the same checkpoint when it failed for the machine's sake (:data:`TRANSIENT`): the
    batch was not committed, so Spark runs it again from its offset log entry, with the same result.
    Any other failure, or the last attempt's, is raised."""
    for attempt in range(attempts):
        try:
            start_and_wait()
            return
        except Exception as e:
            if attempt == attempts - 1 or not transient(e):
                raise
            print(f"replay batch start {attempt + 1} failed for the machine's sake, again: {e}"[:400],
                  file=sys.stderr, flush=True)  # fmt: skip


def _replay(spark: Any, spec: QuerySpec, chaos: Path, out: Path, batches: list[int], clock: str,
            read_state: bool = True) -> dict[str, Any]:  # fmt: skip
    """One replay of ``batches`` in ``out``; ``clock``: ``recorded`` (the chaos run's batch
    timestamps) or ``canonical`` (:data:`CANONICAL_T0` + 1 s per batch). ``read_state`` False (a
    pyspark without a state data source): the state is read later from ``checkpoint``."""
    t0 = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)
    cp = out / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    recorded = RunStore(chaos).query_checkpoint
    shutil.copy(recorded / "metadata", cp / "metadata")
    if (recorded / "sources").exists():
        shutil.copytree(recorded / "sources", cp / "sources")
    output = out / "output"
    output.mkdir()
    df = build_query(spark, spec, RunStore(chaos).query_input, _recorded_folders(chaos, spec))
    state: dict[str, Any] = {}
    state_s = 0.0
    for i, b in enumerate(batches):
        entry = (recorded / "offsets" / str(b)).read_text()
        if clock == "canonical":
            entry = rewrite_timestamp(entry, CANONICAL_T0 + 1000 * i)
        (cp / "offsets" / str(b)).write_text(entry)
        run_batch(lambda: start_query(df.writeStream.outputMode(spec.output_mode), json_sink(output), cp,
                                      None).awaitTermination())  # fmt: skip
        if not (cp / "commits" / str(b)).exists():
            raise RuntimeError(f"the replay did not commit batch {b} (Spark ran another batch?)")
        if read_state:
            t1 = time.monotonic()
            state[str(b)] = read_all_state(spark, cp, b)
            state_s += time.monotonic() - t1
    outputs = {str(b): json.loads(p.read_text()) for b in batches if (p := output / f"batch-{b}.json").exists()}
    return {"clock": clock, "outputs": outputs, "state": state, "seconds": round(time.monotonic() - t0, 2),
            "state_seconds": round(state_s, 2), "checkpoint": str(cp)}  # fmt: skip


def _chaos_state(spark: Any, chaos: Path, batches: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b in batches:
        try:
            out[str(b)] = read_all_state(spark, RunStore(chaos).query_checkpoint, b)
        except Exception as e:  # Spark refusing damaged state is a result
            from harness.sss.errors import spark_error_gist

            out[str(b)] = {"error": spark_error_gist(f"{type(e).__name__}: {e}")}
    return out


def read_deferred_state(request_path: Path) -> int:
    """Fill in the state reads a replay on a pyspark without a state data source left to statechaos's
    own (``state_deferred``): the chaos checkpoint at the requested batches, every replay's at each
    batch. A replay checkpoint this Spark cannot read fails the replay (``error``): nothing to judge."""
    import pyspark

    from harness.spark.cluster import SparkCluster

    req = json.loads(request_path.read_text())
    path = Path(req["result"])
    result = json.loads(path.read_text())
    conf = {**spark_conf(), "spark.sql.streaming.stateStore.maintenanceInterval": "60s"}
    cluster = SparkCluster("local[1]", extra_conf=conf, app_name="statechaos-sss-replay-state")
    cluster.start()
    try:
        # a read ours cannot make is not a refusal by the user's Spark, which never tried: unknown
        result["chaos_state"] = {
            b: {"unreadable": f"pyspark {pyspark.__version__} (statechaos's) could not read it: {got['error']}"}
            if isinstance(got.get("error"), str) else got
            for b, got in _chaos_state(cluster.spark, Path(req["workdir"]), req["state_batches"]).items()
        }  # fmt: skip
        for r in result["replays"]:
            r["state"] = {str(b): read_all_state(cluster.spark, Path(r["checkpoint"]), b) for b in req["batches"]}
        result["state_read_by"] = f"pyspark {pyspark.__version__}, after the replay"
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        cluster.stop()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    tmp.rename(path)
    return 0 if result["error"] is None else 3


def run(request_path: Path) -> int:
    import pyspark

    from harness.spark.cluster import SparkCluster
    from harness.sss.pyspark_env import has_state_source

    req = json.loads(request_path.read_text())
    chaos = Path(req["workdir"])
    spec = QuerySpec.from_json(json.dumps(req["query"]))
    result: dict[str, Any] = {"replays": [], "chaos_state": {}, "error": None, "pyspark": pyspark.__version__}
    reads = has_state_source(pyspark.__version__)
    if not reads:  # read by statechaos's pyspark afterwards (read_deferred_state); every clock replayed,
        # since whether two replays agree is only known with their state
        result["state_deferred"] = f"pyspark {pyspark.__version__} has no state data source"
    # a fresh Python worker per task: memory a UDF keeps outside the state store never carries over,
    # so the replay is the same each time and such memory shows as a difference, not as chance; forked
    # from a daemon that has imported pandas and pyarrow once (a pandas UDF's task starts seconds sooner)
    conf = {**spark_conf(), "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
            "spark.python.worker.reuse": "false", "spark.python.daemon.module": "harness.sss.python_daemon"}
    cluster = SparkCluster(REPLAY_MASTER, extra_conf=conf, app_name="statechaos-sss-replay")
    t0 = time.monotonic()
    cluster.start()
    result["spark_start_seconds"] = round(time.monotonic() - t0, 2)
    try:
        spark = cluster.spark
        t0 = time.monotonic()
        if reads:
            result["chaos_state"] = _chaos_state(spark, chaos, req["state_batches"])
        result["chaos_state_seconds"] = round(time.monotonic() - t0, 2)
        clocks = list(req["clocks"])
        if clocks:
            result["reads_clock"] = reads_clock(plan_text(build_query(spark, spec, RunStore(chaos).query_input,
                                                                      _recorded_folders(chaos, spec))))  # fmt: skip
        if result.get("reads_clock"):  # the canonical clock would only differ: recorded, twice
            clocks = ["recorded", "recorded"]
        for n, clock in enumerate(clocks):
            out = Path(req["replay_dir"]) / f"replay-{n}"
            result["replays"].append(_replay_again_once(spark, spec, chaos, out, req["batches"], clock, reads))
            if n == 1 and reads and _same(result["replays"][0], result["replays"][1]) and req.get("stop_when_equal"):
                break
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        cluster.stop()
    tmp = Path(req["result"]).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    tmp.rename(req["result"])
    return 0 if result["error"] is None else 3


def _replay_again_once(spark: Any, spec: QuerySpec, chaos: Path, out: Path, batches: list[int], clock: str,
                       read_state: bool = True) -> dict[str, Any]:  # fmt: skip
    """:func:`_replay`, started afresh once more when it fails: a fault-free replay that fails for the
    machine's sake (a Python worker that did not connect back in time on a loaded machine) is not a
    result; a query that fails twice is reported as the replay failing (``unknown``)."""
    try:
        return _replay(spark, spec, chaos, out, batches, clock, read_state)
    except Exception:
        traceback.print_exc()
        return _replay(spark, spec, chaos, out, batches, clock, read_state)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    from harness.sss.row_diff import replay_differences

    return not replay_differences(a, b)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--state":
        return read_deferred_state(Path(args[1]))
    if len(args) != 1:
        print("usage: python -m harness.sss.replay [--state] REQUEST.json", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
