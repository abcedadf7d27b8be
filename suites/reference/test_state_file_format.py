"""The streamed state file format (version 3, one msgpack map per state and namespace per key group):
round trips through the vectorised heap snapshot split and the bulk restore, reading version-1 files,
damage detection when a file is read directly, and restores that read only the owned key groups."""

from __future__ import annotations

import io

import pytest

from reference_impl.checkpoint import FileSystemCheckpointStorage, read_subtask_state
from reference_impl.checkpoint.format import (
    FORMAT_VERSION,
    CorruptStateFileError,
    decode_subtask_state,
    encode_row_format,
    encode_subtask_state,
)
from reference_impl.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
)
from reference_impl.serializers import BYTES
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.state import (
    VOID_NAMESPACE,
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig

MAX_P = 128


def _keys(n: int) -> list:
    """Mixed key types: ints, strs and tuples (msgpack ext), enough to take the bulk paths."""
    return [k for i in range(n) for k in (i, f"k{i}", (i, "t"))]


def _backend(n: int = 400) -> HeapKeyedStateBackend:
    b = HeapKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), ManualClock(1000))
    raw = b.get_state(ValueStateDescriptor("raw", serializer=BYTES))
    cnt = b.get_state(ValueStateDescriptor("count", default=0))
    ttl = b.get_state(ValueStateDescriptor("ttl").enable_time_to_live(StateTtlConfig(10_000)))
    lst = b.get_state(ListStateDescriptor("seen"))
    mp = b.get_state(MapStateDescriptor("m"))
    other_ns = b.get_partitioned_state("window-1", ValueStateDescriptor("count", default=0))
    for i, k in enumerate(_keys(n)):
        b.set_current_key(k)
        raw.update(bytes([i % 251]) * (i % 50))
        cnt.update(i)
        ttl.update(f"v{i}")
        lst.add(i)
        mp.put(i % 3, {"a": [i]})
        if i % 2:
            other_ns.update(-i)
    return b


def test_snapshot_groups_every_entry_by_its_key_group():
    b = _backend()
    snap = b.snapshot()
    for kg, per_state in snap.key_groups.items():
        for per_ns in per_state.values():
            for m in per_ns.values():
                assert all(assign_to_key_group(k, MAX_P) == kg for k in m)
    total = sum(
        len(m)
        for per_state in snap.key_groups.values()
        for per_ns in per_state.values()
        for m in per_ns.values()
    )
    assert total == b.num_entries()


@pytest.mark.parametrize("max_p", [128, 4096])  # fewer / more key groups than entries
@pytest.mark.parametrize("cached", [True, False])  # key groups known, or computed at snapshot time
def test_split_by_key_group_puts_every_entry_in_its_group(max_p, cached):
    b = HeapKeyedStateBackend(max_p, KeyGroupRange(0, max_p - 1), ManualClock(1000))
    v = b.get_state(ValueStateDescriptor("v"))
    keys = _keys(300)
    for i, k in enumerate(keys):
        b.set_current_key(k)
        v.update(i)
    if not cached:
        b._kg_of.clear()
    snap = b.snapshot()
    got = {k: (kg, val) for kg, ps in snap.key_groups.items() for k, val in ps["v"][VOID_NAMESPACE].items()}
    assert got == {k: (assign_to_key_group(k, max_p), i) for i, k in enumerate(keys)}


def test_snapshot_is_isolated_from_later_updates():
    b = _backend()
    snap = b.snapshot()
    before = {
        kg: {n: {ns: dict(m) for ns, m in p.items()} for n, p in ps.items()}
        for kg, ps in snap.key_groups.items()
    }
    cnt = b.get_state(ValueStateDescriptor("count", default=0))
    for k in _keys(400):
        b.set_current_key(k)
        cnt.update(-1)
    assert snap.key_groups == before


