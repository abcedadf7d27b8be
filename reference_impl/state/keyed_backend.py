"""What every keyed state backend shares, whatever holds its data: the key-group range it owns and
the routing check, handles per state and namespace, and the compatibility rules a restored state
must meet. Keeping them in one place keeps the heap and on-disk backends' errors identical."""

from __future__ import annotations

from typing import Any

from reference_impl.keygroups import KeyGroupRange, assign_to_key_group, check_parallelism
from reference_impl.serializers import check_compatible
from reference_impl.snapshot import KeyedStateSnapshot, StateKind, StateMeta, StateRestoreError
from reference_impl.state.descriptors import StateDescriptor
from reference_impl.state.handles import (
    VOID_NAMESPACE,
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    ValueState,
)
from reference_impl.time import SystemClock, TimeProvider

__all__ = ["KeyedStateBackendBase", "KeyGroupOutOfRangeError"]

HANDLES = {
    StateKind.VALUE: ValueState,
    StateKind.LIST: ListState,
    StateKind.REDUCING: ReducingState,
    StateKind.AGGREGATING: AggregatingState,
    StateKind.MAP: MapState,
}


class KeyGroupOutOfRangeError(KeyError):
    """A key reached a backend that does not own its key group: routing is broken."""

    def __str__(self) -> str:
        return str(self.args[0])


class KeyedStateBackendBase:
    """Subclasses hold the data: they provide ``_table(descriptor)`` (created or restored state)."""

    def __init__(
        self, max_parallelism: int, key_group_range: KeyGroupRange, time_provider: TimeProvider | None = None
    ) -> None:
        check_parallelism(max_parallelism)
        if key_group_range and key_group_range.end >= max_parallelism:
            raise ValueError(f"{key_group_range} exceeds max_parallelism={max_parallelism}")
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self.time_provider: TimeProvider = time_provider or SystemClock()
        self.current_key: Any = None
        self._handles: dict[tuple[str, Any], Any] = {}

    # ------------------------------------------------------------------ keys

    def _owned_key_group(self, key: Any) -> int:
        """The key's group; a group outside this backend's range means records are misrouted."""
        kg = assign_to_key_group(key, self.max_parallelism)
        if not self.key_group_range.start <= kg <= self.key_group_range.end:
            raise KeyGroupOutOfRangeError(
                f"key {key!r} belongs to key group {kg}, outside this backend's {self.key_group_range} "
                f"(max_parallelism={self.max_parallelism}): records are routed to the wrong subtask"
            )
        return kg

    def get_current_key(self) -> Any:
        return self.current_key

    def key_group_of(self, key: Any) -> int:
        raise NotImplementedError

    @property
    def current_key_group(self) -> int | None:
        """The current key's key group, derived (not stored) so that switching keys stays cheap."""
        return None if self.current_key is None else self.key_group_of(self.current_key)

    # ------------------------------------------------------------------ state handles

    def _table(self, descriptor: StateDescriptor) -> Any:
        raise NotImplementedError

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The handle for ``descriptor`` in the default namespace (created or restored on first use)."""
        return self.get_partitioned_state(VOID_NAMESPACE, descriptor)

    def get_partitioned_state(self, namespace: Any, descriptor: StateDescriptor) -> Any:
        handle = self._handles.get((descriptor.name, namespace))
        if handle is not None:
            if handle._t.descriptor is not descriptor:
                self._check_same(handle._t.descriptor, descriptor)
            return handle
        table = self._table(descriptor)
        handle = HANDLES[descriptor.kind](self, table, namespace)
        self._handles[(descriptor.name, namespace)] = handle
        return handle

    def _check_same(self, old: StateDescriptor, new: StateDescriptor) -> None:
        if old.kind != new.kind:
            raise StateRestoreError(f"state {new.name!r} is a {old.kind.value} state, not {new.kind.value}")
        self._check_compatible(old.meta(), new)

    @staticmethod
    def _check_compatible(meta: StateMeta, d: StateDescriptor) -> None:
        new = d.meta()
        if meta.kind != new.kind:
            raise StateRestoreError(
                f"state {d.name!r} was checkpointed as a {StateKind(meta.kind).value} state but is "
                f"restored as a {new.kind.value} state"
            )
        if (meta.ttl is None) != (new.ttl is None):
            was, now = ("TTL", "non-TTL") if meta.ttl is not None else ("non-TTL", "TTL")
            raise StateRestoreError(
                f"state {d.name!r} was checkpointed as {was} state and cannot be restored as {now}"
            )
        check_compatible(d.name, "values", meta.value_serializer, new.value_serializer)
        if meta.map_key_serializer or new.map_key_serializer:
            check_compatible(d.name, "map keys", meta.map_key_serializer or "", new.map_key_serializer or "")

    # ------------------------------------------------------------------ restore

    def _restored_metas(self, snapshots: list[KeyedStateSnapshot]) -> dict[str, StateMeta]:
        """The states of ``snapshots``, after checking they can be restored here together."""
        metas: dict[str, StateMeta] = {}
        for snap in snapshots:
            if snap.max_parallelism != self.max_parallelism:
                raise StateRestoreError(
                    f"checkpoint has max_parallelism={snap.max_parallelism} but the job has "
                    f"{self.max_parallelism}: max parallelism can never change for existing state"
                )
            for name, meta in snap.states.items():
                if name in metas and metas[name] != meta:
                    raise StateRestoreError(
                        f"state {name!r} has conflicting metadata across restored snapshots"
                    )
                metas[name] = meta
        return metas
