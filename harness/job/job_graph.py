"""A job graph (:class:`JobGraph`): its source(s), keyed stages and chained operators, their
parallelism and max parallelism, state backends, event time, and the channels and subtasks executors
deploy. A description, not running code: every executor deep-copies the function templates for each
subtask and attempt. Built with ``harness.job.job_builder.JobBuilder``; re-exported by ``harness.job``."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from harness.job.functions import KeyedProcessFunction, SourceFunction
from harness.job.job_errors import JobDefinitionError
from harness.job.output_contract import OutputContract
from reference_impl.keygroups import check_parallelism
from reference_impl.time import TimeProvider

__all__ = [
    "task_name",
    "SourceSpec",
    "StageSpec",
    "Chained",
    "apply_chain",
    "JobGraph",
    "TaskName",
    "ChannelName",
    "StateBackendConfig",
    "STATE_BACKENDS",
    "WatermarkStrategy",
]

STATE_BACKENDS = ("heap", "rocksdb")


class TaskName(NamedTuple):
    """A subtask's name, formatted (``str``) and parsed (:meth:`parse`) here only: ``count[1]``."""

    operator: str
    subtask: int

    def __str__(self) -> str:
        return f"{self.operator}[{self.subtask}]"

    @staticmethod
    def parse(text: str) -> TaskName:
        m = _TASK_NAME.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"not a subtask name: {text!r} (expected operator[subtask], e.g. count[1])")
        return TaskName(m.group(1), int(m.group(2)))


class ChannelName(NamedTuple):
    """A data channel between two subtasks, formatted and parsed here only: ``source[0]->count[1]``."""

    up: str
    down: str

    def __str__(self) -> str:
        return f"{self.up}->{self.down}"

    @staticmethod
    def parse(text: str) -> ChannelName:
        up, sep, down = text.partition("->")
        if not sep or not up.strip() or not down.strip():
            raise ValueError(f"not a channel: {text!r} (expected up->down, e.g. source[0]->count[1])")
        return ChannelName(up.strip(), down.strip())


_TASK_NAME = re.compile(r"(.+)\[(\d+)\]")


def task_name(operator: str, subtask: int) -> str:
    """How a subtask is named everywhere (history, fault targets, channels): ``count[1]``."""
    return str(TaskName(operator, subtask))


@dataclass(frozen=True)
class Chained:
    """A stateless operator chained onto the task before it: ``map`` (one out per record), ``filter``
    (keep when true) or ``flat_map`` (an iterable out per record)."""

    kind: str
    fn: Callable[[Any], Any]
    name: str

    def apply(self, records: list[Any]) -> list[Any]:
        if self.kind == "map":
            return [self.fn(r) for r in records]
        if self.kind == "filter":
            return [r for r in records if self.fn(r)]
        return [x for r in records for x in self.fn(r)]


def apply_chain(chain: list[Chained], records: list[Any]) -> list[Any]:
    for c in chain:
        records = c.apply(records)
    return records


@dataclass(frozen=True)
class WatermarkStrategy:
    """Event time of a source: ``timestamp(record) -> ms`` and watermarks generated per split with
    bounded out-of-orderness, as Flink's ``WatermarkStrategy.forBoundedOutOfOrderness``: a split's
    watermark is its largest timestamp so far minus ``out_of_orderness_ms`` minus 1; a source
    subtask's is the minimum over its unfinished splits, emitted after each poll when it rose."""

    timestamp: Callable[[Any], int]
    out_of_orderness_ms: int = 0

    @classmethod
    def for_bounded_out_of_orderness(cls, ms: int, timestamp: Callable[[Any], int]) -> WatermarkStrategy:
        if ms < 0:
            raise JobDefinitionError(f"out-of-orderness must be >= 0 ms, got {ms}")
        return cls(timestamp, int(ms))

    @classmethod
    def for_monotonous_timestamps(cls, timestamp: Callable[[Any], int]) -> WatermarkStrategy:
        return cls(timestamp, 0)

    def watermark_for(self, max_timestamp: int) -> int:
        return max_timestamp - self.out_of_orderness_ms - 1


@dataclass
class SourceSpec:
    name: str
    function: SourceFunction
    parallelism: int
    chain: list[Chained] = field(default_factory=list)
    watermarks: WatermarkStrategy | None = None


@dataclass
class StageSpec:
    """A keyed stage: ``key_selector`` routes its input by key group; ``function`` runs per record;
    ``chain`` is applied to its output; ``sink`` (last stage only) receives the final output."""

    name: str
    key_selector: Callable[[Any], Any]
    function: KeyedProcessFunction
    parallelism: int
    chain: list[Chained] = field(default_factory=list)
    sink: Any = None  # a sink template (harness.job.sinks.ExactlyOnceFileSinkSpec)
    broadcast: SourceSpec | None = None  # a source broadcast to every subtask of this stage