def test_round_trip_and_heap_restore():
    b = _backend()
    original = SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot())
    data = encode_subtask_state(original)
    assert int.from_bytes(data[4:6], "big") == FORMAT_VERSION
    got, read = decode_subtask_state(io.BytesIO(data), "op-0.state")
    assert read == len(data)
    assert got.keyed.key_groups == original.keyed.key_groups
    assert got.keyed.states == original.keyed.states
    r = HeapKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), ManualClock(2000))
    r.restore([got.keyed])
    assert r.num_entries() == b.num_entries()
    raw = r.get_state(ValueStateDescriptor("raw", serializer=BYTES))
    ttl = r.get_state(ValueStateDescriptor("ttl").enable_time_to_live(StateTtlConfig(10_000)))
    mp = r.get_state(MapStateDescriptor("m"))
    r.set_current_key((7, "t"))
    i = 3 * 7 + 2
    assert raw.value() == bytes([i % 251]) * (i % 50)
    assert ttl.value() == f"v{i}"
    assert mp.get(i % 3) == {"a": [i]}
    assert r.snapshot(1000).key_groups == b.snapshot(1000).key_groups


def test_version_1_files_are_still_read():
    original = SubtaskStateSnapshot("op", 0, 1, MAX_P, _backend(100).snapshot())
    data = encode_row_format(original)
    assert int.from_bytes(data[4:6], "big") == 1
    got, _ = decode_subtask_state(io.BytesIO(data), "op-0.state")
    assert got.keyed.key_groups == original.keyed.key_groups


def test_every_damaged_byte_is_detected_when_read_directly():
    """Reading (without the storage's whole-file check first) detects any flipped byte except those of
    the whole-file crc itself, which guard no data (validation checks them)."""
    snap = SubtaskStateSnapshot("op", 0, 1, MAX_P, _backend(3).snapshot())
    data = encode_subtask_state(snap)
    file_crc = range(len(data) - 8, len(data) - 4)
    for i in range(len(data)):
        if i in file_crc:
            continue
        damaged = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
        with pytest.raises(CorruptStateFileError, match="op-0.state"):
            decode_subtask_state(io.BytesIO(damaged), "op-0.state")
    for n in range(len(data) - 1):
        with pytest.raises(CorruptStateFileError, match="op-0.state"):
            decode_subtask_state(io.BytesIO(data[:n]), "op-0.state")


def test_rescaled_restore_reads_only_owned_key_groups(tmp_path):
    b = _backend(1000)
    st = FileSystemCheckpointStorage(tmp_path)
    h = st.write_subtask_state("job", 1, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
    chk = st.finalize_checkpoint("job", 1, [h], {"op": {"parallelism": 1, "max_parallelism": MAX_P}})
    kgr = compute_key_group_range_for_operator_index(MAX_P, 4, 1)
    part, read = read_subtask_state(chk, h, kgr)
    assert set(part.keyed.key_groups) <= set(kgr)
    assert read < h.size / 4 * 1.3
    r = HeapKeyedStateBackend(MAX_P, kgr, ManualClock(1000))
    r.restore([part.keyed])
    owned = [k for k in _keys(1000) if assign_to_key_group(k, MAX_P) in kgr]
    cnt = r.get_state(ValueStateDescriptor("count", default=0))
    assert sorted(map(repr, r.get_keys("count"))) == sorted(map(repr, owned))
    for k in owned[:50]:
        r.set_current_key(k)
        assert cnt.value() == _keys(1000).index(k)


def test_tuples_packed_again_are_the_same_bytes_and_never_another_equal_tuples():
    """Tuples are packed once per identity and reused (a session window's namespace at every
    checkpoint): an equal tuple of other types (1 == 1.0 == True) keeps its own bytes, a tuple
    holding a list that changed is packed anew, and decoding shares only tuples of immutables."""
    from reference_impl.serializers import MSGPACK

    ints, floats, bools = (1, 2), (1.0, 2), (True, 2)
    first = [MSGPACK.dumps(t) for t in (ints, floats, bools)]
    assert len(set(first)) == 3
    assert [MSGPACK.dumps(t) for t in (ints, floats, bools)] == first  # packed again: the same
    assert [type(x) for x in MSGPACK.loads(first[1])] == [float, int]
    assert [type(x) for x in MSGPACK.loads(first[2])] == [bool, int]
    held = [1]
    mutable = ("w", held)
    before = MSGPACK.dumps(mutable)
    held.append(2)
    assert MSGPACK.loads(MSGPACK.dumps(mutable)) == ("w", [1, 2]) != MSGPACK.loads(before)
    decoded = MSGPACK.loads(MSGPACK.dumps(mutable))
    decoded[1].append(3)  # a decoded mutable tuple is the caller's own
    assert MSGPACK.loads(MSGPACK.dumps(mutable)) == ("w", [1, 2])
