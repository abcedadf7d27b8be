"""Session windows: each user's clicks grouped into sessions that close after a 5 s gap (event time),
emitted in append mode once the watermark (max event time - 5 s) passes a session's end. The
session window operator keeps each open session in its state store (``op0/default``).

``make_inputs`` writes, per micro-batch, a burst of clicks for some users; a user who skips a batch
has its session closed. ``build_dedup`` is a second query on the same input:
``dropDuplicatesWithinWatermark`` on (user, click) with clicks repeated in the next batch.
The broken twins keep something outside the state store, in a side store of files that lives as long
as the query object the builder made (one per driver start, one per replay), as a cache on local disk
or in a service keyed by the deployment would: fault-free, the run and its replay agree; a driver
restart starts an empty side store, and the run is caught.

- ``build_leaky`` (``sessions-leaky-local.yaml``): each click numbered per user from the side store,
  the session's highest number in the output and the state; after a restart numbering starts again.
- ``build_dedup_leaky`` (``dedup-leaky-local.yaml``): the dedup key includes "first delivery?", taken
  from the side store. Fault-free a redelivered click is not first, so it is kept (the key differs);
  after a restart the side store has forgotten the original, the redelivery counts as first, its key
  equals the original's, and ``dropDuplicatesWithinWatermark`` drops it: a row lost after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType

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


def _side_store() -> str:
    """A new side store's folder (the twins' state outside the state store), one per query built."""
    import tempfile
    import uuid

    return str(Path(tempfile.gettempdir()) / "statechaos-side-store" / uuid.uuid4().hex)


def _numbered(folder: str) -> Any:
    @F.udf(LongType())
    def nth(user):  # noqa: ANN001, ANN202 - type hints would make pyspark guess a pandas UDF
        import os

        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"n-{user}")
        n = (int(open(path).read()) if os.path.exists(path) else 0) + 1  # noqa: SIM115, PTH123
        with open(path, "w") as f:  # noqa: PTH123
            f.write(str(n))
        return n

    return nth


def _first_delivery(folder: str) -> Any:
    @F.udf(BooleanType())
    def first(user, click):  # noqa: ANN001, ANN202
        import os

        os.makedirs(folder, exist_ok=True)
        try:
            os.close(os.open(os.path.join(folder, f"seen-{user}-{click}"), os.O_CREAT | os.O_EXCL))
            return True
        except FileExistsError:
            return False

    return first


def build_leaky(spark: Any, events: Any) -> Any:
    return (
        events.withWatermark("ts", "5 seconds")
        .withColumn("nth", _numbered(_side_store())("user"))
        .groupBy(F.session_window("ts", "5 seconds"), "user")
        .agg(F.count("*").alias("clicks"), F.max("nth").alias("nth"))
    )


def build_dedup_leaky(spark: Any, events: Any) -> Any:
    return (
        events.withWatermark("ts", "10 seconds")
        .withColumn("first", _first_delivery(_side_store())("user", "click"))
        .dropDuplicatesWithinWatermark(["user", "click", "first"])
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
