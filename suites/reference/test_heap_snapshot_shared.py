"""A checkpoint's snapshot shares the live values instead of copying them, and is written to exactly
the same bytes as an isolated snapshot; an isolated snapshot shares no mutable value with the state."""

from __future__ import annotations

import io

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


def test_namespaces_left_empty_are_dropped_and_a_held_handle_still_writes():
    """A namespace whose last entry went (a fired window, a deleted timer) is forgotten by the next
    snapshot, so snapshots do not grow with every namespace ever used; a handle the job still holds
    keeps its namespace, and state written afterwards through new or held handles is all there."""
    b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), ManualClock(0))
    windows = ListStateDescriptor("per_window")
    b.set_current_key("k")
    for w in range(500):
        b.get_partitioned_state(w, windows).add(w)
        b.get_partitioned_state(w, windows).clear()
    held = b.get_partitioned_state("held", windows)
    held.add(1)
    held.clear()
    b.snapshot(shared=True)
    assert list(b._tables["per_window"].data) == ["held"]  # 500 emptied namespaces gone
    held.add(2)  # the job's own reference: still writes into the state
    b.get_partitioned_state(7, windows).add(3)  # a dropped namespace used again
    snap = b.snapshot()
    per_ns = {ns: m for groups in snap.key_groups.values() for ns, m in groups["per_window"].items()}
    assert per_ns == {"held": {"k": [2]}, 7: {"k": [3]}}


def test_checkpoints_of_large_lists_and_maps_pack_only_what_changed_and_write_the_same_bytes():
    """Large list and map values are packed once and then extended by what was appended (the heap
    backend's encoding cache): every later checkpoint, after appends, overwrites, removals, expiry,
    values replaced by equal ones of another type, mutable values changed in place and a restore,
    writes exactly the bytes of a snapshot encoded from scratch."""
    from reference_impl.checkpoint.format import decode_subtask_state

    clock = ManualClock(10)
    b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), clock)
    ttl = StateTtlConfig(1_000)
    starts = b.get_state(MapStateDescriptor("starts").enable_time_to_live(ttl))
    plain = b.get_state(MapStateDescriptor("plain"))
    ids = b.get_state(ListStateDescriptor("ids"))
    recent = b.get_state(ListStateDescriptor("recent").enable_time_to_live(ttl))
    boxes = b.get_state(ListStateDescriptor("boxes"))  # mutable elements: never cached

    def check() -> None:
        snap = b.snapshot(shared=True)
        assert snap.encoded is b._encoded
        cached = encode_subtask_state(SubtaskStateSnapshot("op", 0, 1, 32, keyed=snap))
        snap.encoded = None
        assert cached == encode_subtask_state(SubtaskStateSnapshot("op", 0, 1, 32, keyed=snap))

    def grow(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            b.set_current_key(f"u{i % 3}")
            clock.set(10 + i)
            starts.put(i, i * 2)
            plain.put((i, "w"), True)
            ids.add(f"e{i}")
            recent.add(i)
            if i % 3 == 0:
                box = [i]
                boxes.add(box)

    grow(0, 150)
    check()
    assert b._encoded  # the large values are cached
    grow(150, 160)  # appends only
    check()
    b.set_current_key("u1")
    starts.put(1, 1.0)  # an overwrite: same length, an equal value of another type
    plain.put((4, "w"), 1)  # True -> 1: equal, encoded differently
    check()
    starts.remove(4)
    starts.put(4, 8)  # removed and added again: same length, another position
    plain.remove((7, "w"))
    plain.put((1000, "w"), True)
    check()
    b.set_current_key("u0")
    boxes.get()[0].append("changed in place")  # the heap backend hands out its own objects
    check()
    clock.set(10 + 1_000 + 40)  # the oldest TTL'd entries expire
    b.set_current_key("u2")
    assert starts.get(2) is None and recent.get() is not None  # reads drop the expired
    check()
    ids.update([f"e{i}" for i in range(200)])  # a list replaced by a new one
    check()
    restored = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), clock)
    restored.restore([decode_subtask_state(io.BytesIO(_encode(b, shared=True)), "test")[0].keyed])
    b = restored  # TtlValue pairs after a restore
    starts = b.get_state(MapStateDescriptor("starts").enable_time_to_live(ttl))
    ids = b.get_state(ListStateDescriptor("ids"))
    check()
    for i in range(300, 340):
        b.set_current_key(f"u{i % 3}")
        starts.put(i, i)
        ids.add(f"e{i}")
    check()


def _check_cached_bytes(b: HeapKeyedStateBackend) -> bytes:
    """A checkpoint through the encoding cache, asserted byte-equal to the same snapshot packed from
    scratch (no cache)."""
    snap = b.snapshot(shared=True)
    cached = encode_subtask_state(SubtaskStateSnapshot("op", 0, 1, 32, keyed=snap))
    snap.encoded = None
    assert cached == encode_subtask_state(SubtaskStateSnapshot("op", 0, 1, 32, keyed=snap))
    return cached


_ON_READ = StateTtlConfig(1_000, update_type="OnReadAndWrite")
_NO_CLEANUP = StateTtlConfig(1_000, incremental_cleanup=None)


