"""A StatefulProcessor built with arguments: the ``k`` largest quantities per user (ListState).
Give them in a scenario as ``query.processor_args: {k: 3}`` (or on the command line as
``--processor-arg k=3``), or name the factory ``examples.sss.topk:top3``.

It also drops a variable an older version of it kept (``deleteIfExists("largest")``), as a processor
does after its state schema changed. Input rows: ``user string, item string, qty long``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor

OUTPUT_SCHEMA = "user string, rank long, qty long"


class TopK(StatefulProcessor):
    def __init__(self, k: int) -> None:
        self.k = int(k)

    def init(self, handle: Any) -> None:
        handle.deleteIfExists("largest")  # the single ValueState of version 1, replaced by the list
        self.top = handle.getListState("top", "qty long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        values = [int(v[0]) for v in self.top.get()]
        for pdf in rows:
            values += [int(q) for q in pdf["qty"]]
        top = sorted(values, reverse=True)[: self.k]
        self.top.put([(q,) for q in top])
        yield pd.DataFrame({"user": [key[0]] * len(top), "rank": list(range(1, len(top) + 1)), "qty": top})

    def close(self) -> None:
        pass


def top3() -> TopK:
    """A factory: ``processor: examples.sss.topk:top3`` needs no ``processor_args``."""
    return TopK(3)
