"""Your own foreachBatch sink for any query's rows (Parquet), and its broken twin.

``write_by_batch_id`` is idempotent: batch N's rows replace the folder ``batch-N``, so a batch Spark
replays after a failure rewrites its own rows. ``write_append`` is the twin: a plain append to one
folder, so a batch replayed between the write and Spark's ``commits/N`` is written twice; a driver kill
``at: after_sink_write`` hits exactly that window (``counts-sink-by-batch-local.yaml`` passes,
``counts-sink-append-local.yaml`` is caught). ``read`` is what statechaos judges: every committed
batch's rows, exactly once. An empty batch writes nothing (Parquet would keep no schema for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_by_batch_id(df: Any, batch_id: int, path: str) -> None:
    if not df.isEmpty():
        df.write.mode("overwrite").parquet(f"{path}/batch-{batch_id}")


def write_append(df: Any, batch_id: int, path: str) -> None:
    if not df.isEmpty():
        df.write.mode("append").parquet(f"{path}/all")


def read(spark: Any, path: str) -> Any:
    folders = [str(p) for p in sorted(Path(path).iterdir()) if p.is_dir() and any(p.glob("*.parquet"))]
    return spark.read.parquet(*folders) if folders else []
