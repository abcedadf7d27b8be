"""The job API: a source, then any number of keyed process stages (each ``key_by`` a selector),
stateless ``map``/``filter``/``flat_map`` chained onto the source or a stage, and an exactly-once
sink on the last stage. Functions are plain Python. Every operator has a name; the source and each
keyed stage are tasks with their own parallelism (chained operators run inside the task before them,
as Flink chains them); the job has a max parallelism (its number of key groups).

The job also states what its output means (:class:`OutputContract`): which field identifies a
record, which is its key, whether it carries a per-key sequence number, and whether its state at a
checkpoint depends on how inputs interleave. The oracles read only that and the graph.

A job graph is a description, not running code: every executor deep-copies the function templates
for each subtask and attempt, so the sim executor and the Spark executor run the very same task code
(``harness.tasks``) from the very same graph.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.output_contract import OutputContract
from reference_impl.keygroups import check_parallelism
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.state import StateDescriptor
from reference_impl.time import TimeProvider
from reference_impl.timers import MIN_WATERMARK, TimerService

__all__ = [
    "task_name",
    "RuntimeContext",
    "KeyedProcessFunction",
    "KeyedBroadcastProcessFunction",
    "ReadOnlyBroadcastState",
    "SourceFunction",
    "SourceSpec",
    "StageSpec",
    "Chained",
    "OutputContract",
    "JobGraph",
    "JobBuilder",
    "JobDefinitionError",
    "StateBackendConfig",
    "STATE_BACKENDS",
    "WatermarkStrategy",
]

STATE_BACKENDS = ("heap", "rocksdb")


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
        self._timers: TimerService | None = None
        self.time_domain: str | None = None  # in on_timer: "event" or "processing"
        self.timer_namespace: Any = None  # in on_timer: the firing timer's namespace
        self._broadcast_side = False  # in process_broadcast_element: broadcast state is writable

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

    def broadcast_state(self, name: str) -> Any:
        """Broadcast (map) state ``name``: writable in ``process_broadcast_element``, read-only on the
        keyed side, as in Flink's KeyedBroadcastProcessFunction (every subtask must hold the same)."""
        state = self.operator_state.get_broadcast_state(name)
        return state if self._broadcast_side else ReadOnlyBroadcastState(state)

    def timer_service(self) -> TimerService:
        """Register and delete event-time and processing-time timers of the current key (keyed
        stages only); they fire ``on_timer`` of the function with that key current."""
        if self._timers is None:
            raise JobDefinitionError(f"{self.task_name}: timers exist only in keyed process functions")
        return self._timers

    def current_watermark(self) -> int:
        """This subtask's event-time watermark (``MIN_WATERMARK`` before the first one)."""
        return MIN_WATERMARK if self._timers is None else self._timers.current_watermark()

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

    def on_timer(self, timestamp: int, ctx: RuntimeContext) -> None:  # noqa: B027 - optional hook
        """A timer of the current key fired (``ctx.time_domain``, ``ctx.timer_namespace`` say which)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class ReadOnlyBroadcastState:
    """Broadcast state as the keyed side sees it: reads only (a write would make subtasks differ)."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items()

    def __getattr__(self, name: str) -> Any:
        if name in ("put", "remove", "clear"):
            raise JobDefinitionError(f"broadcast state is read-only on the keyed side: {name}() not allowed")
        raise AttributeError(name)


class KeyedBroadcastProcessFunction(KeyedProcessFunction):
    """A keyed stage with a broadcast input (Flink's KeyedBroadcastProcessFunction): every subtask
    gets every element of the broadcast source in ``process_broadcast_element``, where
    ``ctx.broadcast_state(name)`` is writable; ``process_element`` reads it only."""

    def process_broadcast_element(self, value: Any, ctx: RuntimeContext) -> None:
        raise NotImplementedError


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

    def poll_splits(self, max_records: int) -> list[tuple[str, list[Any]]]:
        """Like :meth:`poll`, grouped by split name in emission order: what per-split watermarks are
        generated from. The default attributes a poll by the offsets that moved, which is right for
        sources that read their splits one after another (override it otherwise)."""
        before = self.offsets()
        records = self.poll(max_records)
        out, i = [], 0
        for name, n in self.offsets().items():
            d = n - int(before.get(name, 0))
            if d > 0:
                out.append((name, records[i : i + d]))
                i += d
        if i != len(records):
            raise RuntimeError(f"{type(self).__name__}: poll() does not match the offsets that moved")
        return out

    def split_finished(self, name: str) -> bool:
        """Whether split ``name`` has no records left (it then stops holding back the watermark)."""
        return False

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
    sink: Any = None  # a sink template (harness.sinks.ExactlyOnceFileSinkSpec)
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


