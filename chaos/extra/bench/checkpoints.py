"""Checkpoint throughput: writing and reading a subtask's heap state through the state file format,
as a fraction of the machine's sequential disk bandwidth measured in the same run; and the bytes a
subtask reads after a 4 -> 8 rescale, as a fraction of all state; and, for the on-disk backend, an
incremental checkpoint after 1% of keys changed against a full one (bytes and time)."""

from __future__ import annotations

import mmap
import os
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from chaos.extra.bench.core import Figure
from reference_impl.checkpoint import FileSystemCheckpointStorage, read_subtask_state
from reference_impl.checkpoint.syncing import SyncingWriter
from reference_impl.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from reference_impl.rescale import assign_state, restore_subtask
from reference_impl.serializers import BYTES
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.state import HeapKeyedStateBackend, ValueStateDescriptor
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock

__all__ = ["run"]

MAX_P = 128
_DIRECT_READS: list[float] = []  # O_DIRECT read rates seen by _disk_bandwidth, for the notes


def _drop_cache(path: Path) -> None:
    """Evict a (written and fsync'd) file from the page cache, so the next read comes from the device:
    both the bandwidth baseline and the restore read the disk, not memory."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _disk_bandwidth(d: Path, nbytes: int) -> tuple[float, float]:
    """Sequential write (fsync'd) and read (cold cache) bandwidth in bytes/s, 4 MiB blocks, on a
    file as large as the state file, in the same directory. The write is timed both plain and through
    the :class:`SyncingWriter` the snapshot uses, and the faster counts: the snapshot's way of
    flushing must not pass for speed that the disk itself has."""
    path = d / "bandwidth.bin"
    block = os.urandom(4 << 20)
    blocks = max(1, nbytes // len(block))
    write = 0.0
    for syncing in (False, True):
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as fh:
            if syncing:
                with SyncingWriter(fh.fileno()) as out:
                    for _ in range(blocks):
                        out.write(block)
            else:
                for _ in range(blocks):
                    fh.write(block)
                os.fsync(fh.fileno())
        write = max(write, blocks * len(block) / (time.perf_counter() - t0))
    direct = _direct_read(path)
    if direct:
        _DIRECT_READS.append(direct)
    _drop_cache(path)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.read(4 << 20):
            pass
    read = blocks * len(block) / (time.perf_counter() - t0)
    path.unlink()
    return write, read


def _direct_read(path: Path) -> float | None:
    """Sequential read bandwidth with ``O_DIRECT`` (4 MiB aligned buffer, no page cache, no readahead),
    for the report only: on a virtual disk it still reaches the host's cache, so it is not a truer
    device figure, just a slower access pattern than the buffered reads both measured sides use."""
    if not hasattr(os, "O_DIRECT"):
        return None
    buf = mmap.mmap(-1, 4 << 20)  # page-aligned
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return None
    total = 0
    t0 = time.perf_counter()
    try:
        while n := os.readv(fd, [buf]):
            total += n
    except OSError:
        return None
    finally:
        os.close(fd)
        buf.close()
    return total / (time.perf_counter() - t0)


def _first_touch_rate(nbytes: int) -> float:
    """Bytes/s at which the machine hands a process fresh memory (one write per 4 KiB page of a new
    mapping, i.e. page faults). A restore puts every value into fresh memory, so this bounds it too;
    on a virtual machine it can be far below the disk's read rate."""
    m = mmap.mmap(-1, nbytes)
    try:
        pages = np.frombuffer(m, dtype=np.uint8)
        t0 = time.perf_counter()
        pages[:: mmap.PAGESIZE] = 1
        rate = nbytes / (time.perf_counter() - t0)
        del pages
    finally:
        m.close()
    return rate


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
            # interleaved, best of each: disk and CPU contention on a shared machine moves both sides
            write_s = read_s = float("inf")
            disk_w = disk_r = 0.0
            _DIRECT_READS.clear()
            for attempt in range(2):
                storage = FileSystemCheckpointStorage(root / f"s{n}-{attempt}")
                t0 = time.perf_counter()
                snap = SubtaskStateSnapshot("op", 0, 1, MAX_P, b.snapshot(), None)
                h = storage.write_subtask_state("job", 1, snap)
                chk = storage.finalize_checkpoint(
                    "job", 1, [h], {"op": {"parallelism": 1, "max_parallelism": MAX_P}}
                )
                write_s = min(write_s, time.perf_counter() - t0)
                del snap
                _drop_cache(chk.directory / h.path)
                before = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                r = HeapKeyedStateBackend(MAX_P, KeyGroupRange(0, MAX_P - 1), ManualClock())
                read_subtask_state(chk, h, load_into=r.key_group_restorer)  # streamed, as Flink's
                took = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_SELF)
                if took < read_s:
                    read_s = took
                    faults = after.ru_minflt - before.ru_minflt
                    sys_s = after.ru_stime - before.ru_stime
                del r
                shutil.rmtree(root / f"s{n}-{attempt}")
                w, rd = _disk_bandwidth(root, h.size)
                disk_w, disk_r = max(disk_w, w), max(disk_r, rd)
            del b
            size = {"keys": n, "value_bytes": vb, "state_bytes": h.size}
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
                    "heap snapshot (isolated copy, split by key group) + encode + checksum + write"
                    " + fsync + _metadata (format v3, streamed)",
                )
            )
            figures.append(
                Figure(
                    "restore read throughput",
                    h.size / read_s,
                    disk_r,
                    "bytes/s",
                    "sequential read (cold cache)",
                    0.5,
                    True,
                    size,
                    "read + verify + decode the file (guest page cache dropped), streamed into a heap"
                    f" backend; {faults} page faults, {sys_s:.2f} s of system CPU; fresh memory is"
                    f" first touched at {_first_touch_rate(h.size) / 1e9:.2f} GB/s here"
                    + (
                        f"; O_DIRECT read of the baseline file: {max(_DIRECT_READS) / 1e6:.0f} MB/s"
                        if _DIRECT_READS
                        else ""
                    ),
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
