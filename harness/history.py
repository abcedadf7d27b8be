"""The run history: one JSON object per line, the raw material of oracles, plots and reports.

Every event carries ``seq`` (its position), ``t`` (ms: simulated time in the sim executor, time since
run start on Spark) and ``type`` (see docs/runtime-contract.md). Keys are written sorted and nothing
machine-specific goes in, so the same seed on the sim executor gives a byte-identical file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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

    def emit(self, type: str, **fields: Any) -> None:  # noqa: A002 - "type" is the event field's name
        with self._lock:
            event = {"seq": self._seq, "t": int(self._clock()), "type": type, **fields}
            self._fh.write(json.dumps(event, sort_keys=True, default=str) + "\n")
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


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """Events of a history file in order; a damaged line is an error naming the file and line."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON history event: {e}") from None
