"""A stream-stream inner join with watermarks on both sides: each click joined with the views of the
same user in the 5 s before it (event time). Spark keeps both sides' rows in join state (the state
data source reads them with ``joinSide: left`` / ``right``) and evicts them as the watermarks pass.

``build`` takes ``{"clicks": df, "views": df}``; ``make_inputs`` gives per micro-batch one file of
each. ``build_leaky`` is its broken twin: it numbers each user's clicks with a counter kept in the
Python worker's memory instead of the state store."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import LongType

INPUTS = {"clicks": "user string, cts timestamp, page string", "views": "vuser string, vts timestamp, ad string"}


def _join(clicks: Any, views: Any) -> Any:
    return clicks.withWatermark("cts", "10 seconds").join(
        views.withWatermark("vts", "10 seconds"),
        F.expr("user = vuser AND vts BETWEEN cts - interval 5 seconds AND cts"),
    )


def build(spark: Any, inputs: dict[str, Any]) -> Any:
    return _join(inputs["clicks"], inputs["views"])


@F.udf(LongType())
def _nth_click(user):  # noqa: ANN001, ANN202 - type hints would make pyspark guess a pandas UDF
    import sys

    seen = sys.__dict__.setdefault("_join_seen", {})  # one Python worker's memory, not Spark's state
    seen[user] = seen.get(user, 0) + 1
    return seen[user]


def build_leaky(spark: Any, inputs: dict[str, Any]) -> Any:
    """The broken twin: each click numbered per user by a counter in the Python worker, not in state."""
    return _join(inputs["clicks"].withColumn("nth", _nth_click("user")), inputs["views"])


def make_inputs(files: int = 6, users: int = 2) -> list[dict[str, list[dict[str, Any]]]]:
    out = []
    for i in range(files):
        t = 4 * i
        out.append({
            "views": [{"vuser": f"u{u}", "vts": f"2026-01-01 00:00:{t + u:02d}", "ad": f"a{(i + u) % 2}"}
                      for u in range(users)],
            "clicks": [{"user": f"u{u}", "cts": f"2026-01-01 00:00:{t + u + 2:02d}", "page": f"p{i}"}
                       for u in range(users)],
        })  # fmt: skip
    return out
