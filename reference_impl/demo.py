"""A small tour of key groups: which key group and subtask each key lands on, and how ranges move
when the parallelism changes (max parallelism fixed). ``python -m reference_impl.demo``."""

from __future__ import annotations

from reference_impl.keygroups import (
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


if __name__ == "__main__":
    main()
