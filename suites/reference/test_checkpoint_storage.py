"""Checkpoint storage: round trips of keyed (incl. TTL) and operator state, reads of only the owned
key groups, ``_metadata`` as the commit point, and a damage matrix: every single-byte flip and every
truncation of every file of a sample checkpoint is detected, and restore falls back to the newest
intact checkpoint."""

from __future__ import annotations

import pytest

from reference_impl.checkpoint import CheckpointError, FileSystemCheckpointStorage, read_subtask_state
from reference_impl.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from reference_impl.serializers import PickleSerializer
from reference_impl.snapshot import (
    OperatorStateEntry,
    OperatorStateMode,
    OperatorStateSnapshot,
    SubtaskStateSnapshot,
)
from reference_impl.state import (
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig

MAX_P = 128


def _subtask(n_keys: int = 300, ttl: bool = True) -> SubtaskStateSnapshot:
    clock = ManualClock(1000)
    b = HeapKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), clock)
    v = ValueStateDescriptor("count", default=0)
    if ttl:
        v.enable_time_to_live(StateTtlConfig(10_000))
    cnt, lst, mp = (
        b.get_state(v),
        b.get_state(ListStateDescriptor("seen")),
        b.get_state(MapStateDescriptor("m")),
    )
    for i in range(n_keys):
        b.set_current_key(f"k{i}")
        cnt.update(i)
        lst.add((i, "x"))
        mp.put(i % 3, {"a": [i]})
    op = OperatorStateSnapshot(
        {
            "offsets": OperatorStateEntry("offsets", OperatorStateMode.SPLIT_DISTRIBUTE, value=[1, 2, 3]),
            "rules": OperatorStateEntry(
                "rules", OperatorStateMode.BROADCAST, key_serializer="msgpack", value={"r": 1}
            ),
        }
    )
    return SubtaskStateSnapshot("count", 0, 1, MAX_P, b.snapshot(), op)


def _checkpoint(tmp_path, cid=1, n_keys=300):
    st = FileSystemCheckpointStorage(tmp_path)
    h = st.write_subtask_state("job", cid, _subtask(n_keys))
    chk = st.finalize_checkpoint(
        "job",
        cid,
        [h],
        {"count": {"parallelism": 1, "max_parallelism": MAX_P}},
        extra={"source_offsets": {"0": 42}},
    )
    return st, chk


def test_round_trip_and_layout(tmp_path):
    st, chk = _checkpoint(tmp_path)
    assert (tmp_path / "job" / "chk-1" / "_metadata").is_file()
    assert (tmp_path / "job" / "shared").is_dir() and (tmp_path / "job" / "taskowned").is_dir()
    assert chk.extra == {"source_offsets": {"0": 42}}
    original = _subtask()
    got, _ = read_subtask_state(chk, chk.files[0])
    assert got.keyed.key_groups == original.keyed.key_groups
    assert got.keyed.states == original.keyed.states
    assert got.operator.states == original.operator.states
    r = HeapKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), ManualClock(2000))
    r.restore([got.keyed])
    c = r.get_state(ValueStateDescriptor("count", default=0).enable_time_to_live(StateTtlConfig(10_000)))
    r.set_current_key("k7")
    assert c.value() == 7


def test_restore_reads_only_owned_key_groups(tmp_path):
    st, chk = _checkpoint(tmp_path, n_keys=2000)
    _, total = read_subtask_state(chk, chk.files[0])
    kgr = compute_key_group_range_for_operator_index(MAX_P, 8, 3)
    part, read = read_subtask_state(chk, chk.files[0], kgr)
    assert set(part.keyed.key_groups) <= set(kgr)
    assert read < total / 8 * 1.5


def test_checkpoint_without_metadata_does_not_exist(tmp_path):
    st, _ = _checkpoint(tmp_path, 1)
    st.write_subtask_state("job", 2, _subtask())  # never finalized
    assert st.list_checkpoints("job") == [1]
    report = st.restore_latest("job")
    assert report.checkpoint.checkpoint_id == 1
    assert "no _metadata" in report.skipped[0][1]


def test_retention_deletes_old_checkpoints(tmp_path):
    st = FileSystemCheckpointStorage(tmp_path)
    for cid in range(1, 5):
        h = st.write_subtask_state("job", cid, _subtask(20))
        st.finalize_checkpoint("job", cid, [h], {})
    assert st.retain("job", 2) == [1, 2]
    assert st.list_checkpoints("job") == [3, 4]


def test_pickle_is_refused_by_default(tmp_path):
    from reference_impl.serializers import register_serializer

    register_serializer(PickleSerializer())
    snap = _subtask(5, ttl=False)
    snap.operator.states["obj"] = OperatorStateEntry("obj", OperatorStateMode.UNION, "pickle", value=[{1, 2}])
    st = FileSystemCheckpointStorage(tmp_path)
    h = st.write_subtask_state("job", 1, snap)
    chk = st.finalize_checkpoint("job", 1, [h], {})
    with pytest.raises(CheckpointError, match="count-0.state: .*refusing to unpickle"):
        read_subtask_state(chk, chk.files[0])


def _damage_detected(st, tmp_path) -> bool:
    report = st.restore_latest("job")
    return report.checkpoint is not None and report.checkpoint.checkpoint_id == 1 and len(report.skipped) == 1


@pytest.mark.slow
def test_every_byte_flip_and_truncation_is_detected(tmp_path):
    st = FileSystemCheckpointStorage(tmp_path)
    for cid in (1, 2):
        h = st.write_subtask_state("job", cid, _subtask(6))
        st.finalize_checkpoint("job", cid, [h], {"count": {"parallelism": 1}})
    chk2 = tmp_path / "job" / "chk-2"
    files = sorted(p for p in chk2.iterdir() if p.is_file())
    assert {p.name for p in files} == {"_metadata", "count-0.state"}
    checked = 0
    for f in files:
        original = f.read_bytes()
        for i in range(len(original)):
            f.write_bytes(original[:i] + bytes([original[i] ^ 0x01]) + original[i + 1 :])
            assert _damage_detected(st, tmp_path), f"flip of byte {i} in {f.name} went unnoticed"
            checked += 1
        for n in range(len(original)):
            f.write_bytes(original[:n])
            assert _damage_detected(st, tmp_path), f"truncation of {f.name} to {n} bytes went unnoticed"
            checked += 1
        f.write_bytes(original)
        assert st.restore_latest("job").checkpoint.checkpoint_id == 2
    assert checked > 1000
    (chk2 / "count-0.state").unlink()
    report = st.restore_latest("job")
    assert report.checkpoint.checkpoint_id == 1 and "count-0.state: missing" in report.skipped[0][1]


def test_damaged_state_file_read_directly_names_the_file(tmp_path):
    st, chk = _checkpoint(tmp_path, n_keys=50)
    p = chk.directory / chk.files[0].path
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="count-0.state"):
        read_subtask_state(chk, chk.files[0])
