"""The bare-loop baseline: one Python process doing the keyed running count's logical work with no
runtime at all — generate the reference source's records (same keys, same mmh3 payload), count each
key in a dict, JSON-encode every output record with the sink's own encoder. The ceiling a single core sets for
pure-Python per-record work, which our executors' throughput is judged against in the same run."""

from __future__ import annotations

import mmh3

from chaos.extra.bench.core import best_rate
from harness.job.sinks import encode_line
from harness.job.sources import key_name

__all__ = ["bare_loop", "bare_loop_rate"]


def bare_loop(records: int, keys: int, seed: int = 0) -> int:
    """Process ``records`` records over ``keys`` keys, round-robin as the source emits them; returns
    the number of output lines (one per record)."""
    counts: dict[str, int] = {}
    names = [key_name(i) for i in range(keys)]
    prefixes = [f"{seed}/{i}/" for i in range(keys)]
    h, dumps = mmh3.hash, encode_line  # the sink's encoder: the same text, at the same cost
    out: list[str] = []
    append = out.append
    for n in range(records):
        i = n % keys
        seq = n // keys + 1
        k = names[i]
        record = [k, seq, h(prefixes[i] + str(seq), signed=False) % 1_000_000, 0]
        c = counts.get(k, 0) + 1
        counts[k] = c
        append(dumps([record[0], record[1], c]))
    return len(out)


def bare_loop_rate(records: int, keys: int, repeats: int = 3) -> float:
    """Best-of-``repeats`` records/second of :func:`bare_loop`."""
    return best_rate(lambda: bare_loop(records, keys), repeats)
