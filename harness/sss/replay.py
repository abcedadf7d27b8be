"""The fault-free replay of a query's recorded micro-batches, and the state reads of both checkpoints
(``python -m harness.sss.replay REQUEST.json``, a child of the orchestrator, on a ``local[1]`` session).

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
by batch, ``state`` by batch and store, ``seconds``) and ``chaos_state`` (by batch: store -> rows, or
``error``: what Spark said when it would not read the state).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from harness.sss.query import QuerySpec, build_query
from harness.sss.query_run import QUERY_STARTS, json_sink, spark_conf, start_query, transient
from harness.sss.values import canon

__all__ = ["read_all_state", "rewrite_timestamp", "run_batch", "CANONICAL_T0", "main"]

CANONICAL_T0 = 1_600_000_000_000  # the clock-free replay's first batch timestamp; then +1 s per batch


def _stores(spark: Any, checkpoint: Path) -> list[dict[str, Any]]:
    """The plan's state stores as ``state-metadata`` lists them, as state data source options."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r in spark.read.format("state-metadata").load(str(checkpoint)).collect():
        m = r.asDict(recursive=True)
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


def _named(v: Any) -> Any:
    """A state row in the canonical value form (:mod:`harness.sss.values`), its structs kept as
    named fields, so a difference names its nested column (``value.sum``)."""
    if hasattr(v, "asDict") and isinstance(v, tuple):  # a pyspark Row (a struct)
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

    paths = [p for names in source_files(chaos / "checkpoint", 0, full=True).values() for p in names]
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


def _replay(spark: Any, spec: QuerySpec, chaos: Path, out: Path, batches: list[int], clock: str) -> dict[str, Any]:
    """One replay of ``batches`` in ``out``; ``clock``: ``recorded`` (the chaos run's batch
    timestamps) or ``canonical`` (:data:`CANONICAL_T0` + 1 s per batch)."""
    t0 = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)
    cp = out / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    shutil.copy(chaos / "checkpoint" / "metadata", cp / "metadata")
    if (chaos / "checkpoint" / "sources").exists():
        shutil.copytree(chaos / "checkpoint" / "sources", cp / "sources")
    output = out / "output"
    output.mkdir()
    df = build_query(spark, spec, chaos / "input", _recorded_folders(chaos, spec))
    state: dict[str, Any] = {}
    for i, b in enumerate(batches):
        entry = (chaos / "checkpoint" / "offsets" / str(b)).read_text()
        if clock == "canonical":
            entry = rewrite_timestamp(entry, CANONICAL_T0 + 1000 * i)
        (cp / "offsets" / str(b)).write_text(entry)
        run_batch(lambda: start_query(df.writeStream.outputMode(spec.output_mode), json_sink(output), cp,
                                      None).awaitTermination())  # fmt: skip
        if not (cp / "commits" / str(b)).exists():
            raise RuntimeError(f"the replay did not commit batch {b} (Spark ran another batch?)")
        state[str(b)] = read_all_state(spark, cp, b)
    outputs = {str(b): json.loads(p.read_text()) for b in batches if (p := output / f"batch-{b}.json").exists()}
    return {"clock": clock, "outputs": outputs, "state": state, "seconds": round(time.monotonic() - t0, 2)}


def run(request_path: Path) -> int:
    from harness.spark.cluster import SparkCluster

    req = json.loads(request_path.read_text())
    chaos = Path(req["workdir"])
    spec = QuerySpec.from_json(json.dumps(req["query"]))
    result: dict[str, Any] = {"replays": [], "chaos_state": {}, "error": None}
    # a fresh Python worker per task: memory a UDF keeps outside the state store never carries over,
    # so the replay is the same each time and such memory shows as a difference, not as chance
    conf = {**spark_conf(), "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
            "spark.python.worker.reuse": "false"}
    cluster = SparkCluster("local[1]", extra_conf=conf, app_name="statechaos-sss-replay")
    cluster.start()
    try:
        spark = cluster.spark
        for b in req["state_batches"]:
            try:
                result["chaos_state"][str(b)] = read_all_state(spark, chaos / "checkpoint", b)
            except Exception as e:  # Spark refusing damaged state is a result
                from harness.sss.errors import spark_error_gist

                result["chaos_state"][str(b)] = {"error": spark_error_gist(f"{type(e).__name__}: {e}")}
        for n, clock in enumerate(req["clocks"]):
            out = Path(req["replay_dir"]) / f"replay-{n}"
            result["replays"].append(_replay_again_once(spark, spec, chaos, out, req["batches"], clock))
            if n == 1 and _same(result["replays"][0], result["replays"][1]) and req.get("stop_when_equal"):
                break
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        cluster.stop()
    tmp = Path(req["result"]).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    tmp.rename(req["result"])
    return 0 if result["error"] is None else 3


def _replay_again_once(spark: Any, spec: QuerySpec, chaos: Path, out: Path, batches: list[int], clock: str) -> dict[str, Any]:
    """:func:`_replay`, started afresh once more when it fails: a fault-free replay that fails for the
    machine's sake (a Python worker that did not connect back in time on a loaded machine) is not a
    result; a query that fails twice is reported as the replay failing (``unknown``)."""
    try:
        return _replay(spark, spec, chaos, out, batches, clock)
    except Exception:
        traceback.print_exc()
        return _replay(spark, spec, chaos, out, batches, clock)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    from harness.sss.replay_oracle import replay_differences

    return not replay_differences(a, b)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.sss.replay REQUEST.json", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
