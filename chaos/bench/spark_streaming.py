"""The baseline users would pick instead: the same keyed running count written with Spark Structured
Streaming's own stateful operator (``applyInPandasWithState``, RocksDB state store), on the same
cluster, input and checkpoint interval, so end-to-end and recovery figures are ratios against it."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["StreamingResult", "write_input", "run_structured_streaming_count"]


@dataclass
class StreamingResult:
    records: int
    keys: int
    seconds: float
    batches: int
    recovery_seconds: float | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def write_input(directory: Path, records: int, keys: int, files: int, seed: int = 0) -> int:
    """Input as CSV files of ``key,seq``: per-key sequence numbers from 1 (the reference source's shape)."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    key_ids = rng.integers(0, keys, size=records)
    seq = np.zeros(records, dtype=np.int64)
    counters = np.zeros(keys, dtype=np.int64)
    for i, k in enumerate(key_ids):  # per-key sequence numbers: sequential by definition
        counters[k] += 1
        seq[i] = counters[k]
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


def run_structured_streaming_count(
    spark: Any,
    records: int,
    keys: int,
    interval_ms: int,
    files: int = 40,
    kill_executor_pid: Any = None,
    workdir: Path | None = None,
) -> StreamingResult:
    """Run the keyed count over ``records`` rows with one micro-batch per ``interval_ms``; return the
    throughput. With ``kill_executor_pid`` (a callable giving an executor pid), SIGKILL it after the
    first batches and measure the time until the next batch completes (Spark's recovery)."""
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    tmp_ctx = tempfile.TemporaryDirectory(prefix="statechaos-sss-") if workdir is None else None
    base = Path(tmp_ctx.name) if tmp_ctx else workdir
    assert base is not None
    try:
        src, ckpt = base / "input", base / "checkpoint"
        write_input(src, records, keys, files)
        spark.conf.set(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, spark.sparkContext.defaultParallelism)))
        schema = StructType([StructField("key", StringType()), StructField("seq", LongType())])
        stream = (
            spark.readStream.schema(schema).option("maxFilesPerTrigger", max(1, files // 10)).csv(str(src))
        )
        out_schema = "key string, count long"
        counted = stream.groupBy("key").applyInPandasWithState(
            _count_fn, out_schema, "count long", "Update", GroupStateTimeout.NoTimeout
        )
        query = (
            counted.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime=f"{interval_ms} milliseconds")
            .start()
        )
        t0 = time.perf_counter()
        seen, batches = 0, 0
        recovery: float | None = None
        killed_at: float | None = None
        last_batch = -1
        try:
            while seen < records:
                if query.exception() is not None:
                    raise RuntimeError(f"Structured Streaming query failed: {query.exception()}")
                for p in query.recentProgress:
                    if p["batchId"] > last_batch:
                        last_batch = p["batchId"]
                        seen += int(p.get("numInputRows", 0))
                        batches += 1
                        if killed_at is not None and recovery is None and p.get("numInputRows", 0) > 0:
                            recovery = time.perf_counter() - killed_at
                if kill_executor_pid is not None and killed_at is None and batches >= 2:
                    os.kill(kill_executor_pid(), signal.SIGKILL)
                    killed_at = time.perf_counter()
                time.sleep(0.05)
            seconds = time.perf_counter() - t0
        finally:
            stopper = threading.Thread(target=query.stop, daemon=True)
            stopper.start()
            stopper.join(60)
        return StreamingResult(records, keys, seconds, batches, recovery)
    finally:
        if tmp_ctx:
            tmp_ctx.cleanup()
