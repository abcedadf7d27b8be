"""Keyed state: descriptors, handles and the heap backend (Flink's keyed state API)."""

from reference_impl.state.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.state.handles import (
    VOID_NAMESPACE,
    AggregatingState,
    ListState,
    MapState,
    NoCurrentKeyError,
    ReducingState,
    ValueState,
)
from reference_impl.state.heap_backend import HeapKeyedStateBackend, KeyGroupOutOfRangeError

__all__ = [
    "AggregateFunction",
    "AggregatingStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "StateDescriptor",
    "ValueStateDescriptor",
    "VOID_NAMESPACE",
    "AggregatingState",
    "ListState",
    "MapState",
    "NoCurrentKeyError",
    "ReducingState",
    "ValueState",
    "HeapKeyedStateBackend",
    "KeyGroupOutOfRangeError",
]
