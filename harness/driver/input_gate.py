"""Holds back the end of a bounded input until every planned fault and rescale has had its trigger
(and every fault with a duration has healed).

A scenario's faults fire at checkpoint N, at a time or at a failpoint; a fast machine can finish the
whole input before those are reached, and the run then proves nothing (or, worse, passes or fails
depending on the machine's speed). So a source that ran out keeps its end of input back while a
planned trigger is pending, and when every source is exhausted the executor asks this gate before
end of input flows and the final checkpoint ends the job: while a planned trigger is still reachable
the job keeps running — idle sources that still pass barriers, periodic checkpoints, time going on —
so checkpoint, time and failpoint triggers are reached whatever the speed. Record-count triggers cannot be reached once the
input has ended and are not waited for. A hold is bounded (``limit_ms`` after the input ended), so a
trigger that can never come (a failpoint on a path the job does not take) ends as "never fired" in
the fault-schedule verdict rather than as a hung run.

Executor-agnostic: the sim executor and the Spark driver ask it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from harness.driver.controls import Emit, FaultScheduler
from harness.events import InputHeld, InputReleased

__all__ = ["EndOfInputGate", "PendingRescales", "hold_limit_ms"]


class _Trigger(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def value(self) -> int: ...


class PendingRescales(Protocol):
    """What the gate asks of the run's rescale plan (``harness.driver.jobmaster.RescaleSchedule``, a module
    above this one): the steps whose trigger is still to come, and whether one is under way."""

    @property
    def busy(self) -> bool: ...

    def pending(self, kinds: tuple[str, ...]) -> Sequence[_Trigger]: ...

REACHABLE_AFTER_INPUT = ("time_ms", "checkpoint", "failpoint")


class EndOfInputGate:
    """``holds(now_ms)``: keep the job going although its input has ended? Records the hold in the
    history (``input_held``, ``input_released``) so a reader sees why a run went on."""

    def __init__(
        self, faults: FaultScheduler | None, rescales: PendingRescales, emit: Emit, limit_ms: int
    ) -> None:
        self.faults, self.rescales, self.emit, self.limit_ms = faults, rescales, emit, int(limit_ms)
        self.since: int | None = None
        self.released = False

    def _waiting(self) -> list[str]:
        out: list[str] = []
        if self.faults is not None:
            out += self.faults.awaiting(REACHABLE_AFTER_INPUT)
        for req in self.rescales.pending(REACHABLE_AFTER_INPUT):
            out.append(f"rescale at {req.kind}={req.value}")
        if self.rescales.busy:
            out.append("a rescale in progress")
        return out

    def releases(self, all_exhausted: bool, now_ms: int) -> bool:
        """May an exhausted source send its end of input now? While some sources still read, not
        while a planned trigger is pending (nothing recorded yet); once every source is exhausted,
        when ``holds`` lets go."""
        if all_exhausted:
            return not self.holds(now_ms)
        return self.released or not self._waiting()

    def holds(self, now_ms: int) -> bool:
        if self.released:
            return False
        waiting = self._waiting()
        if waiting and self.since is None:
            self.since = now_ms
            self.emit(InputHeld(waiting=waiting, limit_ms=self.limit_ms))
        if waiting and now_ms - (self.since or now_ms) < self.limit_ms:
            return True
        if self.since is not None:
            self.emit(InputReleased(waiting=waiting, held_ms=now_ms - self.since))
        self.released = True
        return False


def hold_limit_ms(interval_ms: int, floor_ms: int) -> int:
    """How long a run may go on after its input ended: 50 checkpoint intervals, at least ``floor_ms``."""
    return max(floor_ms, 50 * int(interval_ms))
