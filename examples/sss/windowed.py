"""A windowed count with a watermark (append mode): clicks per user per 10 s event-time window,
emitted once the watermark (max event time - 5 s) passes the window's end.

``build`` is the query; ``make_inputs`` writes ``files`` micro-batches of clicks, each 4 s of event
time later than the one before, so windows close as the input goes on. ``build_leaky`` is its broken
twin: it numbers each user's clicks with a counter kept in the Python worker's memory (outside the
state store; on ``sys``, as a module global would be reset by pickling the module by value), which
a killed executor's new workers lose, and which the replay (a fresh worker per task) never has."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import LongType

INPUT_SCHEMA = "user string, ts timestamp, n long"


def build(spark: Any, events: Any) -> Any:
    return (
        events.withWatermark("ts", "5 seconds")
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count("*").alias("clicks"), F.sum("n").alias("total"))
    )


@F.udf(LongType())
def _running_count(user):  # noqa: ANN001, ANN202 - type hints would make pyspark guess a pandas UDF
    import sys

    seen = sys.__dict__.setdefault("_windowed_seen", {})  # one Python worker's memory, not Spark's state
    seen[user] = seen.get(user, 0) + 1
    return seen[user]


def build_leaky(spark: Any, events: Any) -> Any:
    """The broken twin: a per-user running number from ``_seen``, summed per window."""
    return (
        events.withWatermark("ts", "5 seconds")
        .withColumn("seq", _running_count("user"))
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count("*").alias("clicks"), F.max("seq").alias("last_seq"))
    )


def make_inputs(files: int = 6, users: int = 3) -> list[list[dict[str, Any]]]:
    out = []
    for i in range(files):
        out.append([{"user": f"u{u}", "ts": f"2026-01-01 00:00:{(4 * i + u) % 60:02d}"[:19], "n": i + u}
                    for u in range(users)])  # fmt: skip
    return out


def build_random(spark: Any, events: Any) -> Any:
    """Deliberately non-deterministic: each window's clicks get a random score. Never a finding: the
    replay runs twice, the two differ, and the verdict is ``unknown``, naming the column."""
    return (
        events.withWatermark("ts", "5 seconds")
        .withColumn("score", F.rand())
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count("*").alias("clicks"), F.sum("score").alias("score"))
    )


def build_unbounded(spark: Any, events: Any) -> Any:
    """Not a query Spark runs in append mode: an aggregation with no watermark (``validate`` refuses it)."""
    return events.groupBy("user").count()
