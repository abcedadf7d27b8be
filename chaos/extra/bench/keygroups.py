"""Key-group assignment: the vectorised (numpy) bulk path against the scalar loop, in one run."""

from __future__ import annotations

from functools import partial

import numpy as np

from chaos.extra.bench.core import Figure, best_rate
from reference_impl.keygroups import assign_to_key_group, assign_to_key_groups

__all__ = ["run"]


def _vectorized(ints: np.ndarray) -> int:
    return len(assign_to_key_groups(ints, 128))


def _scalar(keys: list[int]) -> int:
    return len([assign_to_key_group(k, 128) for k in keys])


def run(quick: bool) -> list[Figure]:
    figures = []
    rng = np.random.default_rng(7)
    sizes = [100_000, 300_000, 1_000_000] if not quick else [50_000, 200_000, 1_000_000]
    for n in sizes:
        ints = rng.integers(-(2**40), 2**40, size=n, dtype=np.int64)
        scalar_sample = ints[: min(n, 100_000)].tolist()  # the scalar rate is flat: a sample measures it
        vec = best_rate(partial(_vectorized, ints))
        scalar = best_rate(partial(_scalar, scalar_sample), repeats=2)
        figures.append(
            Figure(
                "bulk int keys: vectorised vs scalar",
                vec,
                scalar,
                "keys/s",
                "scalar loop",
                20.0,
                True,
                {"keys": n},
            )
        )
    strs = [f"user-{i}" for i in range(50_000)]
    vec = best_rate(lambda: len(assign_to_key_groups(strs, 128)))
    scalar = best_rate(lambda: len([assign_to_key_group(k, 128) for k in strs]))
    figures.append(
        Figure(
            "bulk str keys: vectorised vs scalar",
            vec,
            scalar,
            "keys/s",
            "scalar loop",
            None,
            True,
            {"keys": len(strs)},
            "str hashing stays per key in Python; the murmur step is vectorised",
        )
    )
    return figures
