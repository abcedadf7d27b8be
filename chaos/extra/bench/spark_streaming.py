"""The baseline users would pick instead: the same keyed running count written with Spark Structured
Streaming's own stateful operators, on the same cluster, input and checkpoint interval, so the
end-to-end and recovery figures are ratios against it.

Operators: ``applyInPandasWithState`` (state API v1), and where their dependencies are installed
(protobuf) the state API v2 ones, ``transformWithStateInPandas`` and ``transformWithState`` (rows);
all with the RocksDB state store. The stream reads CSV files of ``key,seq`` (written before the
clock starts) with ``maxFilesPerTrigger``, so a run has a fixed number of micro-batches (every
micro-batch is a checkpoint in Structured Streaming: offsets, state store version, commit). With
``back_to_back`` the query uses the ``availableNow`` trigger: each micro-batch starts as soon as the
previous one committed, so Spark never sits idle waiting for a processing-time trigger; otherwise
the trigger interval is the checkpoint interval. Output goes to the ``noop`` sink, one row per key
per micro-batch: less work than our runtime does (one output record per input record, through an
exactly-once file sink), so the comparison favours Spark.

``NATIVE`` (``groupBy("key").count()``) is Spark's JVM aggregation, no Python per record: reported
beside the pandas operators as the reference for what the JVM does, not as a peer.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "NATIVE",
    "OPERATORS",
    "StreamingResult",
    "available_operators",
    "write_input",
    "run_structured_streaming_count",
]

OPERATORS = ("applyInPandasWithState", "transformWithStateInPandas", "transformWithState")
NATIVE = "groupBy.count"
_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@dataclass
class StreamingResult:
    operator: str
    records: int
    keys: int
    seconds: float
    batches: int
    recovery_seconds: float | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def available_operators() -> dict[str, str | None]:
    """Operator -> None if it can run here, else why not (the state API v2 needs protobuf)."""
    try:
        v2 = None if importlib.util.find_spec("google.protobuf") else "needs protobuf, not installed"
    except ModuleNotFoundError:  # no "google" namespace at all
        v2 = "needs protobuf, not installed"
    return {
        "applyInPandasWithState": None,
        "transformWithStateInPandas": v2,
        "transformWithState": v2,
        NATIVE: None,
    }


def write_input(directory: Path, records: int, keys: int, files: int, seed: int = 0) -> int:
    """Input as CSV files of ``key,seq``: per-key sequence numbers from 1 (the reference source's shape)."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    key_ids = rng.integers(0, keys, size=records)
    # per-key sequence numbers: rank of each occurrence within its key, in input order
    order = np.argsort(key_ids, kind="stable")
    sorted_keys = key_ids[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_keys)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, records]))
    seq = np.empty(records, dtype=np.int64)
    seq[order] = np.arange(records) - run_start + 1
    per_file = -(-records // files)
    for f in range(files):
        lo, hi = f * per_file, min(records, (f + 1) * per_file)
        if lo >= hi:
            break
        lines = "\n".join(f"k{k},{s}" for k, s in zip(key_ids[lo:hi], seq[lo:hi], strict=True))
        tmp = directory / f".part-{f:05d}.csv.tmp"
        tmp.write_text(lines + "\n")
        tmp.rename(directory / f"part-{f:05d}.csv")
    return records


def _count_fn(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    total = state.get[0] if state.exists else 0
    for pdf in pdfs:
        total += len(pdf)
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "count": [total]})


