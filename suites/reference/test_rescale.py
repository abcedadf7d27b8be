"""Rescaling: keyed state by key-group intersection, operator state as Flink's round-robin
repartitioner — properties over random contents and chains of parallelism changes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_impl.checkpoint import FileSystemCheckpointStorage
from reference_impl.keygroups import (
    assign_key_to_parallel_operator,
    compute_key_group_range_for_operator_index,
)
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.rescale import assign_state, repartition_operator_state, restore_subtask
from reference_impl.snapshot import (
    OperatorStateEntry,
    OperatorStateMode,
    OperatorStateSnapshot,
    StateRestoreError,
    SubtaskStateSnapshot,
)
from reference_impl.state import HeapKeyedStateBackend, ValueStateDescriptor
from reference_impl.time import ManualClock

MAX_P = 128
D = ValueStateDescriptor("v")


def _write(storage, cid, p, contents, ops):
    handles = []
    for i in range(p):
        kgr = compute_key_group_range_for_operator_index(MAX_P, p, i)
        b = HeapKeyedStateBackend(MAX_P, kgr, ManualClock())
        s = b.get_state(D)
        for k, v in contents.items():
            if assign_key_to_parallel_operator(k, MAX_P, p) == i:
                b.set_current_key(k)
                s.update(v)
        handles.append(
            storage.write_subtask_state(
                "job", cid, SubtaskStateSnapshot("op", i, p, MAX_P, b.snapshot(), ops[i])
            )
        )
    return storage.finalize_checkpoint(
        "job", cid, handles, {"op": {"parallelism": p, "max_parallelism": MAX_P}}
    )


def _restore_all(chk, new_p):
    contents, ops = {}, []
    owner = {}
    for a in assign_state(chk, "op", new_p):
        r = restore_subtask(chk, a, MAX_P)
        b = HeapKeyedStateBackend(MAX_P, a.key_group_range, ManualClock())
        b.restore(r.keyed)
        s = b.get_state(D)
        for k in b.get_keys("v"):
            assert k not in contents, f"key {k!r} restored on two subtasks"
            assert assign_key_to_parallel_operator(k, MAX_P, new_p) == a.subtask_index
            b.set_current_key(k)
            contents[k] = s.value()
            owner[k] = a.subtask_index
        ops.append(r.operator)
    return contents, ops


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.dictionaries(
        st.one_of(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1)),
        st.integers(-(2**63), 2**63 - 1),
        max_size=80,
    ),
    chain=st.lists(st.integers(1, 12), min_size=2, max_size=4),
)
def test_rescale_chains_preserve_keyed_state(tmp_path_factory, contents, chain):
    storage = FileSystemCheckpointStorage(tmp_path_factory.mktemp("chk"))
    cur = contents
    ops = [OperatorStateSnapshot() for _ in range(chain[0])]
    chk = _write(storage, 1, chain[0], cur, ops)
    for n, p in enumerate(chain[1:], start=2):
        cur, ops = _restore_all(chk, p)
        assert cur == contents
        chk = _write(storage, n, p, cur, ops)


@pytest.mark.parametrize(("old_p", "new_p"), [(4, 2), (2, 4), (2, 2), (15, 77), (77, 15)])
def test_flink_rescale_cases(tmp_path, old_p, new_p):
    contents = {f"key-{i}": i for i in range(3000)}
    ops = [OperatorStateSnapshot() for _ in range(old_p)]
    chk = _write(FileSystemCheckpointStorage(tmp_path), 1, old_p, contents, ops)
    got, _ = _restore_all(chk, new_p)
    assert got == contents


def test_rescale_reads_about_its_share_of_bytes(tmp_path):
    contents = {f"key-{i}": "x" * 50 for i in range(8000)}
    chk = _write(
        FileSystemCheckpointStorage(tmp_path), 1, 4, contents, [OperatorStateSnapshot() for _ in range(4)]
    )
    total = sum(f.size for f in chk.files)
    for a in assign_state(chk, "op", 8):
        assert restore_subtask(chk, a).bytes_read <= total / 8 * 1.25 + 2048


def test_rescale_refusals(tmp_path):
    chk = _write(FileSystemCheckpointStorage(tmp_path), 1, 2, {"a": 1}, [OperatorStateSnapshot()] * 2)
    with pytest.raises(StateRestoreError, match="exceeds max_parallelism"):
        assign_state(chk, "op", 129)
    a = assign_state(chk, "op", 2)[0]
    with pytest.raises(StateRestoreError, match="max parallelism can never change"):
        restore_subtask(chk, a, max_parallelism=256)
    with pytest.raises(StateRestoreError, match="no state of operator 'nope'"):
        assign_state(chk, "nope", 2)


def _ops(mode, per_subtask):
    return [
        OperatorStateSnapshot(
            {
                "s": OperatorStateEntry(
                    "s", mode, value=dict(v) if mode is OperatorStateMode.BROADCAST else list(v)
                )
            }
        )
        for v in per_subtask
    ]


@given(st.lists(st.lists(st.integers(), max_size=10), min_size=1, max_size=8), st.integers(1, 10))
def test_split_distribute_is_lossless_balanced_contiguous_ordered(per_subtask, new_p):
    out = repartition_operator_state(_ops(OperatorStateMode.SPLIT_DISTRIBUTE, per_subtask), new_p)
    chunks = [o.states["s"].value for o in out]
    everything = [x for v in per_subtask for x in v]
    if new_p == len(per_subtask):
        assert chunks == per_subtask
        return
    assert [x for c in chunks for x in c] == everything  # contiguous, old order kept, nothing lost
    sizes = [len(c) for c in chunks]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@given(st.lists(st.lists(st.integers(), max_size=10), min_size=1, max_size=8), st.integers(1, 10))
def test_union_is_complete(per_subtask, new_p):
    out = repartition_operator_state(_ops(OperatorStateMode.UNION, per_subtask), new_p)
    everything = Counter(x for v in per_subtask for x in v)
    assert all(Counter(o.states["s"].value) == everything for o in out)


@given(st.integers(1, 8), st.integers(1, 10))
def test_broadcast_is_identical_copies(old_p, new_p):
    same = {"rule": 1, "other": 2}
    out = repartition_operator_state(_ops(OperatorStateMode.BROADCAST, [same] * old_p), new_p)
    assert all(o.states["s"].value == same for o in out)


def test_operator_state_backend_modes_and_errors():
    b = OperatorStateBackend()
    offsets = b.get_list_state("offsets")
    offsets.add_all([1, 2])
    b.get_union_list_state("u").add("x")
    b.get_broadcast_state("rules").put("r", 1)
    snap = b.snapshot()
    r = OperatorStateBackend()
    r.restore(snap)
    assert r.get_list_state("offsets").get() == [1, 2]
    with pytest.raises(StateRestoreError, match="'u' was written as UNION"):
        r.get_list_state("u")
    assert r.get_broadcast_state("rules").get("r") == 1
    with pytest.raises(ValueError, match="cannot add None"):
        offsets.add(None)
