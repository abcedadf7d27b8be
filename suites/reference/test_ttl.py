"""State TTL after Flink's TtlStateTestBase, with a manual clock and TTL = 100 ms, for every state type."""

from __future__ import annotations

import pytest

from reference_impl.keygroups import KeyGroupRange
from reference_impl.snapshot import StateRestoreError, TtlValue
from reference_impl.state import (
    AggregatingStateDescriptor,
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.time import ManualClock
from reference_impl.ttl import (
    LONG_MAX,
    StateTtlConfig,
    StateVisibility,
    UpdateType,
    expiration_timestamp,
    is_expired,
)
from suites.reference.functions import SumToStr

TTL = 100


# per state type: descriptor factory, write(handle, x), read(handle) -> observed, and what one write of
# x then a read shows (for the generic scenarios)
TYPES = {
    "value": (lambda: ValueStateDescriptor("s"), lambda h, x: h.update(x), lambda h: h.value(), lambda x: x),
    "list": (lambda: ListStateDescriptor("s"), lambda h, x: h.add(x), lambda h: h.get(), lambda x: [x]),
    "reducing": (
        lambda: ReducingStateDescriptor("s", lambda a, b: a + b),
        lambda h, x: h.add(x),
        lambda h: h.get(),
        lambda x: x,
    ),
    "aggregating": (
        lambda: AggregatingStateDescriptor("s", SumToStr()),
        lambda h, x: h.add(x),
        lambda h: h.get(),
        lambda x: str(x),
    ),
    "map": (lambda: MapStateDescriptor("s"), lambda h, x: h.put("k", x), lambda h: h.get("k"), lambda x: x),
}


def setup(kind, **cfg):
    clock = ManualClock()
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    make, write, read, shown = TYPES[kind]
    d = make().enable_time_to_live(StateTtlConfig(TTL, **cfg))
    h = b.get_state(d)
    b.set_current_key("key")
    return clock, b, h, lambda x: write(h, x), lambda: read(h), shown, d


@pytest.mark.parametrize("kind", list(TYPES))
def test_exact_expiration_on_write(kind):
    clock, b, h, write, read, shown, _ = setup(kind)
    write(5)
    clock.set(99)
    assert read() == shown(5)  # OnCreateAndWrite: the read does not refresh
    clock.set(100)
    assert read() is None  # ts + ttl <= now: expired, exactly at 100
    assert b.num_entries() == 0  # and the read cleared it


@pytest.mark.parametrize("kind", list(TYPES))
def test_expiration_on_read(kind):
    clock, b, h, write, read, shown, _ = setup(kind, update_type=UpdateType.OnReadAndWrite)
    write(5)
    clock.set(60)
    assert read() == shown(5)  # refreshes the timestamp to 60
    clock.set(150)
    assert read() == shown(5)  # 60 + 100 > 150
    clock.set(250)
    assert read() is None


@pytest.mark.parametrize("kind", list(TYPES))
def test_relaxed_return_expired_once(kind):
    clock, b, h, write, read, shown, _ = setup(
        kind, state_visibility=StateVisibility.ReturnExpiredIfNotCleanedUp, incremental_cleanup=None
    )
    write(5)
    clock.set(120)
    assert read() == shown(5)  # stale but not cleaned up yet: returned once
    assert read() is None  # the read cleaned it up


@pytest.mark.parametrize("kind", list(TYPES))
def test_write_after_expiry_starts_fresh(kind):
    clock, b, h, write, read, shown, _ = setup(kind)
    write(5)
    clock.set(150)
    write(6)
    clock.set(240)
    assert read() == shown(6)


def test_reducing_5_12_6_sequence():
    clock, b, h, write, read, _, _ = setup("reducing")
    write(5)
    clock.set(50)
    write(7)
    clock.set(120)
    assert read() == 12  # shared timestamp refreshed by the write at 50
    clock.set(170)
    write(6)
    clock.set(220)
    assert read() == 6
    clock.set(300)
    assert read() is None


def test_aggregating_8_15_9_sequence():
    clock, b, h, write, read, _, _ = setup("aggregating")
    write(8)
    assert read() == "8"
    clock.set(50)
    write(7)
    assert read() == "15"
    clock.set(200)
    write(9)
    assert read() == "9"


def test_list_elements_expire_one_by_one():
    clock, b, h, write, read, _, _ = setup("list")
    write("a")
    clock.set(50)
    write("b")
    clock.set(120)
    assert read() == ["b"]
    clock.set(150)
    assert read() is None


def test_map_entries_expire_one_by_one():
    clock, b, h, *_ = setup("map")
    h.put("a", 1)
    clock.set(50)
    h.put("b", 2)
    clock.set(120)
    assert h.items() == [("b", 2)] and not h.contains("a") and h.get("a") is None
    clock.set(150)
    assert not h.is_empty()  # as Flink's TtlMapState.isEmpty: the expired "b" is still stored
    assert h.items() == [] and h.is_empty()


@pytest.mark.parametrize("kind", list(TYPES))
def test_multiple_keys_and_namespaces_expire_independently(kind):
    clock, b, h, write, read, shown, d = setup(kind)
    write(1)
    h.set_current_namespace("other")
    clock.set(40)
    write(2)
    b.set_current_key("key2")
    clock.set(80)
    write(3)
    clock.set(110)
    assert read() == shown(3)
    b.set_current_key("key")
    assert read() == shown(2)
    h.set_current_namespace("VoidNamespace")
    assert read() is None


def test_merge_namespaces_skips_expired_sources():
    clock, b, h, *_ = setup("reducing")
    h.set_current_namespace("a")
    h.add(1)
    clock.set(80)
    h.set_current_namespace("b")
    h.add(10)
    clock.set(120)  # "a" (ts 0) expired, "b" (ts 80) alive
    h.merge_namespaces("t", ["a", "b"])
    h.set_current_namespace("t")
    assert h.get() == 10


def test_timestamp_overflow_is_clamped():
    assert expiration_timestamp(LONG_MAX - 10, TTL) == LONG_MAX
    assert not is_expired(LONG_MAX - 10, TTL, LONG_MAX - 1)
    assert is_expired(LONG_MAX - 10, TTL, LONG_MAX)
    clock, b, h, write, read, shown, _ = setup("value")
    clock.set(LONG_MAX - 10)
    write(5)
    clock.set(LONG_MAX - 1)
    assert read() == 5


@pytest.mark.parametrize("kind", list(TYPES))
def test_snapshot_then_change_then_restore_keeps_timestamps(kind):
    clock, b, h, write, read, shown, d = setup(kind)
    write(5)
    clock.set(50)
    snap = b.snapshot()
    write(7)
    clock.set(60)
    r = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    r.restore([snap])
    _, w2, rd2, _ = TYPES[kind]
    h2 = r.get_state(TYPES[kind][0]().enable_time_to_live(StateTtlConfig(TTL)))
    r.set_current_key("key")
    assert rd2(h2) == shown(5)
    clock.set(100)  # the restored timestamp (0) still counts: expired at 100
    assert rd2(h2) is None


def test_ttl_mismatch_on_restore_names_the_state():
    clock, b, h, write, *_ = setup("value")
    write(1)
    snap = b.snapshot()
    r = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    r.restore([snap])
    with pytest.raises(
        StateRestoreError, match="'s' was checkpointed as TTL state and cannot be restored as non-TTL"
    ):
        r.get_state(ValueStateDescriptor("s"))


@pytest.mark.parametrize("kind", list(TYPES))
def test_full_snapshot_cleanup_leaves_no_expired_entry(kind):
    clock = ManualClock()
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    make, write, _, _ = TYPES[kind]
    h = b.get_state(
        make().enable_time_to_live(StateTtlConfig.new_builder(TTL).cleanup_full_snapshot().build())
    )
    for i in range(300):
        clock.set(i)
        b.set_current_key(i % 37)
        write(h, i)
    snap = b.snapshot()
    now = snap.snapshot_time_ms
    seen = 0
    for per_state in snap.key_groups.values():
        for per_key in per_state["s"].values():
            for v in per_key.values():
                items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else [v]
                for tv in items:
                    assert isinstance(tv, TtlValue) and tv.timestamp + TTL > now
                    seen += 1
    assert seen > 0


def test_incremental_cleanup_removes_untouched_expired_entries():
    clock = ManualClock()
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    cfg = StateTtlConfig.new_builder(TTL).cleanup_incrementally(10, run_cleanup_for_every_record=True).build()
    h = b.get_state(ValueStateDescriptor("s").enable_time_to_live(cfg))
    for k in range(100):
        b.set_current_key(k)
        h.update(k)
    assert b.num_entries() == 100
    clock.set(500)
    for _ in range(30):  # records for one live key only; cleanup walks the rest
        b.set_current_key("live")
        h.update(1)
    assert b.num_entries() == 1


def test_config_defaults_and_round_trip():
    cfg = StateTtlConfig(1000)
    assert cfg.update_type is UpdateType.OnCreateAndWrite
    assert cfg.state_visibility is StateVisibility.NeverReturnExpired
    assert (
        cfg.incremental_cleanup.cleanup_size == 5 and not cfg.incremental_cleanup.run_cleanup_for_every_record
    )
    assert not cfg.full_snapshot_cleanup
    assert StateTtlConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="positive"):
        StateTtlConfig(0)


