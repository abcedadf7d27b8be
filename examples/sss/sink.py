"""Your own foreachBatch sink under chaos (``sink:`` in a scenario).

``write_by_batch_id`` is idempotent: batch N's rows go to ``batch-N.jsonl`` by rename, so a batch
Spark replays after a failure replaces its own file. ``write_append`` is its broken twin: a plain
append, so a batch replayed between the write and Spark's ``commits/N`` is written twice. A driver
kill ``at: after_sink_write`` hits exactly that window (sink-by-batch-local.yaml passes,
sink-append-local.yaml is caught). ``read`` is what statechaos judges: every committed batch's rows,
exactly once.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

OUTPUT_SCHEMA = "user string, kind string, total long, items long"


def _lines(df: Any) -> str:
    return "".join(json.dumps(r.asDict()) + "\n" for r in df.collect())


def write_by_batch_id(df: Any, batch_id: int, path: str) -> None:
    tmp = Path(path) / f".batch-{batch_id}.jsonl.tmp"  # Spark's reader skips names starting with "."
    tmp.write_text(_lines(df))
    os.replace(tmp, Path(path) / f"batch-{batch_id}.jsonl")


def write_append(df: Any, batch_id: int, path: str) -> None:
    tmp = Path(path) / f".part-{uuid.uuid4().hex}.jsonl.tmp"
    tmp.write_text(_lines(df))
    os.replace(tmp, Path(path) / f"part-{uuid.uuid4().hex}.jsonl")  # a new file per call: replays add rows


def read(spark: Any, path: str) -> Any:
    if not any(p.suffix == ".jsonl" for p in Path(path).iterdir()):
        return []
    return spark.read.schema(OUTPUT_SCHEMA).json(path)
