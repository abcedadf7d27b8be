"""The run history: one JSON object per line, the raw material of oracles, plots and reports.

Every event carries ``seq`` (its position), ``t`` (ms: simulated time in the sim executor, time since
run start on Spark) and ``type`` (see docs/runtime-contract.md); :mod:`harness.events` holds the typed events written and read
back (``read_events``). Keys are written sorted and nothing
machine-specific goes in, so the same seed on the sim executor gives a byte-identical file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.events import Event, from_fields, read_history, to_json

__all__ = ["HistoryWriter", "read_history"]


class HistoryWriter:
    """Appends events to ``path``; thread-safe (the Spark driver writes from several threads).

    ``append=True`` continues the history of a driver that died (driver replacement): a line it left
    half-written is cut off, and ``seq`` goes on from its last event (``last_event``)."""

    def __init__(self, path: Path, clock: Callable[[], int], append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.last_event: dict[str, Any] | None = None
        self._seq = 0
        if append and self.path.is_file():
            self.last_event = _repair_tail(self.path)
            self._seq = 0 if self.last_event is None else int(self.last_event["seq"]) + 1
        self._fh = open(self.path, "a" if append else "w", encoding="utf-8")
        self._clock = clock
        self._lock = threading.Lock()

    def emit(self, event: Event | str, **fields: Any) -> None:
        """Append a typed event (``emit(RunEnd(...))``); ``emit("run_end", **fields)`` is the older
        form, turned into the typed event (an unknown tag or field is an :class:`EventError`)."""
        ev = event if isinstance(event, Event) else from_fields(event, fields)
        if fields and isinstance(event, Event):
            raise TypeError("emit(event) takes no keyword fields: they belong in the event")
        with self._lock:
            self._fh.write(to_json(ev, seq=self._seq, t=int(self._clock())) + "\n")
            self._seq += 1

    def flush(self) -> None:
        with self._lock:
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _repair_tail(path: Path) -> dict[str, Any] | None:
    """Cut a torn last line (a writer killed mid-line) and return the last whole event."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
        data = data[:end]
    lines = data.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return None
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{len(lines)}: not a JSON history event: {e}") from None
