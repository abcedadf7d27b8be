"""Every Python stateful API Spark has, as your query (builders), on the click input of
:mod:`examples.sss.sessions` (user, ts, click): a running click count per user, seeded from
earlier counts where the API takes an initial state, and closed by a timer or timeout.

- ``build_rows``: the row-based ``transformWithState`` (pyspark 4.1+), event time, initial state;
- ``build_proctime``: ``transformWithStateInPandas``, processing time (a timer 2 s after a user's
  first click), initial state, the count kept with a TTL;
- ``build_none``: ``transformWithStateInPandas``, no time mode, initial state;
- ``build_apply_eventtime`` / ``build_apply_proctime``: ``applyInPandasWithState`` with
  ``EventTimeTimeout`` (5 s of event time past the latest click) / ``ProcessingTimeTimeout`` (2 s).

The event-time one (and :mod:`examples.sss.sessions_tws`) is replayed clock-free; the processing-time
ones read the batch timestamp and are replayed on the chaos run's recorded clock
(docs/structured-streaming.md, "The clock")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.streaming.state import GroupStateTimeout

from examples.sss.sessions import INPUT_SCHEMA, make_inputs

__all__ = ["INPUT_SCHEMA", "make_inputs", "build_rows", "build_proctime", "build_none", "build_apply_eventtime",
           "build_apply_proctime"]  # fmt: skip

OUTPUT_SCHEMA = "user string, kind string, clicks long"
GAP_MS = 5_000
PROC_MS = 2_000
INITIAL = [("u0", 100), ("u1", 200)]


def _initial(spark: Any) -> Any:
    return spark.createDataFrame(INITIAL, "user string, clicks long").groupBy("user")


class RowCounts(StatefulProcessor):
    """Row-based: input and output are ``Row`` iterators; an event-time timer GAP_MS past the latest click."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "clicks long")
        self.expires = handle.getValueState("expires", "at long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803
        rows = list(rows)
        latest = max(int(r.ts.timestamp() * 1000) for r in rows)
        total = (self.count.get()[0] if self.count.exists() else 0) + len(rows)
        self.count.update((total,))
        if self.expires.exists():
            self.handle.deleteTimer(self.expires.get()[0])
        self.expires.update((latest + GAP_MS,))
        self.handle.registerTimer(latest + GAP_MS)
        yield Row(user=key[0], kind="count", clicks=total)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:  # noqa: N802, N803
        total = self.count.get()[0] if self.count.exists() else 0
        self.count.clear()
        self.expires.clear()
        yield Row(user=key[0], kind="closed", clicks=total)

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:  # noqa: N802, N803
        self.count.update((initialState.clicks,))

    def close(self) -> None:
        pass


def build_rows(spark: Any, events: Any) -> Any:
    return (events.withWatermark("ts", "2 seconds").groupBy("user")
            .transformWithState(RowCounts(), OUTPUT_SCHEMA, "Update", "EventTime", initialState=_initial(spark)))  # fmt: skip


class PandasCounts(StatefulProcessor):
    """pandas: a count per user (with a TTL in processing time); in ``ProcessingTime`` mode a timer
    PROC_MS after the first click of a round emits the count and clears it."""

    def __init__(self, timers: bool) -> None:
        self.timers = timers

    def init(self, handle: Any) -> None:
        self.handle = handle
        ttl = 600_000 if self.timers else None
        self.count = handle.getValueState("count", "clicks long", ttl)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        n = sum(len(f) for f in rows)
        had = self.count.exists()
        total = (int(self.count.get()[0]) if had else 0) + n
        self.count.update((total,))
        if self.timers and not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + PROC_MS)
        yield pd.DataFrame({"user": [key[0]], "kind": ["count"], "clicks": [total]})

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        total = int(self.count.get()[0]) if self.count.exists() else 0
        self.count.clear()
        yield pd.DataFrame({"user": [key[0]], "kind": ["closed"], "clicks": [total]})

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N802, N803
        self.count.update((int(initialState.at[0, "clicks"]),))

    def close(self) -> None:
        pass


def build_proctime(spark: Any, events: Any) -> Any:
    return events.groupBy("user").transformWithStateInPandas(
        PandasCounts(timers=True), OUTPUT_SCHEMA, "Update", "ProcessingTime", initialState=_initial(spark))


def build_none(spark: Any, events: Any) -> Any:
    return events.groupBy("user").transformWithStateInPandas(
        PandasCounts(timers=False), OUTPUT_SCHEMA, "Update", "None", initialState=_initial(spark))


def _count(key: Any, pdfs: Iterator[pd.DataFrame], state: Any, event_time: bool) -> Iterator[pd.DataFrame]:
    """A count per user; a timed-out key emits its count and is removed. Event time: the timeout is
    GAP_MS past the key's latest click; processing time: PROC_MS after its latest batch."""
    if state.hasTimedOut:
        (total,) = state.get
        state.remove()
        yield pd.DataFrame({"user": [key[0]], "kind": ["closed"], "clicks": [total]})
        return
    frames = list(pdfs)
    total = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    state.update((total,))
    if event_time:
        latest = max(int(pd.Timestamp(t).value // 1_000_000) for f in frames for t in f["ts"])
        state.setTimeoutTimestamp(max(latest, state.getCurrentWatermarkMs()) + GAP_MS)
    else:
        state.setTimeoutDuration(PROC_MS)
    yield pd.DataFrame({"user": [key[0]], "kind": ["count"], "clicks": [total]})


def apply_eventtime(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    return _count(key, pdfs, state, event_time=True)


def apply_proctime(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    return _count(key, pdfs, state, event_time=False)


def build_apply_eventtime(spark: Any, events: Any) -> Any:
    return events.withWatermark("ts", "2 seconds").groupBy("user").applyInPandasWithState(
        apply_eventtime, OUTPUT_SCHEMA, "clicks long", "Update", GroupStateTimeout.EventTimeTimeout)


def build_apply_proctime(spark: Any, events: Any) -> Any:
    return events.groupBy("user").applyInPandasWithState(
        apply_proctime, OUTPUT_SCHEMA, "clicks long", "Update", GroupStateTimeout.ProcessingTimeTimeout)
