"""State operation cost: ValueState read+update per record with key switching, against a bare-dict
loop doing the same counting in the same run (the floor Python allows), with and without TTL; and the
same loop on the on-disk (RocksDB) backend."""

from __future__ import annotations

import random
from functools import partial

from chaos.extra.bench.core import Figure, best_rate
from reference_impl.keygroups import KeyGroupRange
from reference_impl.state import HeapKeyedStateBackend, ValueStateDescriptor
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig

__all__ = ["run"]


def _keys(n_records: int, n_keys: int) -> list[str]:
    rng = random.Random(42)
    names = [f"user-{i}" for i in range(n_keys)]
    return [names[rng.randrange(n_keys)] for _ in range(n_records)]


def _bare_dict(keys: list[str]) -> int:
    counts: dict[str, int] = {}
    get = counts.get
    for k in keys:
        counts[k] = get(k, 0) + 1
    return len(keys)


def _heap(keys: list[str], ttl: bool, incremental_cleanup: bool = False) -> int:
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), ManualClock())
    d = ValueStateDescriptor("count", default=0)  # a TTL value state ignores the default, as in Flink
    if ttl:
        cfg = StateTtlConfig.new_builder(3_600_000)
        if not incremental_cleanup:
            cfg = cfg.disable_cleanup_in_background()
        d.enable_time_to_live(cfg.build())
    state = b.get_state(d)
    set_key, value, update = b.set_current_key, state.value, state.update
    for k in keys:
        set_key(k)
        update((value() or 0) + 1)
    return len(keys)


def _ondisk(keys: list[str]) -> int:
    with OnDiskKeyedStateBackend(128, KeyGroupRange(0, 127), ManualClock()) as b:
        state = b.get_state(ValueStateDescriptor("count", default=0))
        set_key, value, update = b.set_current_key, state.value, state.update
        for k in keys:
            set_key(k)
            update(value() + 1)
    return len(keys)


def run(quick: bool) -> list[Figure]:
    figures: list[Figure] = []
    sizes = (
        [(100_000, 1_000), (200_000, 10_000), (400_000, 100_000)]
        if not quick
        else [(25_000, 1_000), (50_000, 10_000), (100_000, 50_000)]
    )
    for n, k in sizes:
        keys = _keys(n, k)
        _heap(keys, False)  # warm the key-group cache path once, as a running job would
        bare = best_rate(partial(_bare_dict, keys))
        heap = best_rate(partial(_heap, keys, False))
        heap_ttl = best_rate(partial(_heap, keys, True))
        heap_ttl_inc = best_rate(partial(_heap, keys, True, incremental_cleanup=True))
        half = keys[: n // 2]  # half the records: RocksDB is slower and --quick must stay quick
        ondisk = best_rate(partial(_ondisk, half), repeats=2 if quick else 3)
        size = {"records": n, "keys": k}
        figures += [
            Figure(
                "on-disk ValueState read+update",
                ondisk,
                bare,
                "records/s",
                "bare dict",
                None,
                True,
                {"records": n // 2, "keys": k},
                "RocksDB via rocksdict: one get and one put per record, keys and values msgpack",
            ),
            Figure("heap ValueState read+update", heap, bare, "records/s", "bare dict", 0.5, True, size),
            Figure("heap ValueState with TTL", heap_ttl, bare, "records/s", "bare dict", None, True, size),
            Figure(
                "TTL cost per record (TTL / no TTL)",
                1 / heap_ttl,
                1 / heap,
                "s/record",
                "heap without TTL",
                1.5,
                False,
                size,
                "TTL decorators; expired values cleaned on read and on full snapshot",
            ),
            Figure(
                "TTL + incremental cleanup cost (/ no TTL)",
                1 / heap_ttl_inc,
                1 / heap,
                "s/record",
                "heap without TTL",
                None,
                False,
                size,
                "Flink's default background cleanup: 5 entries checked per state access",
            ),
        ]
    return figures
