"""Built-in jobs and what their oracles need to know about them.

A :class:`JobSpec` pairs a job graph with its meaning: the fault-free reference output (for the
exactly-once oracle), how to read a key and a sequence number off an output record (sequence
oracle), and the state a sequential model reaches on an input prefix (restored-state oracle).

- ``keyed_count``: the reference source, keyed by key; a ValueState counts records per key and each
  record yields ``[key, seq, count]``. Fault-free, ``count == seq`` for every record.
- ``ttl_verify``: Flink's TtlVerifyUpdateFunction in small: each record updates a TTL ValueState
  and reads it back before the update; the update history is kept in plain (non-TTL) state, and
  each record yields ``[key, seq, observed, last_value, last_ts, now]``: the TTL oracle computes
  what the read must have returned from the last update's value and time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.job import JobBuilder, JobGraph, KeyedProcessFunction, RuntimeContext
from harness.sinks import ExactlyOnceFileSinkSpec
from harness.sources import SequenceSource, key_name
from reference_impl.state import ValueStateDescriptor
from reference_impl.ttl import StateTtlConfig, StateVisibility, UpdateType

__all__ = ["JobSpec", "KeySeqOutput", "JOBS", "build_job", "KeyedCount", "TtlVerify", "UnknownJobError"]


class UnknownJobError(ValueError):
    pass


def _key(r: Any) -> Any:
    return r[0]


def _key_seq(r: Any) -> Any:
    return (r[0], r[1])


class KeyedCount(KeyedProcessFunction):
    """A running count per key in a ValueState."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        n = self.count.value() + 1
        self.count.update(n)
        ctx.collect([value[0], value[1], n])


class TtlVerify(KeyedProcessFunction):
    """Reads a TTL value, compares with the model from the last update's time, then updates it."""

    def __init__(
        self, ttl_ms: int, update_type: str = "OnCreateAndWrite", visibility: str = "NeverReturnExpired"
    ) -> None:
        self.ttl_ms, self.update_type, self.visibility = int(ttl_ms), update_type, visibility

    def _config(self) -> StateTtlConfig:
        try:
            update, visibility = UpdateType(self.update_type), StateVisibility(self.visibility)
        except ValueError as e:
            raise UnknownJobError(
                f"job ttl_verify: {e} (update_type: {', '.join(u.value for u in UpdateType)}; "
                f"visibility: {', '.join(v.value for v in StateVisibility)})"
            ) from None
        return (
            StateTtlConfig.new_builder(self.ttl_ms)
            .set_update_type(update)
            .set_state_visibility(visibility)
            .build()
        )

    def open(self, ctx: RuntimeContext) -> None:
        d = ValueStateDescriptor("ttl_value")
        d.enable_time_to_live(self._config())
        self.value = ctx.get_state(d)
        self.last = ctx.get_state(ValueStateDescriptor("last_update"))  # [value, ts] (no TTL)

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        now = ctx.now_ms()
        last = self.last.value()
        observed = self.value.value()
        payload = value[2]
        self.value.update(payload)
        self.last.update([payload, now])
        ctx.collect(
            [
                value[0],
                value[1],
                observed,
                None if last is None else last[0],
                None if last is None else last[1],
                now,
            ]
        )


@dataclass(frozen=True)
class KeySeqOutput:
    """The fault-free output in columns, so an oracle can check millions of records without a Python
    object per record: key ``keys[i]`` has exactly one record per seq ``1..counts[i]``, and field
    ``2 + j`` of that record is ``extra[j][starts[i] + seq - 1]`` (``starts`` = exclusive cumsum)."""

    keys: list[Any]
    counts: np.ndarray
    extra: tuple[np.ndarray, ...] = ()

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.counts) - self.counts

    @classmethod
    def of_source(cls, src: SequenceSource, seq_fields: int = 0) -> KeySeqOutput:
        """Every record of ``src`` as (key, seq), plus ``seq_fields`` more fields equal to seq."""
        base, rem = divmod(src.records, src.keys)
        counts = np.full(src.keys, base, dtype=np.int64)
        counts[:rem] += 1
        starts = np.cumsum(counts) - counts
        seq = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts) + 1
        return cls([key_name(i) for i in range(src.keys)], counts, (seq,) * seq_fields)


