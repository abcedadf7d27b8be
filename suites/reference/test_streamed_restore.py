"""Streamed restores (key groups handed to a heap backend as each is verified and decoded, as Flink's
heap restore reads them) give exactly what the collect-then-restore path gives, for every file
version and for rescaled key-group ranges; a damaged file still raises, naming it; and the writer
that syncs large state files in the background writes every byte and never loses a sync error."""

from __future__ import annotations

import io
import os
import threading

import pytest

from reference_impl.checkpoint import CheckpointError, FileSystemCheckpointStorage, read_subtask_state
from reference_impl.checkpoint.format import decode_subtask_state, encode_row_format
from reference_impl.checkpoint.syncing import SyncingWriter
from reference_impl.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from reference_impl.serializers import BYTES
from reference_impl.snapshot import StateRestoreError, SubtaskStateSnapshot
from reference_impl.state import (
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig

MAX_P = 128
ALL = KeyGroupRange(0, MAX_P - 1)
OPS = {"op": {"parallelism": 1, "max_parallelism": MAX_P}}


def _fill(b, n: int = 600):
    raw = b.get_state(ValueStateDescriptor("raw", serializer=BYTES))
    ttl = b.get_state(ValueStateDescriptor("ttl").enable_time_to_live(StateTtlConfig(10_000)))
    lst = b.get_state(ListStateDescriptor("seen"))
    mp = b.get_state(MapStateDescriptor("m"))
    win = b.get_partitioned_state("window-1", ValueStateDescriptor("count", default=0))
    for i in range(n):
        b.set_current_key(i if i % 2 else f"k{i}")
        raw.update(bytes([i % 251]) * (i % 40 + 1))
        ttl.update(f"v{i}")
        lst.add(i)
        mp.put(i % 3, {"a": [i]})
        if i % 3 == 0:
            win.update(-i)
    return b


def _checkpoint(tmp_path, snap: SubtaskStateSnapshot):
    st = FileSystemCheckpointStorage(tmp_path)
    h = st.write_subtask_state("job", 1, snap)
    return st.finalize_checkpoint("job", 1, [h], OPS), h


def _eager(chk, h, kgr: KeyGroupRange = ALL) -> HeapKeyedStateBackend:
    got, _ = read_subtask_state(chk, h, kgr)
    r = HeapKeyedStateBackend(MAX_P, kgr, ManualClock(1000))
    r.restore([got.keyed])
    return r


def _streamed(chk, h, kgr: KeyGroupRange = ALL) -> tuple[HeapKeyedStateBackend, SubtaskStateSnapshot, int]:
    r = HeapKeyedStateBackend(MAX_P, kgr, ManualClock(1000))
    got, read = read_subtask_state(chk, h, kgr, load_into=r.key_group_restorer)
    return r, got, read


def test_streamed_restore_equals_collected_restore(tmp_path):
    b = _fill(HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000)))
    chk, h = _checkpoint(tmp_path, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
    r, got, read = _streamed(chk, h)
    assert got.keyed.key_groups == {}  # handed over, not collected
    assert read == h.size
    assert (
        r.snapshot(1000).key_groups == _eager(chk, h).snapshot(1000).key_groups == b.snapshot(1000).key_groups
    )
    r.set_current_key("k4")  # and it is live state
    assert r.get_state(ValueStateDescriptor("raw", serializer=BYTES)).value() == bytes([4]) * 5
    lst = r.get_state(ListStateDescriptor("seen"))
    lst.add(-1)
    assert list(lst.get()) == [4, -1]


def test_streamed_restore_of_a_rescaled_range_keeps_only_owned_key_groups(tmp_path):
    b = _fill(HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000)), 2000)
    chk, h = _checkpoint(tmp_path, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
    kgr = compute_key_group_range_for_operator_index(MAX_P, 3, 1)
    r, _, read = _streamed(chk, h, kgr)
    assert read < h.size / 3 * 1.3
    snap = r.snapshot(1000).key_groups
    assert set(snap) <= set(kgr) and snap
    assert snap == _eager(chk, h, kgr).snapshot(1000).key_groups


def test_version_1_and_incremental_files_stream_too(tmp_path):
    b = _fill(HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000)), 300)
    v1 = encode_row_format(SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
    r = HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000))
    decode_subtask_state(io.BytesIO(v1), "op-0.state", load_into=r.key_group_restorer)
    assert r.snapshot(1000).key_groups == b.snapshot(1000).key_groups

    with OnDiskKeyedStateBackend(MAX_P, ALL, ManualClock(1000)) as d:
        _fill(d, 300)
        st = FileSystemCheckpointStorage(tmp_path)
        inc = d.checkpoint_incremental(st, "job", 1, "op", 0, 1)
        chk = st.finalize_checkpoint("job", 1, [inc.handle], OPS)
        r, got, _ = _streamed(chk, inc.handle)
        assert got.keyed.key_groups == {}
        assert r.snapshot(1000).key_groups == d.snapshot(1000).key_groups


