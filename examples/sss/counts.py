"""A running count per user with no watermark: the table grows forever, so Spark runs it in
``complete`` mode (every batch emits the whole table; ``counts-complete-local.yaml``) or ``update``
mode (every batch emits the users it changed; the sink examples ``counts-sink-*-local.yaml``). The
input is :func:`examples.sss.windowed.make_inputs` (user, ts, n)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from examples.sss.windowed import INPUT_SCHEMA, make_inputs

__all__ = ["INPUT_SCHEMA", "build", "make_inputs"]


def build(spark: Any, events: Any) -> Any:
    return events.groupBy("user").agg(F.count("*").alias("clicks"), F.sum("n").alias("total"))
