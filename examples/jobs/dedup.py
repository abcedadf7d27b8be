"""Deduplicate events by id with a TTL'd ValueState: the first event with an id goes out, repeats
within the TTL are dropped. Written only with statechaos's public job API.

``build_broken`` is the same job with the "seen" flags in a Python set instead of managed state: it
works until a task restarts, then every repeat of an id seen before the restored checkpoint goes out
again, and the exactly-once oracle names the duplicated event ids.
"""

from __future__ import annotations

from typing import Any

from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    JobGraph,
    KeyedProcessFunction,
    RuntimeContext,
    StateTtlConfig,
    ValueStateDescriptor,
)


def event(split: int, offset: int) -> dict[str, Any]:
    """Every id comes twice in its split: events n and n + ids_per_split share an id."""
    n = offset % IDS_PER_SPLIT
    return {"event_id": f"e{split}-{n}", "user": f"u{n % 13}", "offset": offset}


IDS_PER_SPLIT = 250


class Dedup(KeyedProcessFunction):
    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms

    def open(self, ctx: RuntimeContext) -> None:
        seen = ValueStateDescriptor("seen")
        seen.enable_time_to_live(StateTtlConfig.new_builder(self.ttl_ms).build())
        self.seen = ctx.get_state(seen)

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        if self.seen.value() is None:
            self.seen.update(True)
            ctx.collect(value)


class BrokenDedup(KeyedProcessFunction):
    """BUG: state in a Python attribute is neither checkpointed nor restored."""

    def open(self, ctx: RuntimeContext) -> None:
        self.seen: set[str] = set()

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        if value["event_id"] not in self.seen:
            self.seen.add(value["event_id"])
            ctx.collect(value)


def _event_id(r: dict[str, Any]) -> str:
    return r["event_id"]


def _strip(r: dict[str, Any]) -> dict[str, Any]:
    return {"event_id": r["event_id"], "user": r["user"]}


def _graph(fn: KeyedProcessFunction, splits: int, parallelism: int) -> JobGraph:
    return (
        JobBuilder("dedup", max_parallelism=64)
        .source("events", GeneratorSource(event, splits, 2 * IDS_PER_SPLIT), parallelism)
        .key_by(_event_id)
        .process("dedup", fn, parallelism)
        .map(_strip, name="strip")
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=_event_id, identity_name="event_id")
        .build()
    )


def build(splits: int = 8, ttl_ms: int = 3_600_000, parallelism: int = 2) -> JobGraph:
    """``ttl_ms`` far longer than a run: every repeat falls within it, so the output is deterministic."""
    return _graph(Dedup(ttl_ms), splits, parallelism)


def build_broken(splits: int = 8, ttl_ms: int = 3_600_000, parallelism: int = 2) -> JobGraph:
    return _graph(BrokenDedup(), splits, parallelism)
