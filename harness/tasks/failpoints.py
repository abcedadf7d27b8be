"""Named failpoints inside the runtime. The runtime calls ``hit(name, target)`` at each point; the
chaos layer registers what happens there (a crash, a delay) through a :class:`FailpointHandler`.
With no handler a hit is a no-op, so production code carries no bug switches, only these seams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["FAILPOINTS", "InjectedCrash", "FailpointHandler", "Failpoints"]

FAILPOINTS = (
    "before_snapshot",
    "after_snapshot_before_ack",
    "between_metadata_and_commit",
    "during_sink_commit",
    "during_restore",
    "notify_checkpoint_complete",  # a subtask told a checkpoint completed (action drop: the notice is lost)
)


class InjectedCrash(RuntimeError):
    """A crash injected at a failpoint (or by a crash_task fault): the task dies here."""

    def __init__(self, where: str, target: str | None) -> None:
        super().__init__(f"injected crash at {where}" + (f" in {target}" if target else ""))
        self.where = where
        self.target = target


class FailpointHandler(Protocol):
    """Returns what to do at a failpoint: None, or an object with ``action`` ("crash"|"delay"|"drop")
    and ``delay_ms``. The chaos layer's Nemesis satisfies this."""

    def on_failpoint(self, name: str, target: str | None = None) -> Any: ...


class Failpoints:
    """The runtime's view of failpoints: ``hit`` raises :class:`InjectedCrash` or delays through
    ``sleep`` (the executor's notion of waiting: simulated time in sim, real time on Spark)."""

    def __init__(self, handler: FailpointHandler | None = None, sleep: Callable[[int], None] | None = None):
        self.handler = handler
        self.sleep = sleep or (lambda ms: None)

    def hit(self, name: str, target: str | None = None) -> bool:
        """Act at failpoint ``name``; True when the action is ``drop``: what follows the failpoint is
        lost (a checkpoint's completion notice, an RPC Flink sends without a retry)."""
        if self.handler is None:
            return False
        if name not in FAILPOINTS:
            raise ValueError(f"unknown failpoint {name!r}")
        action = self.handler.on_failpoint(name, target)
        if action is None:
            return False
        if action.action == "crash":
            raise InjectedCrash(name, target)
        if action.action == "delay" and action.delay_ms:
            self.sleep(int(action.delay_ms))
        return bool(action.action == "drop")
