"""Checkpoint throughput: writing and reading a subtask's heap state through the state file format,
as a fraction of the machine's sequential disk bandwidth measured in the same run; and the bytes a
subtask reads after a 4 -> 8 rescale, as a fraction of all state; and, for the on-disk backend, an
incremental checkpoint after 1% of keys changed against a full one (bytes and time)."""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

from chaos.bench.core import Figure
from reference_impl.checkpoint import FileSystemCheckpointStorage, read_subtask_state
from reference_impl.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from reference_impl.rescale import assign_state, restore_subtask
from reference_impl.serializers import BYTES
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.state import HeapKeyedStateBackend, ValueStateDescriptor
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock

__all__ = ["run"]

MAX_P = 128


def _disk_bandwidth(d: Path, nbytes: int) -> tuple[float, float]:
    """Sequential write (fsync'd) and read bandwidth in bytes/s with large buffers."""
    path = d / "bandwidth.bin"
    block = os.urandom(4 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        for _ in range(max(1, nbytes // len(block))):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    write = nbytes / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        while fh.read(4 << 20):
            pass
    read = nbytes / (time.perf_counter() - t0)  # page cache, like the state file read below
    path.unlink()
    return write, read


def _backend(n_keys: int, value_bytes: int, kgr: KeyGroupRange) -> HeapKeyedStateBackend:
    b = HeapKeyedStateBackend(MAX_P, kgr, ManualClock())
    s = b.get_state(ValueStateDescriptor("payload", serializer=BYTES))
    payload = os.urandom(value_bytes)
    for i in range(n_keys):
        b.set_current_key(i)
        s.update(payload)
    return b


def _incremental(root: Path, n_keys: int, value_bytes: int) -> list[Figure]:
    """Full vs incremental checkpoint of one on-disk subtask after changing 1% of its keys."""
    ops = {"op": {"parallelism": 1, "max_parallelism": MAX_P}}
    with OnDiskKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), ManualClock()) as b:
        s = b.get_state(ValueStateDescriptor("payload", serializer=BYTES))
        payload = os.urandom(value_bytes)
        for i in range(n_keys):
            b.set_current_key(i)
            s.update(payload)
        storage = FileSystemCheckpointStorage(root / "incremental")
        first = b.checkpoint_incremental(storage, "job", 1, "op", 0, 1)
        storage.finalize_checkpoint("job", 1, [first.handle], ops)
        for i in random.Random(1).sample(range(n_keys), n_keys // 100):
            b.set_current_key(i)
            s.update(os.urandom(value_bytes))
        t0 = time.perf_counter()
        inc = b.checkpoint_incremental(storage, "job", 2, "op", 0, 1)
        storage.finalize_checkpoint("job", 2, [inc.handle], ops)
        inc_s = time.perf_counter() - t0
        full_storage = FileSystemCheckpointStorage(root / "full")
        t0 = time.perf_counter()
        h = full_storage.write_subtask_state("job", 1, SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot()))
        full_storage.finalize_checkpoint("job", 1, [h], ops)
        full_s = time.perf_counter() - t0
    size = {"keys": n_keys, "changed_keys": n_keys // 100, "full_bytes": h.size}
    note = "per-key-group base + delta files in shared/, unchanged files reused"
    return [
        Figure(
            "on-disk incremental / full checkpoint bytes (1% keys changed)",
            inc.bytes_written,
            h.size,
            "bytes",
            "full checkpoint",
            0.1,
            False,
            size,
            note,
        ),
        Figure(
            "on-disk incremental / full checkpoint time (1% keys changed)",
            inc_s,
            full_s,
            "s",
            "full checkpoint",
            None,
            False,
            size,
            note,
        ),
    ]


def run(quick: bool) -> list[Figure]:
    figures = []
    sizes = (
        [(20_000, 1024), (50_000, 1024), (100_000, 1024)]
        if quick
        else [(100_000, 1024), (300_000, 1024), (1_000_000, 1024)]
    )
    with tempfile.TemporaryDirectory(prefix="statechaos-bench-") as tmp:
        root = Path(tmp)
        for n, vb in sizes:
            b = _backend(n, vb, KeyGroupRange(0, MAX_P - 1))
            storage = FileSystemCheckpointStorage(root / f"s{n}")
            t0 = time.perf_counter()
            snap = SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot(), None)
            h = storage.write_subtask_state("job", 1, snap)
            chk = storage.finalize_checkpoint(
                "job", 1, [h], {"op": {"parallelism": 1, "max_parallelism": MAX_P}}
            )
            write_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            got, _ = read_subtask_state(chk, h)
            r = HeapKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), ManualClock())
            r.restore([got.keyed])
            read_s = time.perf_counter() - t0
            disk_w, disk_r = _disk_bandwidth(root, h.size)
            size = {"keys": n, "state_bytes": h.size}
            figures.append(
                Figure(
                    "snapshot write throughput",
                    h.size / write_s,
                    disk_w,
                    "bytes/s",
                    "sequential fsync'd write",
                    0.5,
                    True,
                    size,
                )
            )
            figures.append(
                Figure(
                    "restore read throughput",
                    h.size / read_s,
                    disk_r,
                    "bytes/s",
                    "sequential read",
                    0.5,
                    True,
                    size,
                )
            )
        # rescale 4 -> 8: bytes each new subtask reads, as a fraction of all state
        n = sizes[1][0]
        storage = FileSystemCheckpointStorage(root / "rescale")
        handles = []
        for i in range(4):
            kgr = compute_key_group_range_for_operator_index(MAX_P, 4, i)
            b = HeapKeyedStateBackend(MAX_P, kgr, ManualClock())
            s = b.get_state(ValueStateDescriptor("payload", serializer=BYTES))
            for k in range(n):
                if b.key_group_of(k) in kgr:
                    b.set_current_key(k)
                    s.update(b"x" * 256)
            handles.append(
                storage.write_subtask_state("job", 1, SubtaskStateSnapshot("op", i, 4, MAX_P, b.snapshot()))
            )
        chk = storage.finalize_checkpoint(
            "job", 1, handles, {"op": {"parallelism": 4, "max_parallelism": MAX_P}}
        )
        total = sum(h.size for h in handles)
        worst = max(restore_subtask(chk, a).bytes_read for a in assign_state(chk, "op", 8))
        figures.append(
            Figure(
                "rescale 4->8: bytes read by one subtask / all state",
                worst,
                total,
                "bytes",
                "all state",
                1 / 8 * 1.1,
                False,
                {"keys": n, "state_bytes": total},
            )
        )
        figures += _incremental(root, 20_000 if quick else 100_000, 256)
    return figures
