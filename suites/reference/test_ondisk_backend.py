"""The on-disk (RocksDB) keyed backend against the heap backend's contract, after Flink's
StateBackendTestBase: every test that is not about on-disk specifics runs on both backends. Then
TTL (incl. the compaction sweep), rescaling through real checkpoint storage, and incremental
checkpoints: bytes written after a small change, retention of shared files, damage detection."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_impl.checkpoint import (
    CheckpointError,
    FileSystemCheckpointStorage,
    read_subtask_state,
    validate_checkpoint,
)
from reference_impl.inspect import inspect_checkpoint
from reference_impl.keygroups import (
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
)
from reference_impl.rescale import assign_state, restore_subtask
from reference_impl.serializers import INT, STR, IncompatibleSerializerError
from reference_impl.snapshot import StateRestoreError, SubtaskStateSnapshot, TtlValue
from reference_impl.state import (
    AggregatingStateDescriptor,
    HeapKeyedStateBackend,
    KeyGroupOutOfRangeError,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig, StateVisibility, UpdateType
from suites.reference.functions import SumToStr

MAX_P = 128
FULL = KeyGroupRange(0, MAX_P - 1)
TTL = 100

_open: list[OnDiskKeyedStateBackend] = []


def _heap(max_p: int, kgr: KeyGroupRange, clock: ManualClock | None = None) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(max_p, kgr, clock or ManualClock())


def _disk(max_p: int, kgr: KeyGroupRange, clock: ManualClock | None = None) -> OnDiskKeyedStateBackend:
    b = OnDiskKeyedStateBackend(max_p, kgr, clock or ManualClock())
    _open.append(b)
    return b


FACTORIES = {"heap": _heap, "ondisk": _disk}
Factory = Callable[..., HeapKeyedStateBackend | OnDiskKeyedStateBackend]


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


@pytest.fixture(params=list(FACTORIES))
def make(request: pytest.FixtureRequest) -> Factory:
    return FACTORIES[request.param]


def _add(a, b):
    return a + b


# ------------------------------------------------------------------ keyed state semantics


def test_empty_state_reads_none_or_default(make):
    b = make(MAX_P, FULL)
    b.set_current_key("k")
    assert b.get_state(ValueStateDescriptor("v")).value() is None
    assert b.get_state(ValueStateDescriptor("d", default=7)).value() == 7
    assert b.get_state(ListStateDescriptor("l")).get() is None
    assert b.get_state(ReducingStateDescriptor("r", _add)).get() is None
    assert b.get_state(AggregatingStateDescriptor("a", SumToStr())).get() is None
    m = b.get_state(MapStateDescriptor("m"))
    assert m.get("x") is None and not m.contains("x") and m.is_empty() and m.items() == []
    assert b.num_entries() == 0


def test_value_state(make):
    b = make(MAX_P, FULL)
    s = b.get_state(ValueStateDescriptor("v", default=42))
    b.set_current_key("a")
    s.update((1, "x"))
    b.set_current_key("b")
    assert s.value() == 42
    s.update(2)
    b.set_current_key("a")
    assert s.value() == (1, "x")
    s.update(None)
    assert s.value() == 42 and b.num_entries("v") == 1
    b.set_current_key("b")
    s.clear()
    assert s.value() == 42 and b.num_entries("v") == 0


def test_list_state(make):
    b = make(MAX_P, FULL)
    s = b.get_state(ListStateDescriptor("l"))
    b.set_current_key(1)
    s.add("a")
    s.add_all(["b", "c"])
    with pytest.raises(ValueError, match="cannot add None"):
        s.add(None)
    with pytest.raises(ValueError, match="None elements"):
        s.add_all(["d", None])
    b.set_current_key(2)
    s.add("z")
    b.set_current_key(1)
    got = s.get()
    assert got == ["a", "b", "c"]
    got.append("mutated outside")  # a copy: state unchanged
    b.set_current_key(2)
    b.set_current_key(1)
    assert s.get() == ["a", "b", "c"]
    s.update(["x"])
    assert s.get() == ["x"]
    s.update([])
    assert s.get() is None and b.num_entries("l") == 1


def test_reducing_and_aggregating_state(make):
    b = make(MAX_P, FULL)
    r = b.get_state(ReducingStateDescriptor("r", _add))
    a = b.get_state(AggregatingStateDescriptor("a", SumToStr()))
    for key in ("k1", "k2"):
        b.set_current_key(key)
        for i in range(1, 4):
            r.add(i)
            a.add(i * 10)
    b.set_current_key("k1")
    assert r.get() == 6 and a.get() == "60"
    with pytest.raises(ValueError):
        r.add(None)
    r.clear()
    assert r.get() is None and a.get() == "60"


def test_map_state(make):
    b = make(MAX_P, FULL)
    m = b.get_state(MapStateDescriptor("m"))
    b.set_current_key("k")
    m.put("a", 1)
    m.put_all({"b": 2, (1, 2): [3]})
    m.put("n", None)
    assert m.get("a") == 1 and m.get((1, 2)) == [3] and m.contains("n") and m.get("n") is None
    b.set_current_key("other")
    assert m.is_empty()
    b.set_current_key("k")
    m.remove("a")
    assert sorted(map(repr, m.keys())) == sorted(map(repr, ["b", (1, 2), "n"]))
    for k in list(m.keys()):
        m.remove(k)
    assert m.is_empty() and b.num_entries("m") == 0


def test_namespaces_and_merge(make):
    b = make(MAX_P, FULL)
    for d, expected in (
        (ListStateDescriptor("l"), [1, 2, 3]),
        (ReducingStateDescriptor("r", _add), 6),
        (AggregatingStateDescriptor("a", SumToStr()), "6"),
    ):
        h = b.get_partitioned_state("w1", d)
        b.set_current_key("k")
        for ns, x in (("w1", 1), ("w2", 2), ("w3", 3)):
            h.set_current_namespace(ns)
            h.add(x)
        h.merge_namespaces("t", ["w1", "w2", "w3", "missing"])
        h.set_current_namespace("t")
        got = h.get()
        assert (sorted(got) if isinstance(got, list) else got) == expected
        for ns in ("w1", "w2", "w3"):
            h.set_current_namespace(ns)
            assert h.get() is None
        assert list(b.get_keys(d.name, "t")) == ["k"] and list(b.get_keys(d.name, "w1")) == []


def test_snapshot_isolation(make):
    b = make(MAX_P, FULL)
    v, lst, m = (
        b.get_state(ValueStateDescriptor("v")),
        b.get_state(ListStateDescriptor("l")),
        b.get_state(MapStateDescriptor("m")),
    )
    b.set_current_key("k")
    v.update([1])
    lst.add([1])
    m.put("a", {"x": 1})
    snap = b.snapshot()
    lst.add([2])
    m.put("b", 2)
    v.update([9])
    b.set_current_key("j")
    v.update(5)
    kg = assign_to_key_group("k", MAX_P)
    assert snap.key_groups[kg]["l"]["VoidNamespace"]["k"] == [[1]]
    assert snap.key_groups[kg]["m"]["VoidNamespace"]["k"] == {"a": {"x": 1}}
    assert snap.key_groups[kg]["v"]["VoidNamespace"]["k"] == [1]
    assert assign_to_key_group("j", MAX_P) not in snap.key_groups or "j" not in str(snap.key_groups)


@pytest.mark.parametrize("target", list(FACTORIES))
def test_restore_round_trip_across_backends(make, target):
    b = make(MAX_P, FULL)
    v = b.get_state(ValueStateDescriptor("v", serializer=INT))
    m = b.get_state(MapStateDescriptor("m", key_serializer=STR, value_serializer=INT))
    lst = b.get_partitioned_state("ns", ListStateDescriptor("l"))
    for i in range(200):
        b.set_current_key(f"k{i}")
        v.update(i)
        m.put(str(i), -i)
        lst.add_all([i, (i, "t")])
    snap = b.snapshot()
    r = FACTORIES[target](MAX_P, FULL)
    r.restore([snap])
    assert r.registered_state_names() == ["l", "m", "v"]
    assert r.num_entries() == 600
    v2 = r.get_state(ValueStateDescriptor("v", serializer=INT))
    m2 = r.get_state(MapStateDescriptor("m", key_serializer=STR, value_serializer=INT))
    l2 = r.get_partitioned_state("ns", ListStateDescriptor("l"))
    for i in range(200):
        r.set_current_key(f"k{i}")
        assert (v2.value(), m2.items(), l2.get()) == (i, [(str(i), -i)], [i, (i, "t")])
    assert r.snapshot().key_groups == snap.key_groups


def test_restore_refusals(make):
    b = make(MAX_P, FULL)
    b.get_state(ValueStateDescriptor("v", serializer=INT))
    b.set_current_key("k")
    b.get_state(ValueStateDescriptor("v", serializer=INT)).update(1)
    b.get_state(ListStateDescriptor("l")).add(1)
    snap = b.snapshot()
    r = make(MAX_P, FULL)
    r.restore([snap])
    with pytest.raises(IncompatibleSerializerError, match="'v'.*'int64'.*'msgpack'"):
        r.get_state(ValueStateDescriptor("v"))
    with pytest.raises(StateRestoreError, match="'l' was checkpointed as a list state"):
        r.get_state(ValueStateDescriptor("l"))
    with pytest.raises(StateRestoreError, match="cannot be restored as TTL"):
        r.get_state(ListStateDescriptor("l").enable_time_to_live(StateTtlConfig(10)))
    r.set_current_key("k")
    assert r.get_state(ValueStateDescriptor("v", serializer=INT)).value() == 1  # failures lost nothing
    with pytest.raises(StateRestoreError, match="max parallelism can never change"):
        make(256, KeyGroupRange(0, 255)).restore([snap])
    with pytest.raises(StateRestoreError, match="fresh backend"):
        r.restore([snap])


def test_key_outside_the_range_raises(make):
    kgr = compute_key_group_range_for_operator_index(MAX_P, 4, 1)
    b = make(MAX_P, kgr)
    inside = next(f"k{i}" for i in range(1000) if assign_to_key_group(f"k{i}", MAX_P) in kgr)
    outside = next(f"k{i}" for i in range(1000) if assign_to_key_group(f"k{i}", MAX_P) not in kgr)
    b.set_current_key(inside)
    with pytest.raises(KeyGroupOutOfRangeError, match=f"key '{outside}' belongs to key group"):
        b.set_current_key(outside)
    assert b.get_current_key() == inside
    # restore keeps only owned key groups
    full = make(MAX_P, FULL)
    s = full.get_state(ValueStateDescriptor("v"))
    for k in (inside, outside):
        full.set_current_key(k)
        s.update(1)
    part = make(MAX_P, kgr)
    part.restore([full.snapshot()])
    assert list(part.get_keys("v")) == [inside]


def test_unknown_state_queries_fail(make):
    b = make(MAX_P, FULL)
    with pytest.raises(KeyError, match="no state named 'x'"):
        b.get_keys("x")


# ------------------------------------------------------------------ TTL

TTL_TYPES = {
    "value": (lambda: ValueStateDescriptor("s"), lambda h, x: h.update(x), lambda h: h.value(), lambda x: x),
    "list": (lambda: ListStateDescriptor("s"), lambda h, x: h.add(x), lambda h: h.get(), lambda x: [x]),
    "reducing": (
        lambda: ReducingStateDescriptor("s", _add),
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


def _ttl_setup(make, kind, **cfg):
    clock = ManualClock()
    b = make(MAX_P, FULL, clock)
    mk, write, read, shown = TTL_TYPES[kind]
    h = b.get_state(mk().enable_time_to_live(StateTtlConfig(TTL, **cfg)))
    b.set_current_key("key")
    return clock, b, h, lambda x: write(h, x), lambda: read(h), shown


@pytest.mark.parametrize("kind", list(TTL_TYPES))
def test_ttl_expiry_on_write_read_and_relaxed_visibility(make, kind):
    clock, b, h, write, read, shown = _ttl_setup(make, kind)
    write(5)
    clock.set(99)
    assert read() == shown(5)
    clock.set(100)
    assert read() is None and b.num_entries() == 0  # expired exactly at ts + ttl, and cleared

    clock, b, h, write, read, shown = _ttl_setup(make, kind, update_type=UpdateType.OnReadAndWrite)
    write(5)
    clock.set(60)
    assert read() == shown(5)
    clock.set(150)
    assert read() == shown(5)  # the read at 60 refreshed it
    clock.set(250)
    assert read() is None

    clock, b, h, write, read, shown = _ttl_setup(
        make, kind, state_visibility=StateVisibility.ReturnExpiredIfNotCleanedUp, incremental_cleanup=None
    )
    write(5)
    clock.set(120)
    assert read() == shown(5)
    assert read() is None


def test_ttl_reducing_shares_one_timestamp_and_lists_maps_expire_per_element(make):
    clock, b, h, write, read, _ = _ttl_setup(make, "reducing")
    write(5)
    clock.set(50)
    write(7)
    clock.set(120)
    assert read() == 12
    clock.set(170)
    write(6)
    clock.set(220)
    assert read() == 6
    clock.set(300)
    assert read() is None

    clock, b, h, write, read, _ = _ttl_setup(make, "list")
    write("a")
    clock.set(50)
    write("b")
    clock.set(120)
    assert read() == ["b"]

    clock, b, h, *_ = _ttl_setup(make, "map")
    h.put("a", 1)
    clock.set(50)
    h.put("b", 2)
    clock.set(120)
    assert h.items() == [("b", 2)] and not h.contains("a")
    clock.set(150)
    assert not h.is_empty()  # as Flink's TtlMapState.isEmpty: the expired "b" is still stored
    assert h.items() == [] and h.is_empty() and b.num_entries() == 0  # reading it cleaned it up


@pytest.mark.parametrize("kind", list(TTL_TYPES))
def test_ttl_timestamps_survive_snapshot_and_restore(make, kind):
    clock, b, h, write, read, shown = _ttl_setup(make, kind)
    write(5)
    clock.set(50)
    snap = b.snapshot()
    write(7)
    for target in FACTORIES.values():
        r = target(MAX_P, FULL, clock)
        r.restore([snap])
        mk, _, rd, _ = TTL_TYPES[kind]
        h2 = r.get_state(mk().enable_time_to_live(StateTtlConfig(TTL)))
        r.set_current_key("key")
        clock.set(60)
        assert rd(h2) == shown(5)
        clock.set(100)
        assert rd(h2) is None


def test_ttl_full_snapshot_cleanup(make):
    clock = ManualClock()
    b = make(MAX_P, FULL, clock)
    cfg = StateTtlConfig.new_builder(TTL).cleanup_full_snapshot().disable_cleanup_in_background().build()
    lst = b.get_state(ListStateDescriptor("l").enable_time_to_live(cfg))
    for t in range(0, 300, 3):
        clock.set(t)
        b.set_current_key(t % 11)
        lst.add(t)
    snap = b.snapshot()
    elems = [tv for g in snap.key_groups.values() for ks in g["l"].values() for v in ks.values() for tv in v]
    assert elems and all(isinstance(tv, TtlValue) and tv.timestamp + TTL > 297 for tv in elems)


def test_ttl_incremental_cleanup_per_record(make):
    clock = ManualClock()
    b = make(MAX_P, FULL, clock)
    cfg = StateTtlConfig.new_builder(TTL).cleanup_incrementally(10, run_cleanup_for_every_record=True).build()
    h = b.get_state(ValueStateDescriptor("s").enable_time_to_live(cfg))
    for k in range(100):
        b.set_current_key(k)
        h.update(k)
    clock.set(500)
    for _ in range(30):
        b.set_current_key("live")
        h.update(1)
    assert b.num_entries() == 1


def test_compaction_sweep_drops_expired_values_without_reads():
    clock = ManualClock()
    b = _disk(MAX_P, FULL, clock)
    cfg = (
        StateTtlConfig.new_builder(TTL)
        .disable_cleanup_in_background()
        .cleanup_in_compaction_filter(7)
        .build()
    )
    v = b.get_state(ValueStateDescriptor("v").enable_time_to_live(cfg))
    m = b.get_state(MapStateDescriptor("m").enable_time_to_live(cfg))
    plain = b.get_state(ValueStateDescriptor("plain"))
    for i in range(100):
        clock.set(i)
        b.set_current_key(i)
        v.update(i)
        m.put("old", i)
        plain.update(i)
    clock.set(150)
    b.set_current_key(99)
    m.put("new", 1)
    assert b.num_entries() == 300
    assert b.compact_expired() == 51 + 51  # ts <= 50 expired at 150: 51 values and 51 maps
    assert b.num_entries("v") == 49 and b.num_entries("m") == 49 and b.num_entries("plain") == 100
    clock.set(199)
    assert b.compact_expired() == 49 + 49  # values 51..99; maps 51..98 gone, map 99 loses "old"
    assert b.num_entries("v") == 0 and b.num_entries("m") == 1
    b.set_current_key(99)
    assert m.items() == [("new", 1)] and plain.value() == 99


def test_compaction_sweep_runs_by_itself_every_n_records():
    clock = ManualClock()
    b = OnDiskKeyedStateBackend(MAX_P, FULL, clock, compaction_interval_records=50)
    _open.append(b)
    cfg = (
        StateTtlConfig.new_builder(TTL).disable_cleanup_in_background().cleanup_in_compaction_filter().build()
    )
    v = b.get_state(ValueStateDescriptor("v").enable_time_to_live(cfg))
    for i in range(40):
        b.set_current_key(i)
        v.update(i)
    clock.set(1000)
    for _ in range(20):  # 60 records in all: one sweep at the 50th
        b.set_current_key("live")
        v.update(1)
    assert b.num_entries() == 1


# ------------------------------------------------------------------ rescaling through storage


def _write_checkpoint(storage, cid, p, contents, factory, incremental=False, backends=None):
    handles, made = [], []
    for i in range(p):
        kgr = compute_key_group_range_for_operator_index(MAX_P, p, i)
        b = factory(MAX_P, kgr)
        s = b.get_state(ValueStateDescriptor("v"))
        lst = b.get_state(ListStateDescriptor("l"))
        for k, val in contents.items():
            if assign_key_to_parallel_operator(k, MAX_P, p) == i:
                b.set_current_key(k)
                s.update(val)
                lst.add_all([val, -val])
        if incremental:
            handles.append(b.checkpoint_incremental(storage, "job", cid, "op", i, p).handle)
        else:
            snap = SubtaskStateSnapshot("op", i, p, MAX_P, b.snapshot())
            handles.append(storage.write_subtask_state("job", cid, snap))
        made.append(b)
    chk = storage.finalize_checkpoint(
        "job", cid, handles, {"op": {"parallelism": p, "max_parallelism": MAX_P}}
    )
    return chk, made


def _restore_all(chk, new_p, factory):
    contents = {}
    for a in assign_state(chk, "op", new_p):
        r = restore_subtask(chk, a, MAX_P)
        b = factory(MAX_P, a.key_group_range)
        b.restore(r.keyed)
        s = b.get_state(ValueStateDescriptor("v"))
        lst = b.get_state(ListStateDescriptor("l"))
        for k in b.get_keys("v"):
            assert k not in contents and assign_key_to_parallel_operator(k, MAX_P, new_p) == a.subtask_index
            b.set_current_key(k)
            assert lst.get() == [s.value(), -s.value()]
            contents[k] = s.value()
    return contents


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
@pytest.mark.parametrize(("old_p", "new_p"), [(4, 2), (2, 4), (2, 2), (15, 77), (77, 15)])
def test_rescale_through_checkpoint_storage(tmp_path, make, old_p, new_p, incremental):
    if incremental and make is _heap:
        pytest.skip("incremental checkpoints are an on-disk backend feature")
    contents = {f"key-{i}": i for i in range(1500)}
    chk, _ = _write_checkpoint(FileSystemCheckpointStorage(tmp_path), 1, old_p, contents, make, incremental)
    validate_checkpoint(chk.directory)
    assert _restore_all(chk, new_p, make) == contents
    while _open:  # 77 databases at once is wasteful: release them between phases
        _open.pop().close()
    assert _restore_all(chk, new_p, _disk if make is _heap else _heap) == contents


# ------------------------------------------------------------------ incremental checkpoints


def _filled(n_keys: int, value_bytes: int = 100) -> tuple[OnDiskKeyedStateBackend, object, object]:
    b = _disk(MAX_P, FULL)
    v = b.get_state(ValueStateDescriptor("v"))
    m = b.get_state(MapStateDescriptor("m"))
    for i in range(n_keys):
        b.set_current_key(i)
        v.update("x" * value_bytes)
        if i % 10 == 0:
            m.put(i, [i])
    return b, v, m


def _finalize(st, cid, handle):
    return st.finalize_checkpoint("job", cid, [handle], {"op": {"parallelism": 1, "max_parallelism": MAX_P}})


def test_incremental_after_1_percent_change_writes_at_most_10_percent(tmp_path):
    n = 20_000
    b, v, m = _filled(n)
    st = FileSystemCheckpointStorage(tmp_path / "inc")
    first = b.checkpoint_incremental(st, "job", 1, "op", 0, 1)
    _finalize(st, 1, first.handle)
    full = FileSystemCheckpointStorage(tmp_path / "full").write_subtask_state(
        "job", 1, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot())
    )
    assert first.key_groups_written == MAX_P
    rng = random.Random(7)
    changed = rng.sample(range(n), n // 100)
    for i in changed:
        b.set_current_key(i)
        v.update("y" * 100)
    b.set_current_key(changed[0])
    m.clear()
    second = b.checkpoint_incremental(st, "job", 2, "op", 0, 1)
    chk2 = _finalize(st, 2, second.handle)
    assert second.bytes_written <= 0.10 * full.size, (second.bytes_written, full.size)
    assert second.files_reused >= MAX_P
    # what the incremental checkpoint restores is exactly the backend's state
    got, _ = read_subtask_state(validate_checkpoint(chk2.directory), chk2.files[0])
    assert got.keyed.key_groups == b.snapshot().key_groups
    # an unchanged backend writes only the manifest
    third = b.checkpoint_incremental(st, "job", 3, "op", 0, 1)
    assert third.files_written == 0 and third.bytes_written == third.handle.size


@pytest.mark.slow
def test_delta_chains_are_compacted_and_restore_equal(tmp_path):
    b, v, m = _filled(2000, 20)
    st = FileSystemCheckpointStorage(tmp_path)
    for cid in range(1, 30):
        for i in range(cid * 37 % 2000, 2000, 97):
            b.set_current_key(i)
            v.update(f"c{cid}")
            if i % 3 == 0:
                v.clear()
        chk = _finalize(st, cid, b.checkpoint_incremental(st, "job", cid, "op", 0, 1).handle)
        st.retain("job", 2)
        view = inspect_checkpoint(chk.directory)
        assert view.operators["op"].keyed == b.snapshot().key_groups
    chains = [len(c) for c in b._chains.values()]
    assert max(chains) <= 17  # rewritten as a base before the chain grows without bound


def test_retention_keeps_shared_files_still_referenced(tmp_path):
    b, v, _ = _filled(3000)
    st = FileSystemCheckpointStorage(tmp_path)
    shared = tmp_path / "job" / "shared"
    _finalize(st, 1, b.checkpoint_incremental(st, "job", 1, "op", 0, 1).handle)
    files_1 = {p.name for p in shared.iterdir()}
    b.set_current_key(5)
    v.update("changed")
    _finalize(st, 2, b.checkpoint_incremental(st, "job", 2, "op", 0, 1).handle)
    assert st.retain("job", 1) == [1]
    assert files_1 <= {p.name for p in shared.iterdir()}  # chk 2 still references all of them
    chk2 = validate_checkpoint(tmp_path / "job" / "chk-2")
    got, _ = read_subtask_state(chk2, chk2.files[0])
    assert got.keyed.key_groups == b.snapshot().key_groups
    # a base rewrite makes older files unreferenced: the next retention deletes exactly those
    for i in range(3000):
        b.set_current_key(i)
        v.update("z" * 200)  # deltas would outgrow the bases
    _finalize(st, 3, b.checkpoint_incremental(st, "job", 3, "op", 0, 1).handle)
    st.retain("job", 1)
    in_use = {p.name for p in shared.iterdir()}
    assert not (files_1 & in_use)
    validate_checkpoint(tmp_path / "job" / "chk-3")
    # a pending checkpoint (no _metadata yet) keeps its files too
    b.set_current_key(1)
    v.update("pending")
    pending = b.checkpoint_incremental(st, "job", 4, "op", 0, 1)
    st.retain("job", 0)
    assert st.list_checkpoints("job") == []
    assert len(list(shared.iterdir())) >= pending.files_written + pending.files_reused - 1
    validate_checkpoint(_finalize(st, 4, pending.handle).directory)


def test_flipped_byte_in_a_shared_file_is_detected_and_named(tmp_path):
    b, v, _ = _filled(500)
    st = FileSystemCheckpointStorage(tmp_path)
    _finalize(st, 1, b.checkpoint_incremental(st, "job", 1, "op", 0, 1).handle)
    b.set_current_key(1)
    v.update("new")
    chk2 = _finalize(st, 2, b.checkpoint_incremental(st, "job", 2, "op", 0, 1).handle)
    kg = assign_to_key_group(1, MAX_P)
    victim = next(p for p in (tmp_path / "job" / "shared").iterdir() if f"-kg{kg}-delta-" in p.name)
    original = victim.read_bytes()
    for i in (0, len(original) // 2, len(original) - 1):
        victim.write_bytes(original[:i] + bytes([original[i] ^ 0x10]) + original[i + 1 :])
        with pytest.raises(CheckpointError, match=victim.name):
            validate_checkpoint(chk2.directory)
        with pytest.raises(CheckpointError, match=victim.name):
            read_subtask_state(chk2, chk2.files[0], KeyGroupRange(kg, kg))
        report = st.restore_latest("job")
        assert report.checkpoint.checkpoint_id == 1 and victim.name in report.skipped[0][1]
    victim.write_bytes(original[:-3])
    with pytest.raises(CheckpointError, match=f"{victim.name}.*truncated"):
        validate_checkpoint(chk2.directory)
    victim.unlink()
    with pytest.raises(CheckpointError, match=f"{victim.name}: missing"):
        validate_checkpoint(chk2.directory)
    # reading other key groups does not need the damaged file
    other = KeyGroupRange(0, 0) if kg != 0 else KeyGroupRange(1, 1)
    read_subtask_state(chk2, chk2.files[0], other)


# ------------------------------------------------------------------ lifecycle


def test_close_removes_the_temp_dir_and_context_manager(tmp_path):
    with OnDiskKeyedStateBackend(MAX_P, FULL, ManualClock()) as b:
        d = b.directory
        b.set_current_key("k")
        b.get_state(ValueStateDescriptor("v")).update(1)
        assert d.is_dir()
    assert not d.exists() and b.closed
    kept = OnDiskKeyedStateBackend(MAX_P, FULL, ManualClock(), directory=tmp_path / "db")
    kept.close()
    assert (tmp_path / "db").is_dir()  # a directory the caller gave is the caller's
    gone = OnDiskKeyedStateBackend(MAX_P, FULL, ManualClock())
    d2: Path = gone.directory
    del gone
    import gc

    gc.collect()
    assert not d2.exists()


def test_temp_dirs_go_to_the_local_dir_when_one_is_named(tmp_path, monkeypatch):
    """``STATECHAOS_ROCKSDB_LOCALDIR`` (Flink's ``state.backend.rocksdb.localdir``; the suites point it at
    RAM) holds the default temp dirs, made when missing; each is still removed on close."""
    from reference_impl.state.ondisk_backend import LOCAL_DIR_ENV

    monkeypatch.setenv(LOCAL_DIR_ENV, str(tmp_path / "local"))
    with OnDiskKeyedStateBackend(MAX_P, FULL, ManualClock()) as b:
        assert b.directory.parent == tmp_path / "local" and b.directory.is_dir()
    assert (tmp_path / "local").is_dir() and not list((tmp_path / "local").iterdir())
