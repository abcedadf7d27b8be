"""Timers as key-grouped state (Flink's InternalTimerService): deduplicated, deleted, fired in
timestamp order under their key and namespace, and checkpointed, restored and redistributed by key
group on rescale — through real checkpoint files, on the heap and the on-disk backend, full and
incremental."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from reference_impl.checkpoint import FileSystemCheckpointStorage
from reference_impl.checkpoint.storage import validate_checkpoint
from reference_impl.inspect import inspect_checkpoint
from reference_impl.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from reference_impl.rescale import assign_state, restore_subtask
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.state import HeapKeyedStateBackend
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.timers import EVENT_TIME, PROCESSING_TIME, InternalTimerService, timer_state_name

MAX_P = 32
BACKENDS = ["heap", "rocksdb", "rocksdb-incremental"]
_open: list[OnDiskKeyedStateBackend] = []


def _backend(kind: str, kgr: KeyGroupRange) -> object:
    if kind == "heap":
        return HeapKeyedStateBackend(MAX_P, kgr, ManualClock())
    b = OnDiskKeyedStateBackend(MAX_P, kgr, ManualClock())
    _open.append(b)
    return b


@pytest.fixture(autouse=True)
def _close() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def _fired(service: InternalTimerService, domain: str, until: int) -> list[tuple[int, str, object]]:
    out: list[tuple[int, str, object]] = []

    def fire(d: str, ts: int, key: object, ns: object) -> None:
        assert d == domain and service.backend.get_current_key() == key  # the timer's key is current
        out.append((ts, key, ns))

    if domain == EVENT_TIME:
        service.advance_watermark(until, fire)
    else:
        service.advance_processing_time(until, fire)
    return out


@pytest.mark.parametrize("kind", BACKENDS)
def test_register_dedupe_delete_and_fire_in_order(kind):
    b = _backend(kind, KeyGroupRange(0, MAX_P - 1))
    t = InternalTimerService(b)
    for key, ts, ns in [("a", 30, "VoidNamespace"), ("b", 10, "w1"), ("a", 30, "VoidNamespace"), ("c", 20, "w2")]:
        b.set_current_key(key)
        t.register(EVENT_TIME, ts, ns)
    b.set_current_key("c")
    t.register(EVENT_TIME, 25, "w2")
    t.delete(EVENT_TIME, 25, "w2")
    b.set_current_key("a")
    t.register(PROCESSING_TIME, 5)
    assert _fired(t, EVENT_TIME, 19) == [(10, "b", "w1")]
    assert _fired(t, EVENT_TIME, 100) == [(20, "c", "w2"), (30, "a", "VoidNamespace")]  # once each
    assert _fired(t, EVENT_TIME, 200) == []
    assert _fired(t, PROCESSING_TIME, 4) == [] and _fired(t, PROCESSING_TIME, 5) == [(5, "a", "VoidNamespace")]
    assert b.num_entries(timer_state_name(EVENT_TIME)) == 0  # fired timers leave the state


def _checkpoint(kind: str, tmp_path, timers: list[tuple[str, int]], p: int) -> tuple[object, int]:
    storage = FileSystemCheckpointStorage(tmp_path)
    handles = []
    for i in range(p):
        kgr = compute_key_group_range_for_operator_index(MAX_P, p, i)
        b = _backend(kind, kgr)
        t = InternalTimerService(b)
        for key, ts in timers:
            if b.key_group_of(key) in kgr:
                b.set_current_key(key)
                t.register(EVENT_TIME, ts, ("win", ts))
        if kind == "rocksdb-incremental":
            handles.append(b.checkpoint_incremental(storage, "job", 1, "op", i, p).handle)
        else:
            snap = SubtaskStateSnapshot("op", i, p, MAX_P, b.snapshot(), None)
            handles.append(storage.write_subtask_state("job", 1, snap))
    ops = {"op": {"parallelism": p, "max_parallelism": MAX_P}}
    storage.finalize_checkpoint("job", 1, handles, ops)
    return storage, len(timers)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(("old_p", "new_p"), [(2, 3), (3, 1)])
def test_timers_are_redistributed_by_key_group_on_rescale(kind, tmp_path, old_p, new_p):
    rng = random.Random(f"{kind}{old_p}{new_p}")
    timers = sorted({(f"k{rng.randrange(200)}", rng.randrange(1, 10_000)) for _ in range(300)})
    storage, _ = _checkpoint(kind, tmp_path, timers, old_p)
    chk_dir = storage.checkpoint_dir("job", 1)
    view = inspect_checkpoint(chk_dir)  # inspect shows the timers as the key-grouped state they are
    shown = {
        (key, ts)
        for per in view.operators["op"].keyed.values()
        for key_map in per.get(timer_state_name(EVENT_TIME), {}).values()
        for key, stamps in key_map.items()
        for ts in stamps
    }
    assert shown == set(timers)
    chk = validate_checkpoint(chk_dir)
    fired: list[tuple[int, str, object]] = []
    for a in assign_state(chk, "op", new_p):
        restored = restore_subtask(chk, a, MAX_P)
        b = _backend(kind, a.key_group_range)
        t = InternalTimerService(b)
        t.restore(restored.keyed)
        b.restore(restored.keyed)
        mine = _fired(t, EVENT_TIME, 1 << 40)
        assert all(b.key_group_of(k) in a.key_group_range for _, k, _ in mine)
        assert [ts for ts, _, _ in mine] == sorted(ts for ts, _, _ in mine)
        assert all(ns == ("win", ts) for ts, _, ns in mine)
        fired += mine
    assert sorted((k, ts) for ts, k, _ in fired) == timers  # every timer fires once, somewhere


def test_fired_timers_leave_no_empty_entries_in_an_incremental_checkpoint(tmp_path):
    """A delta deletes fired timers; reading the chain gives exactly the backend's state (no empty
    namespaces left behind, which would make key groups differ from a heap snapshot's)."""
    storage = FileSystemCheckpointStorage(tmp_path)
    kgr = KeyGroupRange(0, MAX_P - 1)
    b = _backend("rocksdb", kgr)
    t = InternalTimerService(b)
    for i in range(20):
        b.set_current_key(f"k{i}")
        t.register(EVENT_TIME, 100 + i, ("w", i))
    handles = [b.checkpoint_incremental(storage, "job", 1, "op", 0, 1).handle]
    storage.finalize_checkpoint("job", 1, handles, {"op": {"parallelism": 1, "max_parallelism": MAX_P}})
    assert len(_fired(t, EVENT_TIME, 109)) == 10
    handles = [b.checkpoint_incremental(storage, "job", 2, "op", 0, 1).handle]
    storage.finalize_checkpoint("job", 2, handles, {"op": {"parallelism": 1, "max_parallelism": MAX_P}})
    view = inspect_checkpoint(storage.checkpoint_dir("job", 2))
    assert view.operators["op"].keyed == b.snapshot().key_groups
