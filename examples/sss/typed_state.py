"""A StatefulProcessor whose state and output hold timestamps, dates, decimals, binary and arrays:
values that pandas, numpy and Spark each carry in their own Python types. statechaos compares them
by value (docs/structured-streaming.md, "How values are compared").

Input rows: ``user string, item string, qty long, at long`` (``at``: epoch milliseconds).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

KEY = "user"
INPUT_SCHEMA = "user string, item string, qty long, at long"
OUTPUT_SCHEMA = "user string, n long, last_at timestamp, spent decimal(10,2)"


def _ts(ms: int) -> dt.datetime:
    return dt.datetime(2026, 1, 1) + dt.timedelta(milliseconds=int(ms))


class TypedState(StatefulProcessor):
    def init(self, handle: Any) -> None:
        self.seen = handle.getListState("seen", "at timestamp, price decimal(10,2), tag binary")
        self.last = handle.getValueState("last", "day date, items array<string>, spent decimal(10,2)")
        self.first_at = handle.getMapState("first_at", "item string", "at timestamp")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        spent = Decimal(self.last.get()[2]) if self.last.exists() else Decimal("0.00")
        items: list[str] = list(self.last.get()[1]) if self.last.exists() else []
        last_at = None
        n = 0
        for pdf in rows:
            for item, qty, at in zip(pdf["item"], pdf["qty"], pdf["at"], strict=True):
                price = (Decimal(int(qty)) / 4).quantize(Decimal("0.01"))
                when = _ts(at)
                self.seen.appendValue((when, price, item.encode()))
                if not self.first_at.containsKey((item,)):
                    self.first_at.updateValue((item,), (pd.Timestamp(when),))
                spent += price
                items = sorted({*items, item})
                last_at, n = when, n + 1
        self.last.update((last_at.date(), items, spent))
        yield pd.DataFrame({"user": [key[0]], "n": [n], "last_at": [pd.Timestamp(last_at)], "spent": [spent]})

    def close(self) -> None:
        pass


def make_inputs(files: int = 4, rows: int = 6, users: int = 3, seed: int = 0) -> list[list[dict[str, Any]]]:
    import random

    rng = random.Random(seed)
    return [[{"user": f"u{rng.randrange(users)}", "item": f"i{rng.randrange(4)}", "qty": rng.randrange(1, 9),
              "at": f * 60_000 + r * 1_001} for r in range(rows)] for f in range(files)]  # fmt: skip


SPEC = {"processor": "examples.sss.typed_state:TypedState", "key": KEY, "input_schema": INPUT_SCHEMA,
        "output_schema": OUTPUT_SCHEMA, "time_mode": "None"}  # fmt: skip
