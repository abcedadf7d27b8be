"""The injector interface. A fault schedule calls ``start`` and ``stop`` and records both, with the
target and times, in the run history; ``describe`` is what the history and reports show."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["Injector", "InjectorError", "NotReady"]


class InjectorError(RuntimeError):
    """An injector could not act (target gone, API refused, ...)."""


class NotReady(InjectorError):
    """The fault's target does not exist *yet* (a link not dialed, no checkpoint completed, tasks
    being redeployed): the schedule tries again on the next tick instead of recording a failure,
    so whether the fault fires does not depend on how fast the job got there."""


class Injector(ABC):
    """One fault. ``instant`` faults (a kill) have nothing to undo: ``stop`` is a no-op for them."""

    kind: str = "fault"
    instant: bool = False

    @abstractmethod
    def start(self) -> None:
        """Inject the fault."""

    def stop(self) -> None:
        """Heal the fault (resume, reconnect, remove the toxic...). Safe to call twice."""
        return None

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Kind, target and parameters, as plain data for the history."""
