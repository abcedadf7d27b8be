"""Rescaling: which state each new subtask restores from a checkpoint taken at another parallelism.

Keyed state moves by key group: new subtask i reads, from every old state file whose range
intersects its own, just the intersection (Flink's StateAssignmentOperation). Operator state follows
Flink's RoundRobinOperatorStateRepartitioner (see :func:`repartition_operator_state`). Max
parallelism never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_impl.checkpoint.storage import CompletedCheckpoint, StateFileHandle, read_subtask_state
from reference_impl.keygroups import (
    KeyGroupRange,
    check_parallelism,
    compute_key_group_range_for_operator_index,
    java_hash,
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
    "java_hash_map_order",
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


def java_hash_map_order(calls: list[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, ?>`` (default capacity 16, load factor
    0.75) after ``computeIfAbsent`` was called with ``calls`` in this order, as Flink's repartitioner
    fills its map of state names: by bucket ``(h ^ h >>> 16) & (capacity - 1)``, and within a bucket
    newest first (``computeIfAbsent`` links a new entry at the head of its bucket; a resize keeps
    the order). The table doubles at the call after the one that took the size past 0.75 of the
    capacity. (Buckets of 8+ colliding names, which Java treeifies, are not modelled.)"""
    cap, first_seen = 16, dict[str, int]()
    for name in calls:
        if len(first_seen) > cap * 3 // 4:
            cap *= 2
        first_seen.setdefault(name, len(first_seen))

    def position(name: str) -> tuple[int, int]:
        h = java_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1), -first_seen[name]

    return sorted(first_seen, key=position)


def repartition_operator_state(old: list[OperatorStateSnapshot], new_p: int) -> list[OperatorStateSnapshot]:
    """Flink's ``RoundRobinOperatorStateRepartitioner`` from ``len(old)`` to ``new_p`` subtasks.

    - SPLIT_DISTRIBUTE: unchanged at the same parallelism. Otherwise each state's elements are
      concatenated in old-subtask order and dealt as contiguous chunks of sizes differing by at most
      one, state after state in the iteration order of Flink's ``HashMap`` of state names
      (:func:`java_hash_map_order`; each old subtask's states are taken in the order its snapshot
      lists them, which stands for its handle's map order). Each state starts dealing at
      ``startParallelOp``, carried over from the previous state: the subtask after the last one that
      got an extra element (0 for the first state; unchanged after a state with no remainder).
    - UNION: every new subtask gets every element, in old-subtask order (also at the same
      parallelism).
    - BROADCAST: new subtask i gets the copy of the ``i % n``-th of the n old subtasks that reported
      the state. At the same parallelism that is its own copy when every subtask reported; when only
      some did (Flink 2.3.0's ``0 < cardinality() < parallelism``, FLINK-38131), Flink deals the
      ``i % n``-th copy on top of the subtask's own, identical in a real job.

    Every new subtask gets an entry for every state (an empty list or map if nothing is dealt to it).
    """
    if new_p <= 0:
        raise ValueError(f"new parallelism must be positive, got {new_p}")
    out = [OperatorStateSnapshot() for _ in range(new_p)]
    names: list[str] = []
    for snap in old:
        for state_name in snap.states:
            if state_name not in names:
                names.append(state_name)
    modes: dict[str, OperatorStateMode] = {}
    for name in names:
        present_modes = {OperatorStateMode(s.states[name].mode) for s in old if name in s.states}
        if len(present_modes) != 1:
            raise StateRestoreError(
                f"operator state {name!r} has conflicting modes across subtasks: {sorted(present_modes)}"
            )
        modes[name] = present_modes.pop()
    split = [n for s in old for n in s.states if modes[n] is OperatorStateMode.SPLIT_DISTRIBUTE]
    others = [n for n in names if modes[n] is not OperatorStateMode.SPLIT_DISTRIBUTE]
    start = 0  # Flink's startParallelOp, carried from one split state to the next
    for name in [*java_hash_map_order(split), *others]:
        mode = modes[name]
        entries = [s.states.get(name) for s in old]
        present = [e for e in entries if e is not None]
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
                out[i].states[name] = entry(dict(present[i % len(present)].value))
        elif mode is OperatorStateMode.UNION:
            everything = [x for e in present for x in e.value]
            for i in range(new_p):
                out[i].states[name] = entry(list(everything))
        elif new_p == len(old):  # same parallelism: unchanged
            for i in range(new_p):
                e = entries[i]
                out[i].states[name] = entry(list(e.value) if e is not None else [])
        else:
            everything = [x for e in present for x in e.value]
            base, remainder = divmod(len(everything), new_p)
            new_start = start
            pos = 0
            for i in range(new_p):
                op = (i + start) % new_p
                n = base
                if remainder > 0:
                    n += 1
                    remainder -= 1
                elif remainder == 0:  # out of extra elements: the next state starts here
                    new_start = op
                    remainder -= 1
                out[op].states[name] = entry(everything[pos : pos + n])
                pos += n
            start = new_start
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
