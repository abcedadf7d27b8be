"""Keyed state on the heap backend, after Flink's StateBackendTestBase: empty reads, defaults, None
handling, clear, ``update([])``, map operations, namespaces and merging, key iteration, entry
counts, key-group ownership, snapshot isolation and restore checks."""

from __future__ import annotations

import pytest

from reference_impl.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
)
from reference_impl.serializers import INT, IncompatibleSerializerError
from reference_impl.snapshot import StateRestoreError
from reference_impl.state import (
    AggregatingStateDescriptor,
    HeapKeyedStateBackend,
    KeyGroupOutOfRangeError,
    ListStateDescriptor,
    MapStateDescriptor,
    NoCurrentKeyError,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.time import ManualClock
from suites.reference.functions import SumToStr

MAX_P = 128


def backend(kgr: KeyGroupRange | None = None) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(MAX_P, kgr or KeyGroupRange(0, MAX_P - 1), ManualClock())


def test_value_state_default_update_clear_and_none():
    b = backend()
    s = b.get_state(ValueStateDescriptor("v", default=42))
    b.set_current_key("a")
    assert s.value() == 42
    s.update(1)
    b.set_current_key("b")
    assert s.value() == 42
    s.update(2)
    b.set_current_key("a")
    assert s.value() == 1
    s.update(None)  # Flink: update(null) clears
    assert s.value() == 42
    b.set_current_key("b")
    s.clear()
    assert s.value() == 42 and b.num_entries("v") == 0


def test_state_without_current_key_is_an_error():
    b = backend()
    s = b.get_state(ValueStateDescriptor("v"))
    with pytest.raises(NoCurrentKeyError, match="'v'"):
        s.value()


def test_list_state_semantics():
    b = backend()
    s = b.get_state(ListStateDescriptor("l"))
    b.set_current_key(1)
    assert s.get() is None
    s.add("x")
    s.add_all(["y", "z"])
    assert s.get() == ["x", "y", "z"]
    with pytest.raises(ValueError, match="cannot add None"):
        s.add(None)
    with pytest.raises(ValueError, match="None elements"):
        s.add_all(["ok", None])
    assert s.get() == ["x", "y", "z"]
    s.update(["q"])
    assert s.get() == ["q"]
    s.update([])
    assert s.get() is None and b.num_entries("l") == 0
    got = s.add("w") or s.get()
    got.append("mutated")  # the returned list is a copy
    assert s.get() == ["w"]


def test_reducing_and_aggregating_state():
    b = backend()
    r = b.get_state(ReducingStateDescriptor("r", lambda a, c: a + c))
    a = b.get_state(AggregatingStateDescriptor("a", SumToStr()))
    b.set_current_key("k")
    assert r.get() is None and a.get() is None
    for x in (3, 5, 7):
        r.add(x)
        a.add(x)
    assert r.get() == 15 and a.get() == "15"
    with pytest.raises(ValueError):
        r.add(None)
    with pytest.raises(ValueError):
        a.add(None)
    r.clear()
    a.clear()
    assert r.get() is None and a.get() is None


def test_map_state_operations():
    b = backend()
    m = b.get_state(MapStateDescriptor("m"))
    b.set_current_key("k")
    assert m.is_empty() and m.get("x") is None and not m.contains("x")
    m.put("x", 1)
    m.put_all({"y": 2, "z": None})
    assert m.get("x") == 1 and m.contains("z") and m.get("z") is None
    assert sorted(m.keys()) == ["x", "y", "z"] and sorted(m.items(), key=str) == [
        ("x", 1),
        ("y", 2),
        ("z", None),
    ]
    m.remove("x")
    assert not m.contains("x") and sorted(m.values(), key=str) == [2, None]
    m.clear()
    assert m.is_empty() and b.num_entries("m") == 0


def test_namespaces_and_merge():
    b = backend()
    d = ListStateDescriptor("l")
    s = b.get_partitioned_state("w1", d)
    b.set_current_key("k")
    s.add(1)
    s.set_current_namespace("w2")
    s.add(2)
    s.set_current_namespace("w3")
    s.add(3)
    s.merge_namespaces("w1", ["w2", "w3"])
    s.set_current_namespace("w1")
    assert sorted(s.get()) == [1, 2, 3]
    s.set_current_namespace("w2")
    assert s.get() is None
    r = b.get_partitioned_state("a", ReducingStateDescriptor("r", lambda x, y: x + y))
    r.add(10)
    r.set_current_namespace("b")
    r.add(5)
    r.merge_namespaces("t", ["a", "b"])
    r.set_current_namespace("t")
    assert r.get() == 15
    ag = b.get_partitioned_state("a", AggregatingStateDescriptor("ag", SumToStr()))
    ag.add(1)
    ag.set_current_namespace("b")
    ag.add(2)
    ag.merge_namespaces("a", ["b"])
    ag.set_current_namespace("a")
    assert ag.get() == "3"


def test_key_iteration_and_entry_counts():
    b = backend()
    v = b.get_state(ValueStateDescriptor("v"))
    for k in range(50):
        b.set_current_key(k)
        v.update(k)
    assert sorted(b.get_keys("v")) == list(range(50))
    assert b.num_entries() == 50
    with pytest.raises(KeyError, match="no state named 'nope'"):
        b.get_keys("nope")


def test_key_outside_the_range_is_an_error():
    kgr = compute_key_group_range_for_operator_index(MAX_P, 2, 0)
    b = backend(kgr)
    foreign = next(k for k in range(1000) if assign_to_key_group(k, MAX_P) not in kgr)
    with pytest.raises(KeyGroupOutOfRangeError, match="routed to the wrong subtask"):
        b.set_current_key(foreign)


def test_snapshot_isolation_and_restore_of_a_subrange():
    b = backend()
    v = b.get_state(ValueStateDescriptor("v"))
    lst = b.get_state(ListStateDescriptor("l"))
    for k in range(200):
        b.set_current_key(k)
        v.update(k)
        lst.add([k])
    snap = b.snapshot()
    for k in range(200):  # changes after the snapshot must not leak into it
        b.set_current_key(k)
        v.update(-1)
        lst.add([0])
    assert all(
        val == key
        for per_state in snap.key_groups.values()
        for key, val in per_state["v"]["VoidNamespace"].items()
    )
    restored_keys = set()
    for i in range(3):
        kgr = compute_key_group_range_for_operator_index(MAX_P, 3, i)
        r = backend(kgr)
        r.restore([snap])
        rv = r.get_state(ValueStateDescriptor("v"))
        rl = r.get_state(ListStateDescriptor("l"))
        for k in r.get_keys("v"):
            assert assign_to_key_group(k, MAX_P) in kgr
            r.set_current_key(k)
            assert rv.value() == k and rl.get() == [[k]]
            restored_keys.add(k)
    assert restored_keys == set(range(200))


def test_restore_mismatches_are_clear_errors():
    b = backend()
    s = b.get_state(ValueStateDescriptor("v"))
    b.set_current_key(1)
    s.update(1)
    snap = b.snapshot()
    with pytest.raises(StateRestoreError, match="max_parallelism=128"):
        HeapKeyedStateBackend(256, KeyGroupRange(0, 255)).restore([snap])
    r = backend()
    r.restore([snap])
    with pytest.raises(
        StateRestoreError, match="'v' was checkpointed as a value state but is restored as a list"
    ):
        r.get_state(ListStateDescriptor("v"))
    r = backend()
    r.restore([snap])
    with pytest.raises(IncompatibleSerializerError, match="'v'.*'msgpack'.*'int64'"):
        r.get_state(ValueStateDescriptor("v", serializer=INT))
    with pytest.raises(StateRestoreError, match="before any state is used"):
        b.restore([snap])
