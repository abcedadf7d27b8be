"""An event-time ``transformWithStateInPandas`` with initial state: per user, a click count seeded
from a batch DataFrame of earlier counts (``handleInitialState``), kept in a ValueState, with an
event-time timer 5 s past the user's latest click that emits the total and clears the state once the
watermark passes it. ``build_leaky`` is its broken twin: the count of new clicks kept in a side store
outside the state store, which a driver restart empties."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

INPUT_SCHEMA = "user string, ts timestamp, click long"
OUTPUT_SCHEMA = "user string, kind string, clicks long"
GAP_MS = 5_000


class ClickCounts(StatefulProcessor):
    def init(self, handle: Any) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "clicks long")
        self.expires = handle.getValueState("expires", "at long")

    def _add(self, key: Any, n: int, latest_ms: int) -> int:
        total = (int(self.count.get()[0]) if self.count.exists() else 0) + n
        self.count.update((total,))
        if self.expires.exists():
            self.handle.deleteTimer(int(self.expires.get()[0]))
        self.expires.update((latest_ms + GAP_MS,))
        self.handle.registerTimer(latest_ms + GAP_MS)
        return total

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        frames = list(rows)
        n = sum(len(f) for f in frames)
        latest = max(int(pd.Timestamp(t).value // 1_000_000) for f in frames for t in f["ts"])
        total = self._add(key, self.more(key[0], n), latest)
        yield pd.DataFrame({"user": [key[0]], "kind": ["count"], "clicks": [total]})

    def more(self, user: str, n: int) -> int:
        return n

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        total = int(self.count.get()[0]) if self.count.exists() else 0
        self.count.clear()
        self.expires.clear()
        yield pd.DataFrame({"user": [key[0]], "kind": ["closed"], "clicks": [total]})

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N802, N803
        self.count.update((int(initialState.at[0, "clicks"]),))

    def close(self) -> None:
        pass


class LeakyClickCounts(ClickCounts):
    """Broken: adds a user's clicks counted in a side store (files in ``folder``, one per query
    built, as in ``examples/sss/sessions.py``) to the state's count. Fault-free the run and its
    replay count alike; a driver restart starts an empty side store. (Counted in the Python worker's
    memory it would not be caught: a ``transformWithStateInPandas`` task's worker does not outlive its
    micro-batch, in the chaos run and the replay alike, so that memory forgets every batch.)"""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def more(self, user: str, n: int) -> int:
        import os

        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"clicks-{user}")
        seen = (int(open(path).read()) if os.path.exists(path) else 0) + n  # noqa: SIM115, PTH123
        with open(path, "w") as f:  # noqa: PTH123
            f.write(str(seen))
        return seen


def _build(spark: Any, events: Any, processor: StatefulProcessor) -> Any:
    initial = spark.createDataFrame([("u0", 100), ("u1", 200)], "user string, clicks long").groupBy("user")
    return (
        events.withWatermark("ts", "2 seconds")
        .groupBy("user")
        .transformWithStateInPandas(processor, OUTPUT_SCHEMA, "Update", "EventTime", initialState=initial)
    )


def build(spark: Any, events: Any) -> Any:
    return _build(spark, events, ClickCounts())


def build_leaky(spark: Any, events: Any) -> Any:
    from examples.sss.sessions import _side_store

    return _build(spark, events, LeakyClickCounts(_side_store()))
