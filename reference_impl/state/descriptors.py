"""State descriptors: the name, kind, serializers and optional TTL of a keyed state (Flink's
``StateDescriptor`` family). A backend creates or restores state from a descriptor and checks that a
restored state agrees with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from reference_impl.serializers import MSGPACK, Serializer
from reference_impl.snapshot import StateKind, StateMeta
from reference_impl.ttl import StateTtlConfig

__all__ = [
    "AggregateFunction",
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
    "MapStateDescriptor",
]


@runtime_checkable
class AggregateFunction(Protocol):
    """Flink's AggregateFunction: input values fold into an accumulator; ``get_result`` reads it."""

    def create_accumulator(self) -> Any: ...

    def add(self, value: Any, accumulator: Any) -> Any: ...

    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, a: Any, b: Any) -> Any: ...


class StateDescriptor:
    kind: StateKind

    def __init__(self, name: str, serializer: Serializer = MSGPACK) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a state needs a non-empty name, got {name!r}")
        self.name = name
        self.serializer = serializer
        self.ttl_config: StateTtlConfig | None = None

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> StateDescriptor:
        """Give the state a TTL (returns self, for chaining)."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(
                f"state {self.name!r}: expected a StateTtlConfig, got {type(ttl_config).__name__}"
            )
        self.ttl_config = ttl_config if ttl_config.is_enabled else None
        return self

    def meta(self) -> StateMeta:
        return StateMeta(
            name=self.name,
            kind=self.kind,
            value_serializer=self.serializer.identity,
            map_key_serializer=None,
            ttl=None if self.ttl_config is None else self.ttl_config.to_dict(),
        )

    def __repr__(self) -> str:
        ttl = f", ttl={self.ttl_config.ttl_ms}ms" if self.ttl_config else ""
        return f"{type(self).__name__}({self.name!r}{ttl})"


class ValueStateDescriptor(StateDescriptor):
    """A value per key; ``value()`` of an empty state is ``default``. With TTL it is None instead:
    Flink's ``TtlStateFactory`` builds the TTL value state without the descriptor's default."""

    kind = StateKind.VALUE

    def __init__(self, name: str, default: Any = None, serializer: Serializer = MSGPACK) -> None:
        super().__init__(name, serializer)
        self.default = default


class ListStateDescriptor(StateDescriptor):
    kind = StateKind.LIST


class ReducingStateDescriptor(StateDescriptor):
    kind = StateKind.REDUCING

    def __init__(
        self, name: str, reduce_function: Callable[[Any, Any], Any], serializer: Serializer = MSGPACK
    ) -> None:
        super().__init__(name, serializer)
        if not callable(reduce_function):
            raise TypeError(f"state {name!r}: reduce_function must be callable")
        self.reduce_function = reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    kind = StateKind.AGGREGATING

    def __init__(
        self, name: str, aggregate_function: AggregateFunction, serializer: Serializer = MSGPACK
    ) -> None:
        super().__init__(name, serializer)
        for m in ("create_accumulator", "add", "get_result", "merge"):
            if not callable(getattr(aggregate_function, m, None)):
                raise TypeError(f"state {name!r}: aggregate_function lacks {m}()")
        self.aggregate_function = aggregate_function


class MapStateDescriptor(StateDescriptor):
    kind = StateKind.MAP

    def __init__(
        self, name: str, key_serializer: Serializer = MSGPACK, value_serializer: Serializer = MSGPACK
    ) -> None:
        super().__init__(name, value_serializer)
        self.key_serializer = key_serializer

    def meta(self) -> StateMeta:
        m = super().meta()
        return StateMeta(
            m.name,
            m.kind,
            m.value_serializer,
            m.key_serializer,
            m.namespace_serializer,
            self.key_serializer.identity,
            m.ttl,
        )