@dataclass(frozen=True)
class StateBackendConfig:
    """Where keyed state lives: ``heap`` (Python objects) or ``rocksdb`` (the embedded on-disk
    backend); ``incremental`` (rocksdb only) checkpoints write only key groups changed since the
    previous checkpoint into shared files, as Flink's incremental RocksDB checkpoints do."""

    kind: str = "heap"
    incremental: bool = False

    def __post_init__(self) -> None:
        if self.kind not in STATE_BACKENDS:
            raise JobDefinitionError(
                f"unknown state backend {self.kind!r}; expected one of {', '.join(STATE_BACKENDS)}"
            )
        if self.incremental and self.kind != "rocksdb":
            raise JobDefinitionError("incremental checkpoints need the rocksdb state backend")

    def create(self, max_parallelism: int, key_group_range: Any, clock: TimeProvider) -> Any:
        """A fresh keyed backend of this kind for one subtask (close it when the subtask ends)."""
        if self.kind == "rocksdb":
            from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend

            return OnDiskKeyedStateBackend(max_parallelism, key_group_range, clock)
        from reference_impl.state import HeapKeyedStateBackend

        return HeapKeyedStateBackend(max_parallelism, key_group_range, clock)


@dataclass
class JobGraph:
    name: str
    max_parallelism: int
    source: SourceSpec
    stages: list[StageSpec]
    contract: OutputContract = field(default_factory=OutputContract)
    state_backend: StateBackendConfig = field(default_factory=StateBackendConfig)

    def sources(self) -> list[tuple[SourceSpec, int | None]]:
        """Every source with the stage it is broadcast to (None: the main, keyed-routed source)."""
        return [(self.source, None)] + [(s.broadcast, k) for k, s in enumerate(self.stages) if s.broadcast]

    def operators(self) -> list[str]:
        """The tasks' names: what parallelism, rescales and fault targets name."""
        return [src.name for src, _ in self.sources()] + [s.name for s in self.stages]

    def chained_operators(self) -> list[str]:
        return [c.name for c in self.source.chain] + [c.name for s in self.stages for c in s.chain]

    def with_max_parallelism(self, max_parallelism: int) -> JobGraph:
        g = copy.copy(self)
        g.max_parallelism = max_parallelism
        g.validate()
        return g

    def with_state_backend(self, kind: str, incremental: bool = False) -> JobGraph:
        """The same graph with its keyed state in another backend (a scenario's ``state_backend``)."""
        g = copy.copy(self)
        g.state_backend = StateBackendConfig(kind, incremental)
        return g

    def parallelism(self) -> dict[str, int]:
        return {
            **{src.name: src.parallelism for src, _ in self.sources()},
            **{s.name: s.parallelism for s in self.stages},
        }

    def subtasks(self) -> list[tuple[str, int, int]]:
        """Every subtask as (operator, index, stage index), sources first with a negative index (-1
        the main source, ``-2 - k`` one broadcast to stage k): the order executors deploy them in
        (on Spark, the barrier stage's partition order)."""
        out = []
        for src, k in self.sources():
            out += [(src.name, i, -1 if k is None else -2 - k) for i in range(src.parallelism)]
        for k, s in enumerate(self.stages):
            out += [(s.name, j, k) for j in range(s.parallelism)]
        return out

    def channels(self) -> list[tuple[str, str]]:
        """Every data channel as (upstream, downstream) subtask names, stage by stage: each upstream
        subtask feeds every subtask of the next stage (a keyed exchange)."""
        ups = [task_name(self.source.name, i) for i in range(self.source.parallelism)]
        out = []
        for s in self.stages:
            downs = [task_name(s.name, j) for j in range(s.parallelism)]
            out += [(u, d) for u in ups for d in downs]
            if s.broadcast is not None:  # after the keyed inputs: a subtask's last input channels
                b = s.broadcast
                out += [(task_name(b.name, i), d) for i in range(b.parallelism) for d in downs]
            ups = downs
        return out

    def with_parallelism(self, parallelism: dict[str, int] | int) -> JobGraph:
        """The same graph at another parallelism (a rescale); unknown operator names are an error."""
        if isinstance(parallelism, int):
            parallelism = {n: parallelism for n in self.operators()}
        unknown = set(parallelism) - set(self.operators())
        if unknown:
            raise JobDefinitionError(
                f"job {self.name!r} has no operator(s) {', '.join(sorted(unknown))} "
                f"(operators: {', '.join(self.operators())})"
            )
        g = copy.copy(self)
        g.source = copy.copy(self.source)
        g.source.parallelism = parallelism.get(self.source.name, self.source.parallelism)
        g.stages = []
        for s in self.stages:
            s2 = copy.copy(s)
            s2.parallelism = parallelism.get(s.name, s.parallelism)
            if s.broadcast is not None:
                s2.broadcast = copy.copy(s.broadcast)
                s2.broadcast.parallelism = parallelism.get(s.broadcast.name, s.broadcast.parallelism)
            g.stages.append(s2)
        g.validate()
        return g

    def validate(self) -> None:
        names = self.operators() + self.chained_operators()
        if len(set(names)) != len(names):
            raise JobDefinitionError(f"job {self.name!r}: operator names must be unique, got {names}")
        if not self.stages:
            raise JobDefinitionError(f"job {self.name!r} needs at least one keyed stage after its source")
        if self.stages[-1].sink is None:
            raise JobDefinitionError(f"job {self.name!r}: the last stage needs a sink")
        for name, p in self.parallelism().items():
            try:
                check_parallelism(self.max_parallelism, p)
            except ValueError as e:
                raise JobDefinitionError(f"job {self.name!r}: operator {name!r}: {e}") from None