@pytest.mark.parametrize(
    ("ttl", "change"),
    [
        (None, lambda s, c: s.put(5, "overwritten")),
        (None, lambda s, c: s.put(5, 5)),  # the same object again: an overwrite all the same
        (None, lambda s, c: s.put_all({1000: 1, 5: "overwritten"})),
        (None, lambda s, c: s.put_all({5: "overwritten", 1001: 2})),
        (None, lambda s, c: s.remove(5)),
        (None, lambda s, c: (s.remove(5), s.put(5, "back at the end"))),  # same length
        (_NO_CLEANUP, lambda s, c: (c.set(1_020), s.get(3))),  # a read drops an expired entry
        (_ON_READ, lambda s, c: (c.set(500), s.get(7))),  # a read re-stamps its entry in place
        (_ON_READ, lambda s, c: (c.set(500), s.items())),
        (StateTtlConfig(1_000), lambda s, c: (c.set(1_020), [s.contains(999) for _ in range(64)])),  # cleanup
    ],
    ids=[
        "put-overwrite",
        "put-same-object",
        "put_all-overwrite-last",
        "put_all-overwrite-first",
        "remove",
        "remove-and-put-again",
        "ttl-read-drops-expired",
        "ttl-read-restamps",
        "ttl-items-restamp",
        "ttl-incremental-cleanup",
    ],
)
def test_a_map_changed_in_place_is_packed_again(ttl, change):
    """The encoding cache reuses a large value's packed elements when it only grew since (no element
    is compared): each way a map changes in place other than by appending must drop its entry, or
    the next checkpoint writes the old bytes."""
    clock = ManualClock(10)
    b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), clock)
    d = MapStateDescriptor("m")
    s = b.get_state(d if ttl is None else d.enable_time_to_live(ttl))
    b.set_current_key("k")
    for i in range(40):
        clock.set(10 + i)
        s.put(i, i)
    first = _check_cached_bytes(b)
    live = b._tables["m"].data["VoidNamespace"]["k"]
    assert id(live) in b._encoded  # packed once, cached
    b.set_current_key("k")
    change(s, clock)
    b.set_current_key("k")
    for i in range(2000, 2020):  # then appended to: a stale entry would be extended, not replaced
        s.put(i, "appended")
    assert _check_cached_bytes(b) != first


@pytest.mark.parametrize(
    ("ttl", "change"),
    [
        (None, lambda s, c: s.update([*range(39), "changed"])),
        (None, lambda s, c: s.update(list(range(1, 40)) + [0])),
        (None, lambda s, c: s.clear()),
        (_ON_READ, lambda s, c: (c.set(500), s.get())),  # a read re-stamps every element
        (
            StateTtlConfig(20, incremental_cleanup=None),
            lambda s, c: (c.set(40), s.get()),
        ),  # drops the expired
    ],
    ids=["update-one-changed", "update-reordered", "clear", "ttl-read-restamps", "ttl-read-drops-expired"],
)
def test_a_list_changed_other_than_by_appending_is_packed_again(ttl, change):
    clock = ManualClock(10)
    b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), clock)
    d = ListStateDescriptor("l")
    s = b.get_state(d if ttl is None else d.enable_time_to_live(ttl))
    b.set_current_key("k")
    for i in range(40):
        clock.set(10 + i)
        s.add(i)
    first = _check_cached_bytes(b)
    assert b._encoded
    b.set_current_key("k")
    change(s, clock)
    b.set_current_key("k")
    s.add_all(["appended"] * 40)
    assert _check_cached_bytes(b) != first


def test_random_changes_to_large_lists_and_maps_write_the_bytes_of_a_fresh_pack():
    """Random appends, overwrites, removals, replacements, merges and expiry across checkpoints, on
    plain and TTL'd states: every checkpoint through the encoding cache writes exactly the bytes of
    the same snapshot packed without it."""
    import random

    rnd = random.Random(34)
    clock = ManualClock(10)
    b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), clock)
    maps = [
        b.get_state(MapStateDescriptor("m")),
        b.get_state(MapStateDescriptor("m_ttl").enable_time_to_live(StateTtlConfig(400))),
        b.get_state(MapStateDescriptor("m_read").enable_time_to_live(_ON_READ)),
    ]
    lists = [
        b.get_state(ListStateDescriptor("l")),
        b.get_state(ListStateDescriptor("l_ttl").enable_time_to_live(StateTtlConfig(400))),
    ]
    windows = ListStateDescriptor("w")
    for step in range(3_000):
        clock.set(10 + step // 4)
        b.set_current_key(f"k{rnd.randrange(3)}")
        m, lst = rnd.choice(maps), rnd.choice(lists)
        op = rnd.random()
        uk = rnd.randrange(80)
        if op < 0.45:
            m.put(rnd.randrange(10_000, 10**6), step)  # almost always a new key: an append
        elif op < 0.55:
            m.put(uk, rnd.choice([step, "s", None, (1, 2)]))
        elif op < 0.6:
            m.put_all({rnd.randrange(10**6): step for _ in range(rnd.randrange(1, 4))})
        elif op < 0.65:
            m.remove(uk)
        elif op < 0.7:
            m.get(uk)
        elif op < 0.9:
            lst.add(step)
        elif op < 0.93:
            lst.add_all([step] * rnd.randrange(4))
        elif op < 0.95:
            lst.get()
        elif op < 0.96:
            lst.update(list(range(rnd.randrange(50))))
        elif op < 0.97:
            b.get_partitioned_state(rnd.randrange(3), windows).add_all(range(rnd.randrange(40)))
        else:
            b.get_partitioned_state(rnd.randrange(3), windows).merge_namespaces(0, [1, 2])
        if step % 97 == 0:
            _check_cached_bytes(b)
    assert b._encoded
    _check_cached_bytes(b)