def test_a_damaged_section_raises_naming_the_file(tmp_path):
    b = _fill(HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000)), 2000)
    chk, h = _checkpoint(tmp_path, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
    path = chk.directory / h.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # in a key group section half way through the stream
    path.write_bytes(bytes(data))
    loaded: list[int] = []

    def into(header):
        load = r.key_group_restorer(header)
        return lambda kg, per_state: (loaded.append(kg), load(kg, per_state))

    r = HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000))
    with pytest.raises(CheckpointError, match=f"{h.path}: checksum mismatch in section"):
        read_subtask_state(chk, h, load_into=into)
    assert 0 < len(loaded) < MAX_P  # the key groups before the damage were handed over, then it raised


def test_streaming_into_a_used_or_mismatched_backend_is_refused(tmp_path):
    b = _fill(HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000)), 50)
    chk, h = _checkpoint(tmp_path, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
    used = HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000))
    used.get_state(ValueStateDescriptor("x"))
    with pytest.raises(StateRestoreError, match="fresh backend"):
        read_subtask_state(chk, h, load_into=used.key_group_restorer)
    other = HeapKeyedStateBackend(256, KeyGroupRange(0, 255), ManualClock(1000))
    with pytest.raises(StateRestoreError, match="max parallelism can never change"):
        read_subtask_state(chk, h, load_into=other.key_group_restorer)


def test_collected_restore_does_not_share_mutable_values_with_the_snapshot():
    b = _fill(HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000)), 50)
    snap = b.snapshot(1000)
    r = HeapKeyedStateBackend(MAX_P, ALL, ManualClock(1000))
    r.restore([snap])
    mp = r.get_state(MapStateDescriptor("m"))
    r.set_current_key("k0")
    mp.get(0)["a"].append("changed")
    assert b.snapshot(1000).key_groups == snap.key_groups


def _sync_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "state-file-sync"]


def test_syncing_writer_writes_every_byte_in_order(tmp_path):
    chunks = [os.urandom(n) for n in (1, 5000, 70_000, 3, 200_000)]
    path = tmp_path / "f"
    with open(path, "wb", buffering=0) as fh, SyncingWriter(fh.fileno(), sync_every=64 << 10) as out:
        for c in chunks:
            out.write(memoryview(c))
        assert out.written == sum(map(len, chunks))
    assert path.read_bytes() == b"".join(chunks)
    assert not _sync_threads()


def test_a_failed_background_sync_is_raised_not_lost():
    r, w = os.pipe()  # fdatasync on a pipe fails (EINVAL)
    try:
        out = SyncingWriter(w, sync_every=1)
        out.write(b"x")  # asks for a sync, which fails in the background
        with pytest.raises(OSError, match="background fdatasync failed"):
            out.close(sync=False)
        assert not _sync_threads()
        with pytest.raises(OSError, match="background fdatasync failed"):
            out.write(b"y")
    finally:
        os.close(r)
        os.close(w)


def test_an_error_inside_the_block_stops_the_sync_thread_and_propagates(tmp_path):
    with open(tmp_path / "f", "wb", buffering=0) as fh:
        with pytest.raises(RuntimeError, match="encoding failed"):
            with SyncingWriter(fh.fileno(), sync_every=1) as out:
                out.write(b"abc")
                raise RuntimeError("encoding failed")
    assert not _sync_threads()
