"""Operator (non-keyed) state: split-distribute and union list state, and broadcast map state.

The mode decides what a subtask gets back after a rescale (see
:func:`reference_impl.rescale.repartition_operator_state`, which follows Flink's round-robin
repartitioner): SPLIT_DISTRIBUTE hands out contiguous chunks of all old elements, UNION gives everyone
everything, BROADCAST gives every new subtask the copy of one old subtask that reported the state. Restoring a name under another mode, or with
another serializer, is a clear error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reference_impl.serializers import MSGPACK, Serializer, check_compatible
from reference_impl.snapshot import (
    OperatorStateEntry,
    OperatorStateMode,
    OperatorStateSnapshot,
    StateRestoreError,
)

__all__ = ["OperatorStateBackend", "OperatorListState", "BroadcastState"]


class OperatorListState:
    """A list of elements owned by a subtask (split-distribute or union)."""

    def __init__(self, entry: OperatorStateEntry) -> None:
        self._e = entry

    def get(self) -> list[Any]:
        return list(self._e.value)

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"operator state {self._e.name!r}: cannot add None")
        self._e.value.append(value)  # type: ignore[union-attr]  # a list state's entry holds a list

    def add_all(self, values: Iterable[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any]) -> None:
        vs = list(values)
        if any(v is None for v in vs):
            raise ValueError(f"operator state {self._e.name!r}: None elements are not allowed")
        self._e.value = vs

    def clear(self) -> None:
        self._e.value = []


class BroadcastState:
    """A map that is identical on every subtask (Flink's BroadcastState)."""

    def __init__(self, entry: OperatorStateEntry) -> None:
        self._e = entry

    def _d(self) -> dict[Any, Any]:
        return self._e.value  # type: ignore[return-value]  # a broadcast state's entry holds a dict

    def get(self, key: Any) -> Any:
        return self._d().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._d()[key] = value

    def remove(self, key: Any) -> None:
        self._d().pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._d()

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._d().items())

    def clear(self) -> None:
        self._d().clear()


class OperatorStateBackend:
    """Operator state of one subtask: named list and broadcast states, snapshot and restore."""

    def __init__(self) -> None:
        self._entries: dict[str, OperatorStateEntry] = {}
        self._restored: dict[str, OperatorStateEntry] = {}

    def _entry(
        self, name: str, mode: OperatorStateMode, ser: Serializer, kser: Serializer | None
    ) -> OperatorStateEntry:
        e = self._entries.get(name)
        if e is None:
            e = self._restored.pop(name, None)
            if e is None:
                e = OperatorStateEntry(
                    name,
                    mode,
                    ser.identity,
                    kser.identity if kser else None,
                    {} if mode is OperatorStateMode.BROADCAST else [],
                )
            self._entries[name] = e
        if e.mode != mode:
            raise StateRestoreError(
                f"operator state {name!r} was written as {OperatorStateMode(e.mode).value} and cannot be used as "
                f"{mode.value}"
            )
        check_compatible(name, "values", e.value_serializer, ser.identity)
        if kser is not None:
            check_compatible(name, "keys", e.key_serializer or "", kser.identity)
        return e

    def get_list_state(self, name: str, serializer: Serializer = MSGPACK) -> OperatorListState:
        """Split-distribute list state: on rescale, elements are divided among the new subtasks."""
        return OperatorListState(self._entry(name, OperatorStateMode.SPLIT_DISTRIBUTE, serializer, None))

    def get_union_list_state(self, name: str, serializer: Serializer = MSGPACK) -> OperatorListState:
        """Union list state: on restore, every subtask gets all elements of all old subtasks."""
        return OperatorListState(self._entry(name, OperatorStateMode.UNION, serializer, None))

    def get_broadcast_state(
        self, name: str, key_serializer: Serializer = MSGPACK, value_serializer: Serializer = MSGPACK
    ) -> BroadcastState:
        return BroadcastState(
            self._entry(name, OperatorStateMode.BROADCAST, value_serializer, key_serializer)
        )

    def live(self) -> dict[str, tuple[OperatorStateMode, Any]]:
        """Name -> (mode, value) of every state as it is now, read without a snapshot (what an oracle
        compares a snapshot with)."""
        return {
            e.name: (OperatorStateMode(e.mode), dict(e.value) if isinstance(e.value, dict) else list(e.value))
            for e in [*self._entries.values(), *self._restored.values()]
        }

    def snapshot(self) -> OperatorStateSnapshot:
        out = OperatorStateSnapshot()
        for e in [*self._entries.values(), *self._restored.values()]:
            value = dict(e.value) if isinstance(e.value, dict) else list(e.value)
            out.states[e.name] = OperatorStateEntry(
                e.name, e.mode, e.value_serializer, e.key_serializer, value
            )
        return out

    def restore(self, snapshot: OperatorStateSnapshot) -> None:
        if self._entries or self._restored:
            raise StateRestoreError("operator state restore() must run before any state is used")
        for e in snapshot.states.values():
            value = dict(e.value) if isinstance(e.value, dict) else list(e.value)
            self._restored[e.name] = OperatorStateEntry(
                e.name, OperatorStateMode(e.mode), e.value_serializer, e.key_serializer, value
            )
