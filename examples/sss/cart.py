"""An example Spark Structured Streaming StatefulProcessor for statechaos: per-user cart totals.

State: a ValueState ``total`` (no TTL), a MapState ``items`` (item -> quantity) whose entries expire
``ITEM_TTL_MS`` after their last update, and one processing-time timer per user that emits a report
``REPORT_AFTER_MS`` after the user's first event. Input rows: ``user string, item string, qty long``;
output rows: ``user string, kind string, total long, items long``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

ITEM_TTL_MS = 4_000
REPORT_AFTER_MS = 3_000

KEY = "user"
INPUT_SCHEMA = "user string, item string, qty long"
OUTPUT_SCHEMA = "user string, kind string, total long, items long"


class CartTotals(StatefulProcessor):
    def init(self, handle: Any) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", "total long")
        self.items = handle.getMapState("items", "item string", "qty long", ITEM_TTL_MS)

    def _row(self, user: str, kind: str, total: int) -> pd.DataFrame:
        live = sum(1 for _ in self.items.keys())
        return pd.DataFrame({"user": [user], "kind": [kind], "total": [total], "items": [live]})

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        first = not self.total.exists()
        total = 0 if first else int(self.total.get()[0])
        for pdf in rows:
            for item, qty in zip(pdf["item"], pdf["qty"], strict=True):
                total += int(qty)
                old = int(self.items.getValue((item,))[0]) if self.items.containsKey((item,)) else 0
                self.items.updateValue((item,), (old + int(qty),))
        self.total.update((total,))
        if first:
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + REPORT_AFTER_MS)
        yield self._row(key[0], "update", total)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        total = int(self.total.get()[0]) if self.total.exists() else 0
        yield self._row(key[0], "report", total)

    def close(self) -> None:
        pass


class ForgetfulCartTotals(CartTotals):
    """Deliberately broken: keeps the totals in a Python attribute instead of a state variable, so a
    new Python worker (every task, every restart) starts from nothing. statechaos must catch it."""

    def init(self, handle: Any) -> None:
        super().init(handle)
        self.totals: dict[str, int] = {}

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        total = self.totals.get(key[0], 0)
        for pdf in rows:
            total += int(pdf["qty"].sum())
        self.totals[key[0]] = total
        self.total.update((total,))
        yield self._row(key[0], "update", total)


def make_inputs(files: int = 6, rows: int = 8, users: int = 4, seed: int = 0) -> list[list[dict[str, Any]]]:
    """Deterministic input: ``files`` CSV files of ``rows`` cart events each."""
    import random

    rng = random.Random(seed)
    return [
        [
            {"user": f"u{rng.randrange(users)}", "item": f"i{rng.randrange(5)}", "qty": rng.randrange(1, 9)}
            for _ in range(rows)
        ]
        for _ in range(files)
    ]


SPEC = {
    "processor": "examples.sss.cart:CartTotals",
    "key": KEY,
    "input_schema": INPUT_SCHEMA,
    "output_schema": OUTPUT_SCHEMA,
}


def build(spark: Any, events: Any) -> Any:
    """``CartTotals`` as a user's query (``query.builder``), judged against the fault-free replay
    instead of the model; the sink's output mode is ``append``, as the processor path writes it."""
    return events.groupBy(KEY).transformWithStateInPandas(CartTotals(), OUTPUT_SCHEMA, "Update", "ProcessingTime")
