"""Faults the runtime performs on itself through an executor's controls
(:class:`harness.driver.controls.ExecutorControls`): crash a subtask, hold a checkpoint barrier on one
channel, skew a subtask's processing time, and close the checkpoint storage gate (slow, unavailable,
full). Every executor offers the same controls with the same semantics, so these injectors work on
sim and Spark alike."""

from __future__ import annotations

from typing import Any

from chaos.injectors.base import Injector, InjectorError
from harness.driver.controls import ExecutorControls

__all__ = ["CrashTask", "DelayBarrier", "SkewClock", "StorageGateFault"]


class CrashTask(Injector):
    """Crash one subtask; the job fails over and restores from the newest intact checkpoint."""

    kind = "crash_task"
    instant = True

    def __init__(self, executor: ExecutorControls, target: str) -> None:
        self.executor, self.target = executor, target

    def start(self) -> None:
        try:
            self.executor.crash(self.target)
        except ValueError as e:
            raise InjectorError(str(e)) from None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target}


class DelayBarrier(Injector):
    """Hold the next checkpoint barrier on one channel (``source[0]->count[1]``) for ``delay_ms``: the
    downstream subtask aligns (blocks its other channels) for that long."""

    kind = "delay_barrier"
    instant = True

    def __init__(self, executor: ExecutorControls, channel: str, delay_ms: int) -> None:
        self.executor, self.channel, self.delay_ms = executor, channel, int(delay_ms)

    def start(self) -> None:
        try:
            self.executor.delay_next_barrier(self.channel, self.delay_ms)
        except ValueError as e:
            raise InjectorError(str(e)) from None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.channel, "delay_ms": self.delay_ms}


class SkewClock(Injector):
    """Shift one subtask's processing time by ``skew_ms`` until healed."""

    kind = "clock_skew"

    def __init__(self, executor: ExecutorControls, target: str, skew_ms: int) -> None:
        self.executor, self.target, self.skew_ms = executor, target, int(skew_ms)
        self._on = False

    def start(self) -> None:
        try:
            self.executor.skew_clock(self.target, self.skew_ms)
        except ValueError as e:
            raise InjectorError(str(e)) from None
        self._on = True

    def stop(self) -> None:
        if self._on:
            self._on = False
            try:
                self.executor.skew_clock(self.target, 0)
            except ValueError:
                pass  # the subtask is gone (rescaled away): nothing to heal

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "skew_ms": self.skew_ms}


class StorageGateFault(Injector):
    """Make checkpoint storage slow, unavailable or full for the fault's duration."""

    kind = "storage"

    def __init__(self, executor: ExecutorControls, mode: str, delay_ms: int = 0) -> None:
        self.executor, self.mode, self.delay_ms = executor, mode, int(delay_ms)

    def start(self) -> None:
        self.executor.storage_gate(self.mode, self.delay_ms)

    def stop(self) -> None:
        self.executor.storage_gate(None, 0)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mode": self.mode,
            "target": "checkpoint storage",
            "delay_ms": self.delay_ms,
        }
