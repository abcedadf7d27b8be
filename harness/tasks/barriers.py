"""Barrier alignment for a task with several input channels (Flink's aligned checkpoints).

After barrier n arrives on a channel, that channel is blocked (its later records belong after the
checkpoint) until barrier n has arrived on every live channel; then the task snapshots and forwards
barrier n. A newer barrier, or a cancel marker for the current checkpoint, cancels the alignment and
unblocks everything; barriers of cancelled or older checkpoints are ignored. A channel that reached
end of input counts as having delivered every later barrier.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Alignment", "BarrierAligner"]


class Alignment(str, Enum):
    IGNORED = "ignored"  # an old or cancelled checkpoint's barrier
    BLOCKED = "blocked"  # this channel waits for the others
    ALIGNED = "aligned"  # every channel delivered it: snapshot now, then forward the barrier


@dataclass
class _Current:
    checkpoint_id: int
    arrived: set[int]


class BarrierAligner:
    """Per-task alignment state. The executor must not read from ``blocked_channels()``."""

    def __init__(self, num_channels: int) -> None:
        if num_channels < 1:
            raise ValueError("a task needs at least one input channel")
        self.num_channels = num_channels
        self.finished: set[int] = set()
        self.current: _Current | None = None
        self.last_seen = 0  # highest checkpoint id aligned or cancelled
        self.cancelled: list[int] = []  # ids whose alignment was cancelled (to notify/decline)
        self._dead: set[int] = set()  # ids cancelled before their barrier arrived here

    def blocked_channels(self) -> set[int]:
        return set(self.current.arrived) if self.current else set()

    def _live(self) -> set[int]:
        return set(range(self.num_channels)) - self.finished

    def on_barrier(self, channel: int, checkpoint_id: int) -> Alignment:
        if checkpoint_id <= self.last_seen or checkpoint_id in self._dead:
            return Alignment.IGNORED
        if self.current is not None and checkpoint_id < self.current.checkpoint_id:
            return Alignment.IGNORED
        if self.current is not None and checkpoint_id > self.current.checkpoint_id:
            self._cancel_current()
        if self.current is None:
            self.current = _Current(checkpoint_id, set())
        self.current.arrived.add(channel)
        return self._check()

    def _check(self) -> Alignment:
        assert self.current is not None
        if self._live() <= self.current.arrived:
            self.last_seen = self.current.checkpoint_id
            self.current = None
            return Alignment.ALIGNED
        return Alignment.BLOCKED

    def _cancel_current(self) -> None:
        if self.current is not None:
            self.cancelled.append(self.current.checkpoint_id)
            self.last_seen = max(self.last_seen, self.current.checkpoint_id)
            self.current = None

    def on_cancel(self, checkpoint_id: int) -> bool:
        """A CancelCheckpointMarker or an abort notification. True if it cancelled the current alignment."""
        if self.current is not None and self.current.checkpoint_id == checkpoint_id:
            self._cancel_current()
            return True
        self._dead.add(checkpoint_id)
        return False

    def on_end_of_input(self, channel: int) -> Alignment | None:
        """A channel finished; an alignment waiting only for it completes now."""
        self.finished.add(channel)
        if self.current is not None:
            return self._check()
        return None