def test_full_snapshot_cleanup_checkpoint_inspected_has_no_expired_entry(tmp_path):
    from reference_impl.checkpoint import FileSystemCheckpointStorage
    from reference_impl.inspect import inspect_checkpoint
    from reference_impl.snapshot import SubtaskStateSnapshot

    clock = ManualClock()
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
    cfg = StateTtlConfig.new_builder(TTL).cleanup_full_snapshot().disable_cleanup_in_background().build()
    lst = b.get_state(ListStateDescriptor("l").enable_time_to_live(cfg))
    val = b.get_state(ValueStateDescriptor("v").enable_time_to_live(cfg))
    for t in range(0, 400, 3):
        clock.set(t)
        b.set_current_key(t % 23)
        lst.add(t)
        val.update(t)
    st = FileSystemCheckpointStorage(tmp_path)
    h = st.write_subtask_state("job", 1, SubtaskStateSnapshot("op", 0, 1, 128, b.snapshot()))
    chk = st.finalize_checkpoint("job", 1, [h], {"op": {"parallelism": 1, "max_parallelism": 128}})
    view = inspect_checkpoint(chk.directory)
    now = clock.now_ms()
    entries = 0
    for per_state in view.operators["op"].keyed.values():
        for per_ns in per_state.values():
            for per_key in per_ns.values():
                for v in per_key.values():
                    for tv in v if isinstance(v, list) else [v]:
                        assert tv.timestamp + TTL > now, tv
                        entries += 1
    assert entries > 0
