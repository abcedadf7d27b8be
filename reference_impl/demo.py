"""A small tour of the state model: which key group and subtask each key lands on, a keyed running
count with TTL on two subtasks, and a rescale to three subtasks where each new subtask restores only
the key groups it owns. ``python -m reference_impl.demo``."""

from __future__ import annotations

from reference_impl.keygroups import (
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
)


def main() -> None:
    max_p = compute_default_max_parallelism(4)
    print(f"max parallelism for p=4: {max_p}")
    for p in (2, 4):
        ranges = [compute_key_group_range_for_operator_index(max_p, p, i) for i in range(p)]
        print(f"p={p}: " + ", ".join(f"subtask {i} owns {r}" for i, r in enumerate(ranges)))
    print(f"{'key':>8} {'key group':>9} {'p=2':>4} {'p=4':>4}")
    for key in ["A", "B", "user-42", "zürich", "𝄞", 7, 2**40, (1, "x")]:
        kg = assign_to_key_group(key, max_p)
        print(
            f"{key!s:>8} {kg:>9} {assign_key_to_parallel_operator(key, max_p, 2):>4}"
            f" {assign_key_to_parallel_operator(key, max_p, 4):>4}"
        )
    keyed_count_demo()


def keyed_count_demo() -> None:
    from reference_impl.state import HeapKeyedStateBackend, ValueStateDescriptor
    from reference_impl.time import ManualClock
    from reference_impl.ttl import StateTtlConfig

    max_p, clock = 128, ManualClock()
    desc = ValueStateDescriptor("count").enable_time_to_live(StateTtlConfig(60_000))  # no default with TTL
    old = [
        HeapKeyedStateBackend(max_p, compute_key_group_range_for_operator_index(max_p, 2, i), clock)
        for i in range(2)
    ]
    words = "the quick brown fox jumps over the lazy dog the end".split()
    for w in words:
        backend = old[assign_key_to_parallel_operator(w, max_p, 2)]
        backend.set_current_key(w)
        state = backend.get_state(desc)
        state.update((state.value() or 0) + 1)
        clock.advance(10)
    snaps = [b.snapshot() for b in old]
    print("\nrunning count on 2 subtasks, snapshotted, restored on 3:")
    for i in range(3):
        kgr: KeyGroupRange = compute_key_group_range_for_operator_index(max_p, 3, i)
        new = HeapKeyedStateBackend(max_p, kgr, clock)
        new.restore(snaps)
        state = new.get_state(desc)
        counts = {}
        for w in sorted(new.get_keys("count")):
            new.set_current_key(w)
            counts[w] = state.value()
        print(f"  subtask {i} {kgr}: {counts}")


if __name__ == "__main__":
    main()
