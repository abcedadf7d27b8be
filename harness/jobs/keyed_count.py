"""``keyed_count``: the reference source keyed by key; a ValueState counts records per key and each
record yields ``[key, seq, count]``. Fault-free, ``count == seq`` for every record. An ordinary job
of the public API: nothing in the executors or oracles knows it by name."""

from __future__ import annotations

import operator
from typing import Any

from harness.job import JobBuilder, JobGraph, KeyedProcessFunction, RuntimeContext
from harness.job.sinks import ExactlyOnceFileSinkSpec
from harness.job.sources import SequenceSource
from harness.jobs.registry import register_job
from harness.jobs.spec import KeySeqOutput
from reference_impl.state import ValueStateDescriptor

__all__ = ["KeyedCount", "PerRecordCount", "keyed_count"]


_key = operator.itemgetter(0)  # the record's key (a C call: it runs per record)


def _seq(r: Any) -> int:
    return int(r[1])


class KeyedCount(KeyedProcessFunction):
    """A running count per key in a ValueState (``process_element``, and batched per key)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        n = self.count.value() + 1
        self.count.update(n)
        ctx.collect([value[0], value[1], n])

    def process_elements(self, key: Any, values: list[Any], ctx: RuntimeContext) -> None:
        """The batched form: one state read and one write for all of ``values``."""
        n = self.count.value()
        ctx.collect_all([[v[0], v[1], c] for c, v in enumerate(values, n + 1)])
        self.count.update(n + len(values))


class PerRecordCount(KeyedCount):
    """:class:`KeyedCount` on the per-record path only (job option ``batched: false``): what the
    batched path is compared with, in tests and benchmarks."""

    process_elements = KeyedProcessFunction.process_elements


def keyed_count(
    records: int = 10_000, keys: int = 100, seed: int = 0, parallelism: int = 2, batched: bool = True
) -> JobGraph:
    """``batched``: count with ``process_elements`` (records grouped by key), else record by record."""
    src = SequenceSource(records, keys, seed)
    return (
        JobBuilder("keyed_count", 128)
        .source("source", src, parallelism)
        .key_by(_key)
        .process("count", KeyedCount() if batched else PerRecordCount(), parallelism)
        .sink(ExactlyOnceFileSinkSpec())
        .output(key=_key, seq=_seq, expected=lambda inputs: [[r[0], r[1], r[1]] for r in inputs])
        .expected_columns(lambda: KeySeqOutput.of_source(src, seq_fields=1))  # [key, seq, count=seq]
        .build()
    )


register_job("keyed_count", keyed_count)
