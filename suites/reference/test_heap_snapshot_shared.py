"""A checkpoint's snapshot shares the live values instead of copying them, and is written to exactly
the same bytes as an isolated snapshot; an isolated snapshot shares no mutable value with the state."""

from __future__ import annotations

import pytest

from reference_impl.checkpoint.format import encode_subtask_state
from reference_impl.keygroups import KeyGroupRange
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.state import (
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig


def _backend(full_snapshot_cleanup: bool) -> tuple[HeapKeyedStateBackend, ManualClock]:
    clock = ManualClock(10)
    b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), clock)
    ttl = StateTtlConfig(100, full_snapshot_cleanup=full_snapshot_cleanup)
    plain_map = b.get_state(MapStateDescriptor("plain_map"))
    ttl_map = b.get_state(MapStateDescriptor("ttl_map").enable_time_to_live(ttl))
    ttl_list = b.get_state(ListStateDescriptor("ttl_list").enable_time_to_live(ttl))
    value = b.get_state(ValueStateDescriptor("value"))
    # namespaces holding a few keys each (windows, timers): snapshotted entry by entry
    per_window, timers = ListStateDescriptor("per_window"), MapStateDescriptor("timers")
    for i in range(300):
        b.set_current_key(f"k{i % 40}")
        clock.set(10 + i)
        b.get_partitioned_state((i // 3, i // 3 + 5), per_window).add(i)
        b.get_partitioned_state(i // 20, timers).put(i, True)
        plain_map.put(i, [i, {"n": i}])
        ttl_map.put(i % 7, {"seen": [i]})
        ttl_list.add((i, "x"))
        value.update({"last": [i]})
    clock.set(150)  # some TTL'd entries expired: full-snapshot cleanup leaves them out
    return b, clock


def _encode(b: HeapKeyedStateBackend, shared: bool) -> bytes:
    return encode_subtask_state(SubtaskStateSnapshot("op", 0, 1, 32, keyed=b.snapshot(shared=shared)))


@pytest.mark.parametrize("full_snapshot_cleanup", [False, True])
def test_shared_snapshot_writes_the_same_bytes(full_snapshot_cleanup):
    b, _ = _backend(full_snapshot_cleanup)
    assert _encode(b, shared=True) == _encode(b, shared=False)


def test_shared_shares_and_isolated_copies():
    b, _ = _backend(False)
    live = b._tables["plain_map"].data[next(iter(b._tables["plain_map"].data))]
    key, value = next(iter(live.items()))
    kg = b.key_group_of(key)

    def stored(snap):
        return next(iter(snap.key_groups[kg]["plain_map"].values()))[key]

    assert stored(b.snapshot(shared=True)) is value
    isolated = stored(b.snapshot())
    assert isolated == value and isolated is not value
    first = next(iter(value))
    assert isolated[first] is not value[first] and isolated[first][1] is not value[first][1]
