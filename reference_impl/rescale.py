"""Rescaling: which state each new subtask restores from a checkpoint taken at another parallelism.

Keyed state moves by key group: new subtask i reads, from every old state file whose range
intersects its own, just the intersection (Flink's StateAssignmentOperation). Operator state follows
Flink's RoundRobinOperatorStateRepartitioner: SPLIT_DISTRIBUTE concatenates the old subtasks'
elements in old-subtask order and deals contiguous chunks whose sizes differ by at most one (the
first ``total % new_p`` subtasks get the extra element); UNION gives everyone everything; BROADCAST
gives new subtask i the copy of old subtask ``i % old_p``. Max parallelism never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_impl.checkpoint.storage import CompletedCheckpoint, StateFileHandle, read_subtask_state
from reference_impl.keygroups import (
    KeyGroupRange,
    check_parallelism,
    compute_key_group_range_for_operator_index,
)
from reference_impl.snapshot import (
    KeyedStateSnapshot,
    OperatorStateEntry,
    OperatorStateMode,
    OperatorStateSnapshot,
    StateRestoreError,
)

__all__ = [
    "SubtaskAssignment",
    "RestoredSubtask",
    "repartition_operator_state",
    "assign_state",
    "restore_subtask",
]


@dataclass
class SubtaskAssignment:
    """What new subtask ``subtask_index`` restores: key-group slices of old files, and operator state."""

    operator_id: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    key_group_range: KeyGroupRange
    keyed_files: list[tuple[StateFileHandle, KeyGroupRange]] = field(default_factory=list)
    operator: OperatorStateSnapshot = field(default_factory=OperatorStateSnapshot)


@dataclass
class RestoredSubtask:
    assignment: SubtaskAssignment
    keyed: list[KeyedStateSnapshot]
    operator: OperatorStateSnapshot
    bytes_read: int


def repartition_operator_state(old: list[OperatorStateSnapshot], new_p: int) -> list[OperatorStateSnapshot]:
    """Flink's round-robin repartitioning of operator state from ``len(old)`` to ``new_p`` subtasks."""
    if new_p <= 0:
        raise ValueError(f"new parallelism must be positive, got {new_p}")
    out = [OperatorStateSnapshot() for _ in range(new_p)]
    names: list[str] = []
    for snap in old:
        for n in snap.states:
            if n not in names:
                names.append(n)
    for name in names:
        entries = [s.states.get(name) for s in old]
        present = [e for e in entries if e is not None]
        modes = {OperatorStateMode(e.mode) for e in present}
        if len(modes) != 1:
            raise StateRestoreError(
                f"operator state {name!r} has conflicting modes across subtasks: {sorted(modes)}"
            )
        mode = modes.pop()
        proto = present[0]

        def entry(
            value: list | dict,
            proto: OperatorStateEntry = proto,
            mode: OperatorStateMode = mode,
            name: str = name,
        ) -> OperatorStateEntry:
            return OperatorStateEntry(name, mode, proto.value_serializer, proto.key_serializer, value)

        if mode is OperatorStateMode.BROADCAST:
            for i in range(new_p):
                src = entries[i % len(old)]
                out[i].states[name] = entry(dict(src.value) if src is not None else {})
        elif mode is OperatorStateMode.UNION:
            everything = [x for e in present for x in e.value]
            for i in range(new_p):
                out[i].states[name] = entry(list(everything))
        elif new_p == len(old):  # same parallelism: unchanged
            for i in range(new_p):
                e = entries[i]
                out[i].states[name] = entry(list(e.value) if e is not None else [])
        else:
            everything = [x for e in entries if e is not None for x in e.value]
            base, rem = divmod(len(everything), new_p)
            start = 0
            for i in range(new_p):
                n = base + (1 if i < rem else 0)
                out[i].states[name] = entry(everything[start : start + n])
                start += n
    return out


def assign_state(chk: CompletedCheckpoint, operator_id: str, new_parallelism: int) -> list[SubtaskAssignment]:
    """Plan the restore of ``operator_id`` at ``new_parallelism`` from ``chk``."""
    info = chk.operators.get(operator_id)
    if info is None:
        raise StateRestoreError(
            f"checkpoint {chk.checkpoint_id} holds no state of operator {operator_id!r} "
            f"(it has: {', '.join(sorted(chk.operators)) or 'none'})"
        )
    max_p = int(info["max_parallelism"])
    old_p = int(info["parallelism"])
    try:
        check_parallelism(max_p, new_parallelism)
    except ValueError as e:
        raise StateRestoreError(f"cannot rescale {operator_id!r} to {new_parallelism}: {e}") from None
    files = chk.files_of(operator_id)
    if len(files) != old_p:
        raise StateRestoreError(
            f"checkpoint {chk.checkpoint_id}: operator {operator_id!r} had parallelism {old_p} but "
            f"{len(files)} state files are listed"
        )
    old_ranges = [compute_key_group_range_for_operator_index(max_p, old_p, i) for i in range(old_p)]
    old_ops = [
        read_subtask_state(chk, f, KeyGroupRange.empty())[0].operator or OperatorStateSnapshot()
        for f in files
    ]
    new_ops = repartition_operator_state(old_ops, new_parallelism)
    out = []
    for i in range(new_parallelism):
        kgr = compute_key_group_range_for_operator_index(max_p, new_parallelism, i)
        slices = [
            (f, r.intersection(kgr)) for f, r in zip(files, old_ranges, strict=True) if r.intersection(kgr)
        ]
        out.append(SubtaskAssignment(operator_id, i, new_parallelism, max_p, kgr, slices, new_ops[i]))
    return out


def restore_subtask(
    chk: CompletedCheckpoint, a: SubtaskAssignment, max_parallelism: int | None = None
) -> RestoredSubtask:
    """Read a planned assignment: only the key groups of the new range, from each overlapping file.
    ``max_parallelism`` is the job's: if it differs from the checkpoint's, restoring is refused."""
    if max_parallelism is not None and max_parallelism != a.max_parallelism:
        raise StateRestoreError(
            f"the job has max_parallelism={max_parallelism} but checkpoint {chk.checkpoint_id} was taken with "
            f"{a.max_parallelism}: max parallelism can never change for existing state"
        )
    keyed, total = [], 0
    for handle, kgr in a.keyed_files:
        snap, n = read_subtask_state(chk, handle, kgr)
        total += n
        if snap.keyed is not None:
            keyed.append(snap.keyed)
    return RestoredSubtask(a, keyed, a.operator, total)