@dataclass
class JobSpec:
    graph: JobGraph
    source: SequenceSource
    expected_output: Callable[[], list[Any]]
    record_key: Callable[[Any], Any] = _key
    record_seq: Callable[[Any], int] = lambda r: int(r[1])
    stateful_operator: str = "count"
    model_states: tuple[str, ...] = ()  # keyed states the sequential model must match exactly
    options: dict[str, Any] = field(default_factory=dict)
    # the same output in columns (optional): what lets the exactly-once oracle run at millions/s
    expected_columns: Callable[[], KeySeqOutput] | None = None


def _keyed_count(
    records: int, keys: int, seed: int, max_p: int, parallelism: dict[str, int], options: dict[str, Any]
) -> JobSpec:
    if options:
        raise UnknownJobError(f"job keyed_count takes no job_options, got {', '.join(options)}")
    src = SequenceSource(records, keys, seed)
    graph = (
        JobBuilder("keyed_count", max_p)
        .source("source", src, parallelism.get("source", 1))
        .key_by(_key)
        .process("count", KeyedCount(), parallelism.get("count", 1))
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )

    def expected() -> list[Any]:
        return [[r[0], r[1], r[1]] for r in src.all_records()]

    return JobSpec(
        graph,
        src,
        expected,
        model_states=("count",),
        expected_columns=lambda: KeySeqOutput.of_source(src, seq_fields=1),  # [key, seq, count=seq]
    )


def _ttl_verify(
    records: int, keys: int, seed: int, max_p: int, parallelism: dict[str, int], options: dict[str, Any]
) -> JobSpec:
    allowed = {"ttl_ms", "update_type", "visibility"}
    unknown = set(options) - allowed
    if unknown:
        raise UnknownJobError(
            f"job ttl_verify: unknown job_options {', '.join(sorted(unknown))} (expected {', '.join(sorted(allowed))})"
        )
    fn = TtlVerify(
        int(options.get("ttl_ms", 200)),
        str(options.get("update_type", "OnCreateAndWrite")),
        str(options.get("visibility", "NeverReturnExpired")),
    )
    fn._config()  # validate the options now, with a clear error
    src = SequenceSource(records, keys, seed)
    graph = (
        JobBuilder("ttl_verify", max_p)
        .source("source", src, parallelism.get("source", 1))
        .key_by(_key)
        .process("count", fn, parallelism.get("count", 1))
        .sink(ExactlyOnceFileSinkSpec(identity=_key_seq))
        .build()
    )

    def expected() -> list[Any]:
        # observed/expected/now depend on processing time: the exactly-once oracle compares (key, seq)
        return [[r[0], r[1]] for r in src.all_records()]

    return JobSpec(
        graph,
        src,
        expected,
        options={"ttl_ms": fn.ttl_ms, "visibility": fn.visibility, "identity": "key_seq"},
        expected_columns=lambda: KeySeqOutput.of_source(src),
    )


JOBS: dict[str, Callable[..., JobSpec]] = {"keyed_count": _keyed_count, "ttl_verify": _ttl_verify}


def build_job(
    name: str,
    records: int,
    keys: int,
    seed: int,
    max_parallelism: int,
    parallelism: dict[str, int] | int,
    options: dict[str, Any] | None = None,
) -> JobSpec:
    """A built-in job at the given size and parallelism (an int sets every operator)."""
    if name not in JOBS:
        raise UnknownJobError(f"unknown job {name!r}; built-in jobs: {', '.join(JOBS)}")
    if isinstance(parallelism, int):
        parallelism = {"source": parallelism, "count": parallelism}
    unknown = set(parallelism) - {"source", "count"}
    if unknown:
        raise UnknownJobError(
            f"job {name!r} has operators source and count; parallelism names {', '.join(sorted(unknown))}"
        )
    return JOBS[name](records, keys, seed, max_parallelism, parallelism, dict(options or {}))


def identity_of(spec: JobSpec, record: Any) -> tuple[Any, ...]:
    """What the exactly-once oracle compares: the whole record, or (key, seq) for jobs whose output
    depends on processing time."""
    if spec.options.get("identity") == "key_seq":
        return (record[0], record[1])
    return tuple(record)
