"""A test-only keyed job for the progress-based run limit: ``sleep_ms`` makes every input record
slow to arrive on the executors, as from a slow upstream system (a slow run that keeps progressing;
the driver reading the input for the oracles is not slowed), ``hang_after`` makes each keyed subtask
block for good after that many records (a run that really stalls)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    JobGraph,
    KeyedProcessFunction,
    RuntimeContext,
    ValueStateDescriptor,
)


def _event(sleep_ms: float, split: int, offset: int) -> dict[str, Any]:
    if sleep_ms:
        from pyspark import TaskContext

        if TaskContext.get() is not None:  # in a Spark task: the input arrives slowly
            time.sleep(sleep_ms / 1000)
    return {"k": f"k{(split * 7 + offset) % 10}"}


def _key(r: dict[str, Any]) -> str:
    return str(r["k"])


class Slow(KeyedProcessFunction):
    def __init__(self, hang_after: int | None) -> None:
        self.hang_after = hang_after

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))
        self.seen = 0

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        self.seen += 1
        if self.hang_after is not None and self.seen > self.hang_after:
            time.sleep(3600)  # stuck for good: no record, no barrier gets past this subtask
        n = self.count.value() + 1
        self.count.update(n)
        ctx.collect([value["k"], n])


def build(records_per_split: int = 200, sleep_ms: float = 0, hang_after: int | None = None) -> JobGraph:
    return (
        JobBuilder("stall", max_parallelism=16)
        .source("source", GeneratorSource(partial(_event, sleep_ms), 2, records_per_split), 2)
        .key_by(_key)
        .process("count", Slow(hang_after), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .output(key=lambda r: r[0], seq=lambda r: r[1])
        .build()
    )
