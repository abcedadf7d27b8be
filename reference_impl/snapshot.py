"""The in-memory model of a subtask's state snapshot: the seam between state backends and storage.

Backends produce these plain structures on ``snapshot()`` and accept them on ``restore()``;
checkpoint storage writes them to files (by key group, with serializers named in :class:`StateMeta`)
and reads back only the key groups a subtask owns. ``inspect`` returns them too, so oracles and users
compare state as ordinary Python values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from reference_impl.errors import InputError
from reference_impl.keygroups import KeyGroupRange

__all__ = [
    "StateKind",
    "StateMeta",
    "TtlValue",
    "KeyedStateSnapshot",
    "OperatorStateMode",
    "OperatorStateEntry",
    "OperatorStateSnapshot",
    "SubtaskStateSnapshot",
    "StateRestoreError",
]


class StateRestoreError(InputError, ValueError):
    """State cannot be restored as asked (mode, serializer, TTL or max parallelism mismatch)."""


class StateKind(str, Enum):
    VALUE = "value"
    LIST = "list"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"
    MAP = "map"


@dataclass(frozen=True)
class StateMeta:
    """What a restore must agree with: kind, serializer identities and TTL (as a plain dict, or None)."""

    name: str
    kind: StateKind
    value_serializer: str = "msgpack"
    key_serializer: str = "msgpack"
    namespace_serializer: str = "msgpack"
    map_key_serializer: str | None = None
    ttl: dict[str, Any] | None = None


class TtlValue(NamedTuple):
    """A value with the processing time (ms) of its last access that counts for TTL. A named tuple:
    it is created on every TTL write, and tuple construction is several times cheaper than a
    dataclass's."""

    value: Any
    timestamp: int


# kg -> state name -> namespace -> key -> value
# value is: Value/Reducing/Aggregating: the value (TtlValue if TTL); List: list of values (each a
# TtlValue if TTL); Map: dict user_key -> value (each a TtlValue if TTL).
KeyGroupData = dict[int, dict[str, dict[Any, dict[Any, Any]]]]


@dataclass
class KeyedStateSnapshot:
    max_parallelism: int
    key_group_range: KeyGroupRange
    states: dict[str, StateMeta] = field(default_factory=dict)
    key_groups: KeyGroupData = field(default_factory=dict)
    snapshot_time_ms: int | None = None
    # a backend's cache of the packed elements of its large list and map values, by the identity of
    # the live collection, for a snapshot that hands over live values (the heap backend's ``shared``
    # one): a checkpoint packs only what was appended since the last one (``checkpoint.format_v3``)
    encoded: dict[int, Any] | None = field(default=None, compare=False, repr=False)


class OperatorStateMode(str, Enum):
    SPLIT_DISTRIBUTE = "SPLIT_DISTRIBUTE"
    UNION = "UNION"
    BROADCAST = "BROADCAST"


@dataclass
class OperatorStateEntry:
    """One named operator state: a list (split-distribute, union) or a map (broadcast)."""

    name: str
    mode: OperatorStateMode
    value_serializer: str = "msgpack"
    key_serializer: str | None = None  # broadcast map keys
    value: list[Any] | dict[Any, Any] = field(default_factory=list)


@dataclass
class OperatorStateSnapshot:
    states: dict[str, OperatorStateEntry] = field(default_factory=dict)


@dataclass
class SubtaskStateSnapshot:
    """Everything one subtask of one operator checkpointed."""

    operator_id: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    keyed: KeyedStateSnapshot | None = None
    operator: OperatorStateSnapshot | None = None
