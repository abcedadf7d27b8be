"""Python's cyclic garbage collector paced for a run.

A run allocates containers by the million (records, state entries, snapshot dicts, decoded
sections) and frees nearly all of them by reference counting: few form cycles. At the interpreter's
default pace (a young collection every 700 net allocations) the collector still ran ~500 young, ~45
middle and ~5 full collections in one 12,000-record ``allround-sim`` run, and each full one walks
every object the process holds (the cached fault-free reference, the job's state, imported modules):
~0.45 CPU-s of a ~3 CPU-s run, and more as the state grows with the input. While a run executes,
:func:`fewer_collections` raises the young threshold, so collections run ~70x less often; cycles are
still collected, only later (at most ``YOUNG_THRESHOLD`` more container objects are held meanwhile).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "fewer_collections"]

YOUNG_THRESHOLD = 50_000  # net container allocations between young collections (Python's default: 700)

_lock = threading.Lock()
_active = 0
_saved: tuple[int, ...] | None = None


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """The collector's young threshold at least ``young`` inside the block (nested or concurrent
    blocks share it; the last to leave restores the thresholds it found, unless someone changed them
    meanwhile)."""
    global _active, _saved
    with _lock:
        if _active == 0:
            old = gc.get_threshold()
            _saved = old if old[0] < young else None
            if _saved is not None:
                gc.set_threshold(young, *old[1:])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                if gc.get_threshold()[0] == young:
                    gc.set_threshold(*_saved)
                _saved = None
