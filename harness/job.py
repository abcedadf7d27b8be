"""The job API: a source, then keyed process stages (each ``key_by`` a selector), stateless maps
chained onto them, and an exactly-once sink on the last stage. Functions are plain Python.

A job graph is a description, not running code: every executor deep-copies the function templates
for each subtask and attempt, so the sim executor and the Spark executor run the very same task code
(``harness.tasks``) from the very same graph.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from reference_impl.keygroups import check_parallelism
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.state import StateDescriptor
from reference_impl.time import TimeProvider

__all__ = [
    "task_name",
    "RuntimeContext",
    "KeyedProcessFunction",
    "SourceFunction",
    "SourceSpec",
    "StageSpec",
    "JobGraph",
    "JobBuilder",
    "JobDefinitionError",
]


def task_name(operator: str, subtask: int) -> str:
    """How a subtask is named everywhere (history, fault targets, channels): ``count[1]``."""
    return f"{operator}[{subtask}]"


class JobDefinitionError(ValueError):
    """A job graph is inconsistent (names, parallelism, missing parts)."""


class RuntimeContext:
    """What a function sees: keyed state under the current key, operator state, processing time,
    the current key and an output collector. One per subtask."""

    def __init__(
        self,
        keyed_backend: Any,
        operator_backend: OperatorStateBackend,
        clock: TimeProvider,
        task_name: str,
        subtask: int,
        parallelism: int,
        max_parallelism: int,
    ) -> None:
        self._keyed = keyed_backend
        self.operator_state = operator_backend
        self._clock = clock
        self.task_name = task_name
        self.subtask = subtask
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self._out: list[Any] = []

    # state
    def get_state(self, descriptor: StateDescriptor) -> Any:
        """A keyed state handle (Value, List, Reducing, Aggregating or Map) for ``descriptor``."""
        return self._keyed.get_state(descriptor)

    def get_partitioned_state(self, namespace: Any, descriptor: StateDescriptor) -> Any:
        return self._keyed.get_partitioned_state(namespace, descriptor)

    @property
    def current_key(self) -> Any:
        return self._keyed.get_current_key()

    def now_ms(self) -> int:
        """Processing time of this subtask (skewable by the chaos layer)."""
        return self._clock.now_ms()

    def collect(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"{self.task_name}[{self.subtask}]: cannot emit None")
        self._out.append(value)

    def _drain(self) -> list[Any]:
        out, self._out = self._out, []
        return out


class KeyedProcessFunction:
    """Override ``open`` to create state handles and ``process_element`` to handle one record under
    its key; emit with ``ctx.collect``."""

    def open(self, ctx: RuntimeContext) -> None:  # noqa: B027 - optional hook
        pass

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class SourceFunction:
    """A replayable source. Its position is a list of *splits* (plain msgpack-able values) kept as
    split-distribute operator state, so on rescale splits move between subtasks and nothing is
    read twice or skipped."""

    def initial_splits(self) -> list[Any]:
        """All splits of a fresh job; dealt to subtasks in contiguous chunks."""
        raise NotImplementedError

    def open(self, splits: list[Any], ctx: RuntimeContext) -> None:
        raise NotImplementedError

    def poll(self, max_records: int) -> list[Any]:
        """Up to ``max_records`` next records (fewer, or none, when exhausted)."""
        raise NotImplementedError

    def exhausted(self) -> bool:
        raise NotImplementedError

    def snapshot_splits(self) -> list[Any]:
        raise NotImplementedError

    def offsets(self) -> dict[str, int]:
        """Records emitted so far per split name: stored in ``_metadata`` as ``source_offsets``."""
        raise NotImplementedError

    def between(self, lo: dict[str, int], hi: dict[str, int]) -> Iterable[Any]:
        """The input records after offsets ``lo`` up to offsets ``hi`` (per split, in split order):
        what a sequential model is fed to move from one checkpoint's state to the next."""
        raise NotImplementedError

    def prefix(self, offsets: dict[str, int]) -> Iterable[Any]:
        """The input records before ``offsets``: what a sequential model is fed to compute the state a
        checkpoint must hold."""
        return self.between({}, offsets)


@dataclass
class SourceSpec:
    name: str
    function: SourceFunction
    parallelism: int


@dataclass
class StageSpec:
    """A keyed stage: ``key_selector`` routes its input by key group; ``function`` runs per record;
    ``maps`` are chained onto its output; ``sink`` (last stage only) receives the final output."""

    name: str
    key_selector: Callable[[Any], Any]
    function: KeyedProcessFunction
    parallelism: int
    maps: list[Callable[[Any], Any]] = field(default_factory=list)
    sink: Any = None  # a sink template (harness.sinks.ExactlyOnceFileSinkSpec)


@dataclass
class JobGraph:
    name: str
    max_parallelism: int
    source: SourceSpec
    stages: list[StageSpec]

    def operators(self) -> list[str]:
        return [self.source.name, *(s.name for s in self.stages)]

    def parallelism(self) -> dict[str, int]:
        return {self.source.name: self.source.parallelism, **{s.name: s.parallelism for s in self.stages}}

    def subtasks(self) -> list[tuple[str, int, int]]:
        """Every subtask as (operator, index, stage index or -1 for the source), sources first: the
        order executors deploy them in (on Spark, the barrier stage's partition order)."""
        out = [(self.source.name, i, -1) for i in range(self.source.parallelism)]
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
            g.stages.append(s2)
        g.validate()
        return g

    def validate(self) -> None:
        names = self.operators()
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


class JobBuilder:
    """``JobBuilder("count", 128).source("source", src, 2).key_by(sel).process("count", fn, 2)
    .map(f).sink(ExactlyOnceFileSinkSpec()).build()``."""

    def __init__(self, name: str, max_parallelism: int = 128) -> None:
        self.name = name
        self.max_parallelism = max_parallelism
        self._source: SourceSpec | None = None
        self._stages: list[StageSpec] = []
        self._key: Callable[[Any], Any] | None = None

    def source(self, name: str, function: SourceFunction, parallelism: int) -> JobBuilder:
        self._source = SourceSpec(name, function, parallelism)
        return self

    def key_by(self, selector: Callable[[Any], Any]) -> JobBuilder:
        self._key = selector
        return self

    def process(self, name: str, function: KeyedProcessFunction, parallelism: int) -> JobBuilder:
        if self._key is None:
            raise JobDefinitionError(f"stage {name!r}: call key_by(...) before process(...)")
        self._stages.append(StageSpec(name, self._key, function, parallelism))
        self._key = None
        return self

    def map(self, fn: Callable[[Any], Any]) -> JobBuilder:
        if not self._stages:
            raise JobDefinitionError("map(...) is chained onto a keyed stage: call process(...) first")
        self._stages[-1].maps.append(fn)
        return self

    def sink(self, sink: Any) -> JobBuilder:
        if not self._stages:
            raise JobDefinitionError("sink(...) needs a keyed stage before it")
        self._stages[-1].sink = sink
        return self

    def build(self) -> JobGraph:
        if self._source is None:
            raise JobDefinitionError(f"job {self.name!r} has no source")
        g = JobGraph(self.name, self.max_parallelism, self._source, list(self._stages))
        g.validate()
        return g
