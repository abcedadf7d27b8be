"""The TTL and redistribution corner cases where Flink's own classes decide (issue #21), as named
examples after Flink's TtlStateTestBase, StateBackendTestBase and StateAssignmentOperationTest, on
both keyed backends. ``test_state_flink.py`` checks the same behaviour against vectors from Flink."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference_impl.keygroups import KeyGroupRange
from reference_impl.rescale import java_hash_map_order, repartition_operator_state
from reference_impl.snapshot import OperatorStateEntry, OperatorStateMode, OperatorStateSnapshot
from reference_impl.state import (
    AggregatingStateDescriptor,
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig, StateVisibility, UpdateType
from suites.reference.functions import SumToStr

TTL = 100
RETURN_EXPIRED = StateVisibility.ReturnExpiredIfNotCleanedUp
NEVER = StateVisibility.NeverReturnExpired


@pytest.fixture(params=["heap", "ondisk"])
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[ManualClock, object]]:
    clock = ManualClock()
    if request.param == "heap":
        yield clock, HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    else:
        b = OnDiskKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
        yield clock, b
        b.close()


def _ttl(visibility: StateVisibility, update: UpdateType = UpdateType.OnCreateAndWrite) -> StateTtlConfig:
    return StateTtlConfig(TTL, update_type=update, state_visibility=visibility, incremental_cleanup=None)


def _state(b, descriptor, visibility, update=UpdateType.OnCreateAndWrite, namespace="w"):
    h = b.get_partitioned_state(namespace, descriptor.enable_time_to_live(_ttl(visibility, update)))
    b.set_current_key("k")
    return h


# ------------------------------------------------------------------ 1. add after expiry


@pytest.mark.parametrize(
    "visibility,expected", [(RETURN_EXPIRED, 12), (NEVER, 7)], ids=["return-expired", "never-return"]
)
def test_reducing_add_after_expiry_folds_the_expired_value_only_if_it_may_be_returned(
    backend, visibility, expected
):
    clock, b = backend
    h = _state(b, ReducingStateDescriptor("r", lambda a, x: a + x), visibility)
    h.add(5)
    clock.set(TTL)  # exactly the expiry instant: expired
    h.add(7)  # TtlReduceFunction.reduce(stored, new) goes through getUnexpired
    assert h.get() == expected
    clock.set(TTL + TTL - 1)  # the new timestamp is the add's
    assert h.get() == expected


@pytest.mark.parametrize(
    "visibility,expected", [(RETURN_EXPIRED, "12"), (NEVER, "7")], ids=["return-expired", "never-return"]
)
def test_aggregating_add_after_expiry_starts_from_the_expired_accumulator(backend, visibility, expected):
    clock, b = backend
    h = _state(b, AggregatingStateDescriptor("a", SumToStr()), visibility)
    h.add(5)
    clock.set(150)
    h.add(7)
    assert h.get() == expected


# ------------------------------------------------------------------ 2. lists with ReturnExpired


def test_list_returns_expired_elements_until_all_have_expired(backend):
    clock, b = backend
    h = _state(b, ListStateDescriptor("l"), RETURN_EXPIRED)
    h.add("a")
    clock.set(50)
    h.add("b")
    clock.set(120)  # "a" expired, "b" alive: both shown, both still stored
    assert h.get() == ["a", "b"]
    assert h.get() == ["a", "b"]
    clock.set(150)  # all expired: shown once, then cleared
    assert h.get() == ["a", "b"]
    assert h.get() is None


def test_list_never_returning_expired_keeps_them_stored_while_one_is_alive(backend):
    clock, b = backend
    h = _state(b, ListStateDescriptor("l"), NEVER)
    h.add("a")
    clock.set(50)
    h.add("b")
    clock.set(120)
    assert h.get() == ["b"]
    snap = b.snapshot()  # no cleanup configured: the expired element is still stored
    assert [tv.value for tv in snap.key_groups[b.key_group_of("k")]["l"]["w"]["k"]] == ["a", "b"]


def test_list_read_with_update_on_read_keeps_only_alive_elements_restamped(backend):
    clock, b = backend
    h = _state(b, ListStateDescriptor("l"), RETURN_EXPIRED, UpdateType.OnReadAndWrite)
    h.add("a")
    clock.set(50)
    h.add("b")
    clock.set(120)
    assert h.get() == ["a", "b"]  # this read shows the expired "a" ...
    assert h.get() == ["b"]  # ... and stored only "b", re-stamped at 120
    clock.set(219)
    assert h.get() == ["b"]


# ------------------------------------------------------------------ 3. namespace merges with TTL


def test_merge_restamps_a_live_value_meeting_an_expired_one(backend):
    clock, b = backend
    h = _state(b, ReducingStateDescriptor("r", lambda a, x: a + x), NEVER, namespace="t")
    h.add(1)  # target, expires at 100
    clock.set(50)
    src = b.get_partitioned_state("s", h._t.descriptor)
    src.add(2)  # source, alive until 150
    clock.set(120)
    h.merge_namespaces("t", ["s"])  # expired target meets live source: survivor stamped 120
    clock.set(200)  # the source's own timestamp would have expired it at 150
    assert h.get() == 2
    clock.set(220)
    assert h.get() is None


@pytest.mark.parametrize(
    "visibility,expected", [(RETURN_EXPIRED, "6"), (NEVER, "2")], ids=["return-expired", "never-return"]
)
def test_merge_counts_expired_values_only_when_they_may_be_returned(backend, visibility, expected):
    clock, b = backend
    d = AggregatingStateDescriptor("a", SumToStr())
    h = _state(b, d, visibility, namespace="t")
    h.add(1)
    b.get_partitioned_state("s1", d).add(3)
    clock.set(50)
    b.get_partitioned_state("s2", d).add(2)
    clock.set(120)
    h.merge_namespaces("t", ["s1", "s2"])
    assert h.get() == expected


def test_merge_folds_sources_first_then_into_the_target(backend):
    _, b = backend
    d = ReducingStateDescriptor("r", lambda a, x: f"({a}+{x})")
    h = b.get_partitioned_state("t", d)
    b.set_current_key("k")
    for ns in ("t", "a", "b"):
        b.get_partitioned_state(ns, d).add(ns)
    h.merge_namespaces("t", ["a", "b"])
    assert h.get() == "(t+(a+b))"  # AbstractHeapMergingState: reduce(target, reduce(a, b))
    b.get_partitioned_state("a", d).add("a")
    h.merge_namespaces("t", ["a", "t"])  # the target among the sources is taken out and folded in order
    assert h.get() == "(a+(t+(a+b)))"


def test_list_merge_concatenates_with_timestamps_unchecked(backend):
    clock, b = backend
    d = ListStateDescriptor("l")
    h = _state(b, d, RETURN_EXPIRED, namespace="t")
    b.get_partitioned_state("s", d).add("old")
    clock.set(60)
    h.add("new")
    clock.set(120)
    h.merge_namespaces("t", ["s"])
    assert h.get() == ["new", "old"]  # the expired source element came along, with its timestamp


# ------------------------------------------------------------------ siblings


def test_ttl_map_is_empty_counts_expired_entries_not_yet_cleaned_up(backend):
    clock, b = backend
    h = _state(b, MapStateDescriptor("m"), NEVER)
    h.put("a", 1)
    clock.set(TTL)
    assert not h.is_empty()  # TtlMapState.isEmpty asks the stored map
    assert h.items() == []
    assert h.is_empty()


def test_ttl_value_state_has_no_default(backend):
    clock, b = backend
    h = _state(b, ValueStateDescriptor("v", default=0), NEVER)
    assert h.value() is None
    h.update(3)
    clock.set(TTL)
    assert h.value() is None
    plain = b.get_state(ValueStateDescriptor("p", default=0))
    assert plain.value() == 0


def test_ondisk_compaction_filter_drops_a_list_prefix_only():
    clock = ManualClock()
    cfg = (
        StateTtlConfig.new_builder(TTL)
        .return_expired_if_not_cleaned_up()
        .disable_cleanup_in_background()
        .cleanup_in_compaction_filter()
        .build()
    )
    with OnDiskKeyedStateBackend(128, KeyGroupRange(0, 127), clock) as b:
        d = ListStateDescriptor("l").enable_time_to_live(cfg)
        h = b.get_partitioned_state("t", d)
        b.set_current_key("k")
        h.add("x")  # @0
        clock.set(60)
        b.get_partitioned_state("s", d).add("y")  # @60
        h.merge_namespaces("s", ["t"])  # s = [y@60, x@0]
        b.get_partitioned_state("t", d).add("z")  # @60
        clock.set(10)
        b.get_partitioned_state("t", d).add("w")  # t = [z@60, w@10]
        clock.set(120)
        b.get_partitioned_state("u", d).add("v")  # u = [v@120]
        clock.set(90)
        b.get_partitioned_state("u", d).add("q")  # u = [v@120, q@90]
        clock.set(115)
        assert b.compact_expired() == 0  # every list starts with a live element: kept whole
        clock.set(170)  # y, z expired; v alive: RocksDB's filter drops lists up to the first live one
        assert b.compact_expired() == 2
        b.set_current_key("k")
        assert b.get_partitioned_state("s", d).get() is None
        assert b.get_partitioned_state("t", d).get() is None
        assert b.get_partitioned_state("u", d).get() == ["v", "q"]  # expired "q" after live "v" stays


# ------------------------------------------------------------------ 4./5. operator state


def _snap(**states: tuple[OperatorStateMode, list | dict]) -> OperatorStateSnapshot:
    s = OperatorStateSnapshot()
    for name, (mode, value) in states.items():
        s.states[name] = OperatorStateEntry(name, mode, "msgpack", None, value)
    return s


SPLIT, UNION, BROADCAST = (
    OperatorStateMode.SPLIT_DISTRIBUTE,
    OperatorStateMode.UNION,
    OperatorStateMode.BROADCAST,
)


def test_split_states_carry_start_parallel_op_over():
    # "k" and "lw" share a HashMap bucket; computeIfAbsent puts the later one ("lw") first
    assert java_hash_map_order(["k", "lw"]) == ["lw", "k"]
    old = [_snap(k=(SPLIT, ["k0", "k1"]), lw=(SPLIT, ["l0"])), _snap(k=(SPLIT, []))]
    new = repartition_operator_state(old, 10)
    got = [(s.states["lw"].value, s.states["k"].value) for s in new[:4]]
    # "lw" deals its one element to subtask 0; "k" then starts at subtask 1
    assert got == [(["l0"], []), ([], ["k0"]), ([], ["k1"]), ([], [])]


def test_split_state_without_remainder_keeps_the_start():
    old = [_snap(a=(SPLIT, [1, 2, 3])), _snap(b=(SPLIT, [4, 5, 6, 7])), _snap(c=(SPLIT, [8, 9, 10]))]
    assert java_hash_map_order(["a", "b", "c"]) == ["a", "b", "c"]
    new = repartition_operator_state(old, 2)
    # "a": subtask 0 gets the extra element, the next state starts at 1; "b" divides evenly, so
    # "c" starts at 1 too and subtask 1 gets its extra element
    assert [s.states["a"].value for s in new] == [[1, 2], [3]]
    assert [s.states["b"].value for s in new] == [[6, 7], [4, 5]]
    assert [s.states["c"].value for s in new] == [[10], [8, 9]]


@pytest.mark.parametrize("new_p", [3, 4, 5])
def test_broadcast_indexes_the_reporting_subtasks_only(new_p):
    old = [_snap(r=(BROADCAST, {"from": 0})), _snap(), _snap(r=(BROADCAST, {"from": 2}))]
    new = repartition_operator_state(old, new_p)
    assert [s.states["r"].value for s in new] == [{"from": (0, 2)[i % 2]} for i in range(new_p)]


def test_union_gives_everyone_everything_in_old_subtask_order():
    old = [_snap(u=(UNION, [1])), _snap(), _snap(u=(UNION, [2, 3]))]
    assert all(s.states["u"].value == [1, 2, 3] for s in repartition_operator_state(old, 2))
