"""Processing-time providers. TTL and the simulator read time only through these, so tests and the
sim executor control the clock exactly (Flink's TtlTimeProvider / MockTtlTimeProvider)."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["TimeProvider", "ManualClock", "SystemClock", "SkewedClock"]


@runtime_checkable
class TimeProvider(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock processing time in milliseconds."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told: deterministic tests and simulation."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards by advancing: advance({ms})")
        self._now += int(ms)
        return self._now

    def set(self, ms: int) -> None:
        self._now = int(ms)

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"


class SkewedClock:
    """Another clock plus an adjustable offset: clock-skew faults on one subtask."""

    def __init__(self, base: TimeProvider, skew_ms: int = 0) -> None:
        self.base = base
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return self.base.now_ms() + self.skew_ms
