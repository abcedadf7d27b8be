"""Incremental TTL cleanup of map state skips a map whose earliest expiry is still ahead, with exactly
the outcome of Flink's full read of every visited map."""

from __future__ import annotations

import random

import pytest

from reference_impl.keygroups import KeyGroupRange
from reference_impl.state import HeapKeyedStateBackend, MapStateDescriptor
from reference_impl.state import heap_backend as heap
from reference_impl.time import ManualClock
from reference_impl.ttl import IncrementalCleanup, StateTtlConfig, UpdateType

TTL = 100


def _backend(bounds: bool, update_type: UpdateType = UpdateType.OnCreateAndWrite):
    clock = ManualClock()
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    cfg = StateTtlConfig(TTL, update_type=update_type, incremental_cleanup=IncrementalCleanup(2, True))
    h = b.get_state(MapStateDescriptor("m").enable_time_to_live(cfg))
    if not bounds:
        b._tables["m"].earliest = None  # every visited map read in full, as Flink does
    return clock, b, h


@pytest.mark.parametrize("update_type", [UpdateType.OnCreateAndWrite, UpdateType.OnReadAndWrite])
@pytest.mark.parametrize("seed", range(6))
def test_same_state_as_full_scans(seed, update_type):
    """Random puts, reads, removals and clock moves (backwards too, as a skewed clock does): the
    backend with bounds holds exactly what the one reading every visited map in full holds."""
    rng = random.Random(seed)
    runs = [_backend(True, update_type), _backend(False, update_type)]
    for _ in range(3000):
        op, key, uk = rng.random(), f"k{rng.randrange(12)}", rng.randrange(20)
        move = rng.choice([0, 0, 0, 7, 31, -40]) if rng.random() < 0.3 else 0
        for clock, b, h in runs:
            if move:
                clock.set(max(0, clock.now_ms() + move))
            b.set_current_key(key)
            if op < 0.5:
                h.put(uk, uk)
            elif op < 0.55:
                h.put_all({uk: 1, uk + 1: 2})
            elif op < 0.8:
                h.get(uk)
            else:
                h.remove(uk)
        assert runs[0][1]._tables["m"].data == runs[1][1]._tables["m"].data


def test_a_map_not_yet_due_is_skipped_without_reading_it(monkeypatch):
    clock, b, h = _backend(True)
    b.set_current_key("big")
    h.put_all({i: i for i in range(500)})
    table = b._tables["m"]
    b.incremental_cleanup(table, 1)  # the first visit reads the map and keeps its earliest expiry
    assert table.earliest[(heap.VOID_NAMESPACE, "big")] == TTL
    reads = 0
    real = heap.expiration_timestamp

    def counting(ts: int, ttl_ms: int) -> int:
        nonlocal reads
        reads += 1
        return real(ts, ttl_ms)

    monkeypatch.setattr(heap, "expiration_timestamp", counting)
    clock.set(TTL - 1)
    for _ in range(50):
        b.incremental_cleanup(table, 1)
    assert reads == 0  # 50 visits, no entry read
    clock.set(TTL)
    for _ in range(2):  # the cursor may be at its end first, then starts again
        b.incremental_cleanup(table, 1)
    assert reads == 500 and b.num_entries() == 0  # due: read in full and dropped
