"""Session windows: each user's clicks grouped into sessions that close after a 5 s gap (event time),
emitted in append mode once the watermark (max event time - 5 s) passes a session's end. The
session window operator keeps each open session in its state store (``op0/default``).

``make_inputs`` writes, per micro-batch, a burst of clicks for some users; a user who skips a batch
has its session closed. ``build_dedup`` is a second query on the same input:
``dropDuplicatesWithinWatermark`` on (user, click) with clicks repeated in the next batch.
``build_leaky`` is the broken twin of ``build``: a click counter in the Python worker's memory."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import LongType

INPUT_SCHEMA = "user string, ts timestamp, click long"


def build(spark: Any, events: Any) -> Any:
    return (
        events.withWatermark("ts", "5 seconds")
        .groupBy(F.session_window("ts", "5 seconds"), "user")
        .agg(F.count("*").alias("clicks"))
    )


def build_dedup(spark: Any, events: Any) -> Any:
    """Each (user, click) once, however often it is delivered within the watermark's delay."""
    return events.withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["user", "click"])


@F.udf(LongType())
def _numbered(user):  # noqa: ANN001, ANN202 - type hints would make pyspark guess a pandas UDF
    import sys

    seen = sys.__dict__.setdefault("_sessions_seen", {})  # one Python worker's memory, not Spark's state
    seen[user] = seen.get(user, 0) + 1
    return seen[user]


def build_leaky(spark: Any, events: Any) -> Any:
    return (
        events.withWatermark("ts", "5 seconds")
        .withColumn("nth", _numbered("user"))
        .groupBy(F.session_window("ts", "5 seconds"), "user")
        .agg(F.count("*").alias("clicks"), F.max("nth").alias("nth"))
    )


def make_inputs(files: int = 6, users: int = 3) -> list[list[dict[str, Any]]]:
    out = []
    for i in range(files):
        t = 3 * i
        rows = [{"user": f"u{u}", "ts": f"2026-01-01 00:00:{t + u % 2:02d}", "click": 10 * i + u}
                for u in range(users) if (i + u) % 3 != 0]  # fmt: skip
        if i:  # a repeat of the previous batch's first click: the dedup query must drop it
            prev = out[-1][0] if out[-1] else None
            rows += [prev] if prev else []
        out.append(rows)
    return out