def _processor(rows: bool) -> Any:
    """A StatefulProcessor (state API v2) keeping the running count in a ValueState."""
    from pyspark.sql.streaming import StatefulProcessor

    class RunningCount(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows_in: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N802, N803
            total = self.count.get()[0] if self.count.exists() else 0
            if rows:
                from pyspark.sql import Row

                total += sum(1 for _ in rows_in)
                self.count.update((total,))
                yield Row(key=key[0], count=total)
            else:
                import pandas as pd

                total += sum(len(pdf) for pdf in rows_in)
                self.count.update((total,))
                yield pd.DataFrame({"key": [key[0]], "count": [total]})

        def close(self) -> None:
            pass

    return RunningCount()


def _counted(stream: Any, operator: str) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    out_schema = "key string, count long"
    grouped = stream.groupBy("key")
    if operator == NATIVE:
        return grouped.count()
    if operator == "applyInPandasWithState":
        return grouped.applyInPandasWithState(
            _count_fn, out_schema, "count long", "Update", GroupStateTimeout.NoTimeout
        )
    if operator == "transformWithStateInPandas":
        return grouped.transformWithStateInPandas(_processor(rows=False), out_schema, "Update", "None")
    if operator == "transformWithState":
        return grouped.transformWithState(_processor(rows=True), out_schema, "Update", "None")
    raise ValueError(f"unknown Structured Streaming operator {operator!r}; known: {', '.join(OPERATORS)}")


def run_structured_streaming_count(
    spark: Any,
    records: int,
    keys: int,
    interval_ms: int,
    operator: str = "applyInPandasWithState",
    batches: int = 10,
    kill_executor_pid: Callable[[], int] | None = None,
    kill_after_batches: int = 2,
    stop_after_recovery: bool = False,
    input_dir: Path | None = None,
    time_limit_s: float = 900.0,
    back_to_back: bool = False,
) -> StreamingResult:
    """Run the keyed count over ``records`` rows in ``batches`` micro-batches (trigger interval
    ``interval_ms``); the clock runs from ``start()`` until the micro-batch holding the last row has
    committed. With ``kill_executor_pid`` (a callable giving an executor pid), SIGKILL that executor
    once ``kill_after_batches`` micro-batches have committed and measure the time until the next
    micro-batch commits (Spark's recovery; with ``stop_after_recovery`` the run ends there, and
    ``seconds`` covers only that much). ``back_to_back``: the ``availableNow`` trigger instead of a
    processing-time one (micro-batches run one after another, ``interval_ms`` unused). ``input_dir``: reuse input written by :func:`write_input`
    with ``files == batches`` (else a temporary one is written, before the clock starts)."""
    why = available_operators().get(operator, "unknown operator")
    if why is not None:
        raise RuntimeError(f"Structured Streaming operator {operator}: {why}")
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    with contextlib.ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="statechaos-sss-")))
        src = input_dir if input_dir is not None else base / "input"
        if input_dir is None:
            write_input(src, records, keys, batches)
        commits = base / "checkpoint" / "commits"
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB)
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))
        schema = StructType([StructField("key", StringType()), StructField("seq", LongType())])
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).csv(str(src))
        t0 = time.perf_counter()
        query = (
            _counted(stream, operator)
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(base / "checkpoint"))
            .trigger(
                **(
                    {"availableNow": True}
                    if back_to_back
                    else {"processingTime": f"{interval_ms} milliseconds"}
                )
            )
            .start()
        )
        stack.callback(_stop_query, query)
        killed_at: float | None = None
        killed_commits = 0
        recovery: float | None = None
        while True:
            done = _committed(commits)
            now = time.perf_counter()
            if killed_at is not None and recovery is None and done > killed_commits:
                recovery = now - killed_at
            if done >= batches or (stop_after_recovery and recovery is not None):
                seconds = now - t0
                break
            if query.exception() is not None:
                raise RuntimeError(f"Structured Streaming query failed: {query.exception()}")
            if now - t0 > time_limit_s:
                raise TimeoutError(f"Structured Streaming did not finish within {time_limit_s:.0f} s")
            if kill_executor_pid is not None and killed_at is None and done >= kill_after_batches:
                os.kill(kill_executor_pid(), signal.SIGKILL)
                killed_at, killed_commits = time.perf_counter(), done
            time.sleep(0.01)
        return StreamingResult(operator, records, keys, seconds, done, recovery)
    raise AssertionError("unreachable")  # pragma: no cover (ExitStack swallows nothing)


def _committed(commits: Path) -> int:
    """Micro-batches committed so far: files ``0``, ``1``... in the checkpoint's ``commits/``."""
    try:
        return sum(1 for p in commits.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return 0


def _stop_query(query: Any) -> None:
    stopper = threading.Thread(target=query.stop, daemon=True)
    stopper.start()
    stopper.join(60)
