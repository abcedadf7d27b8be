"""The functions a job is made of, and what they see: :class:`RuntimeContext` (keyed state under the
current key, operator state, timers, processing time), :class:`KeyedProcessFunction`,
:class:`KeyedBroadcastProcessFunction` with its :class:`ReadOnlyBroadcastState`, and
:class:`SourceFunction`. Re-exported by ``harness.job`` and ``harness``."""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Iterable
from typing import Any

from harness.job.job_errors import JobDefinitionError
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.state import StateDescriptor
from reference_impl.time import TimeProvider
from reference_impl.timers import MIN_WATERMARK, TimerService

_IS_NONE = functools.partial(operator.is_, None)

__all__ = [
    "RuntimeContext",
    "KeyedProcessFunction",
    "KeyedBroadcastProcessFunction",
    "ReadOnlyBroadcastState",
    "SourceFunction",
]


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

    def collect_all(self, values: Iterable[Any]) -> None:
        """``collect`` each of ``values`` (any iterable, a generator too), in order, in one call (for
        ``process_elements``)."""
        if type(values) is not list:
            values = list(values)
        if any(map(_IS_NONE, values)):  # no generator per call: at 10k+ keys a call emits one or two
            raise ValueError(f"{self.task_name}[{self.subtask}]: cannot emit None")
        self._out.extend(values)

    def _drain(self) -> list[Any]:
        out, self._out = self._out, []
        return out


class KeyedProcessFunction:
    """Override ``open`` to create state handles and ``process_element`` to handle one record under
    its key; emit with ``ctx.collect``. Optionally override ``process_elements`` too, to take many
    records of one key per call (the runtime then calls it instead of ``process_element``)."""

    def open(self, ctx: RuntimeContext) -> None:  # noqa: B027 - optional hook
        pass

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        raise NotImplementedError

    def process_elements(self, key: Any, values: list[Any], ctx: RuntimeContext) -> None:
        """The records ``values`` of ``key`` (its state current), in arrival order, in one call: one
        state read and write per batch instead of per record. Only called when a subclass overrides
        it; then it must do what ``process_element`` on each value in turn would. The runtime groups
        the records it has taken in by key; a batch never spans a barrier, watermark or timer."""
        for v in values:
            self.process_element(v, ctx)

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

    def offsets_of(self, splits: list[Any]) -> dict[str, int]:
        """What :meth:`offsets` says once opened on ``splits`` (a checkpoint's split state), this
        source left as it is: the default opens a copy; a source that can read its own splits
        directly overrides it (an oracle asks this of every source subtask at every checkpoint)."""
        fresh = copy.deepcopy(self)
        fresh.open(splits, None)  # type: ignore[arg-type]  # offsets only: no context read
        return fresh.offsets()

    def between(self, lo: dict[str, int], hi: dict[str, int]) -> Iterable[Any]:
        """The input records after offsets ``lo`` up to offsets ``hi`` (per split, in split order):
        what a sequential model is fed to move from one checkpoint's state to the next."""
        raise NotImplementedError

    def prefix(self, offsets: dict[str, int]) -> Iterable[Any]:
        """The input records before ``offsets``: what a sequential model is fed to compute the state a
        checkpoint must hold."""
        return self.between({}, offsets)