class JobBuilder:
    """``JobBuilder("count", max_parallelism=128).source("source", src, 2).key_by(sel)
    .process("count", fn, 2).map(f, "fmt").sink(ExactlyOnceFileSinkSpec()).build()``.

    ``map``/``filter``/``flat_map`` chain onto the source or the stage before them; ``output`` and
    ``state_depends_on_interleaving`` state the :class:`OutputContract`."""

    def __init__(self, name: str, max_parallelism: int = 128) -> None:
        self.name = name
        self.max_parallelism = max_parallelism
        self._source: SourceSpec | None = None
        self._stages: list[StageSpec] = []
        self._key: Callable[[Any], Any] | None = None
        self._broadcast: SourceSpec | None = None
        self._contract = OutputContract()
        self._backend = StateBackendConfig()

    def source(
        self,
        name: str,
        function: SourceFunction,
        parallelism: int = 1,
        watermarks: WatermarkStrategy | None = None,
    ) -> JobBuilder:
        """The job's source; ``watermarks`` gives its records event time (per-split watermarks)."""
        self._source = SourceSpec(name, function, parallelism, watermarks=watermarks)
        return self

    def key_by(self, selector: Callable[[Any], Any]) -> JobBuilder:
        self._key = selector
        return self

    def connect_broadcast(self, name: str, function: SourceFunction, parallelism: int = 1) -> JobBuilder:
        """Broadcast source ``name`` to every subtask of the next keyed stage (after ``key_by``),
        whose function must be a :class:`KeyedBroadcastProcessFunction`."""
        if self._key is None:
            raise JobDefinitionError(f"connect_broadcast({name!r}): call key_by(...) first")
        self._broadcast = SourceSpec(name, function, parallelism)
        return self

    def process(self, name: str, function: KeyedProcessFunction, parallelism: int = 1) -> JobBuilder:
        if self._key is None:
            raise JobDefinitionError(f"stage {name!r}: call key_by(...) before process(...)")
        if not isinstance(function, KeyedProcessFunction):
            raise JobDefinitionError(f"stage {name!r}: expected a KeyedProcessFunction, got {function!r}")
        if self._broadcast is not None and not isinstance(function, KeyedBroadcastProcessFunction):
            raise JobDefinitionError(
                f"stage {name!r} has a broadcast input: expected a KeyedBroadcastProcessFunction"
            )
        self._stages.append(StageSpec(name, self._key, function, parallelism, broadcast=self._broadcast))
        self._key = self._broadcast = None
        return self

    def _chain(self, kind: str, fn: Callable[[Any], Any], name: str | None) -> JobBuilder:
        if self._key is not None:
            raise JobDefinitionError(f"{kind}(...) after key_by(...): call process(...) first")
        if self._stages:
            chain = self._stages[-1].chain
        elif self._source is not None:
            chain = self._source.chain
        else:
            raise JobDefinitionError(f"{kind}(...) needs a source or keyed stage before it")
        chain.append(Chained(kind, fn, name or f"{kind}-{len(self.graph_names())}"))
        return self

    def graph_names(self) -> list[str]:
        src = [] if self._source is None else [self._source.name, *(c.name for c in self._source.chain)]
        return src + [n for s in self._stages for n in (s.name, *(c.name for c in s.chain))]

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> JobBuilder:
        return self._chain("map", fn, name)

    def filter(self, fn: Callable[[Any], bool], name: str | None = None) -> JobBuilder:
        return self._chain("filter", fn, name)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> JobBuilder:
        return self._chain("flat_map", fn, name)

    def sink(self, sink: Any) -> JobBuilder:
        if not self._stages:
            raise JobDefinitionError("sink(...) needs a keyed stage before it")
        self._stages[-1].sink = sink
        return self

    def output(
        self,
        *,
        identity: Callable[[Any], Any] | None = None,
        identity_name: str | None = None,
        key: Callable[[Any], Any] | None = None,
        seq: Callable[[Any], int] | None = None,
        expected: Callable[[list[Any]], list[Any]] | None = None,
    ) -> JobBuilder:
        """Declare what the output means (see :class:`OutputContract`)."""
        c = self._contract
        c.identity, c.key, c.seq, c.expected = identity, key, seq, expected
        c.identity_name = identity_name or ("record" if identity is None else "id")
        return self

    def state_depends_on_interleaving(self, why: str, states: Iterable[str] | None = None) -> JobBuilder:
        """The job's state at a checkpoint legitimately depends on input interleaving or processing
        time: the restored-state oracle then skips the model comparison and says so. ``states``
        names the keyed states concerned (the others are still compared); without it, the whole
        comparison is skipped and the verdict covers only restores against their checkpoints."""
        self._contract.interleaving = why
        self._contract.interleaving_states = None if states is None else frozenset(states)
        return self

    def expected_columns(self, fn: Callable[[], Any]) -> JobBuilder:
        """The expected output in columns (``harness.jobs.KeySeqOutput``), for jobs whose output is
        ``[key, seq, ...]``: lets the exactly-once oracle check millions of records per second."""
        self._contract.expected_columns = fn
        return self

    def oracle_config(self, oracle: str, config: Any) -> JobBuilder:
        """Typed settings for one oracle (e.g. ``"ttl"``: ``harness.jobs.ttl_verify.TtlReads``)."""
        self._contract.oracle_config[oracle] = config
        return self

    def state_backend(self, kind: str, incremental: bool = False) -> JobBuilder:
        """Keep keyed state in ``heap`` (default) or ``rocksdb``, optionally with incremental
        checkpoints; a scenario's ``state_backend``/``incremental`` override it."""
        self._backend = StateBackendConfig(kind, incremental)
        return self

    def build(self) -> JobGraph:
        if self._source is None:
            raise JobDefinitionError(f"job {self.name!r} has no source")
        if self._key is not None:
            raise JobDefinitionError(f"job {self.name!r}: key_by(...) without a process(...) after it")
        g = JobGraph(
            self.name, self.max_parallelism, self._source, list(self._stages), self._contract, self._backend
        )
        g.validate()
        return g
