"""What flows on a channel between subtasks: records (plain lists or tuples) and control items.

Control items travel in order with records on the same channel, which is what makes a barrier a
cut: everything before barrier n on a channel belongs to checkpoint n, everything after it does not.
The Spark executor encodes them as tagged tuples on the wire (``to_wire``/``from_wire``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CheckpointBarrier", "CancelCheckpointMarker", "EndOfInput", "Watermark", "is_control", "to_wire", "from_wire"]


@dataclass(frozen=True)
class CheckpointBarrier:
    checkpoint_id: int
    timestamp: int
    kind: str = "checkpoint"  # or "savepoint"


@dataclass(frozen=True)
class CancelCheckpointMarker:
    checkpoint_id: int


@dataclass(frozen=True)
class EndOfInput:
    """The upstream subtask has no more records (its input is exhausted and committed)."""


@dataclass(frozen=True)
class Watermark:
    """No record with an event time at or before ``timestamp`` follows on this channel."""

    timestamp: int


_CONTROL = (CheckpointBarrier, CancelCheckpointMarker, EndOfInput, Watermark)


def is_control(item: Any) -> bool:
    return isinstance(item, _CONTROL)


def to_wire(item: Any) -> tuple[Any, ...]:
    """A control item as a msgpack-friendly tagged tuple."""
    if isinstance(item, CheckpointBarrier):
        return ("barrier", item.checkpoint_id, item.timestamp, item.kind)
    if isinstance(item, CancelCheckpointMarker):
        return ("cancel", item.checkpoint_id)
    if isinstance(item, EndOfInput):
        return ("end",)
    if isinstance(item, Watermark):
        return ("wm", item.timestamp)
    raise TypeError(f"not a control item: {item!r}")


def from_wire(msg: Any) -> Any:
    tag = msg[0]
    if tag == "barrier":
        return CheckpointBarrier(int(msg[1]), int(msg[2]), str(msg[3]))
    if tag == "cancel":
        return CancelCheckpointMarker(int(msg[1]))
    if tag == "end":
        return EndOfInput()
    if tag == "wm":
        return Watermark(int(msg[1]))
    raise ValueError(f"unknown control message {msg!r}")
