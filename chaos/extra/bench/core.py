"""The benchmark contract: a figure is a ratio of two rates measured side by side in one run.

Machines are shared and noisy, so absolute times are context only; each benchmark measures its
baseline (a bare-dict loop, the disk's sequential bandwidth, Spark's own operator...) in the same run
and reports ``value / baseline`` against a target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Figure", "Unavailable", "best_rate"]


class Unavailable(Exception):
    """A benchmark that cannot run here (an optional peer not set up); the message says how to enable
    it. The runner reports it and goes on: not an error."""


@dataclass
class Figure:
    """One measured figure. ``ratio`` = ``value / baseline``; ``target`` is the ratio to reach (or None);
    ``higher_is_better`` says which side of the target passes; ``size`` labels the scaling point."""

    name: str
    value: float
    baseline: float
    unit: str
    baseline_name: str
    target: float | None = None
    higher_is_better: bool = True
    size: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def meets_target(self) -> bool | None:
        if self.target is None:
            return None
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        d["meets_target"] = self.meets_target
        return d


def best_rate(fn: Callable[[], int], repeats: int = 3) -> float:
    """Run ``fn`` (which returns how many operations it did) ``repeats`` times; best ops/second.
    Best-of-n resists noise from other processes on a shared machine."""
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = fn()
        dt = time.perf_counter() - t0
        best = max(best, n / dt if dt > 0 else float("inf"))
    return best
