"""In-band process faults, the driver's side: where each task runs (its executor, as the task reported
on registration), which task carries out a fault aimed at an executor or a subtask, and what the
task answered, for the history. The task's side is :mod:`harness.spark.inband`.

Targets are identities, never hosts: ``executor:N`` is the N-th of the executors the current
deployment's tasks run on (sorted by executor id), a subtask name the executor that runs it. The
task re-checks the identity against its ancestor JVM before acting.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from harness.driver.messages import InbandFault, InbandHome, InbandReply
from harness.events import FaultDelivered
from harness.spark.inband import ACTIONS, ExecutorHome

__all__ = ["InbandFaults", "InbandTarget", "NoTaskThere"]


class NoTaskThere(LookupError):
    """No task of the current deployment runs on the targeted executor (yet)."""


@dataclass(frozen=True)
class InbandTarget:
    task: str
    home: ExecutorHome


class InbandFaults:
    """The driver's in-band fault channel. ``send(task, msg)`` sends a control message to a task;
    ``emit`` the history's; ``app_id`` and ``deployment`` are read when needed (both change)."""

    def __init__(
        self,
        send: Callable[[str, InbandFault], bool],
        emit: Callable[..., None],
        app_id: Callable[[], str | None],
        deployment: Callable[[], int],
    ) -> None:
        self._send, self.emit, self.app_id, self.deployment = send, emit, app_id, deployment
        self.homes: dict[str, tuple[int, ExecutorHome | None]] = {}  # task -> (deployment, home)

    def on_message(self, task: str, msg: InbandHome | InbandReply) -> None:
        """A task's :class:`InbandHome` (where it runs) or :class:`InbandReply` (what it did)."""
        match msg:
            case InbandHome(eid, app, pid, host):
                home = None if eid is None or app is None or pid is None else ExecutorHome(eid, app, pid, host)
                self.homes[task] = (self.deployment(), home)
            case InbandReply(fault_id, acted, details):
                self.emit(
                    FaultDelivered(fault_id=fault_id, delivery="inband", task=task, acted=acted, extra=dict(details))
                )

    def current_homes(self) -> dict[str, ExecutorHome]:
        """Where each task of the current deployment runs, as far as the tasks have reported it."""
        dep = self.deployment()
        return {t: h for t, (d, h) in sorted(self.homes.items()) if d == dep and h is not None}

    def target(self, target: str | None, rng: random.Random) -> InbandTarget:
        """The task that acts for ``target`` (``executor:N``, a subtask name, None: a random executor)."""
        homes = self.current_homes()
        if not homes:
            raise NoTaskThere("no task of the current deployment has reported its executor yet")
        executors = sorted(
            {h.executor_id for h in homes.values()}, key=lambda x: int(x) if x.isdigit() else x
        )
        if target is None:
            eid = rng.choice(executors)
        elif target.startswith("executor:"):
            n = target.removeprefix("executor:")
            if not n.isdigit():
                raise ValueError(f"target {target!r}: expected executor:N or a subtask name")
            eid = executors[int(n) % len(executors)]
        else:
            if target not in homes:
                raise NoTaskThere(f"subtask {target} has not reported its executor yet")
            return InbandTarget(target, homes[target])
        task = next(t for t, h in homes.items() if h.executor_id == eid)
        return InbandTarget(task, homes[task])

    def send(self, fault_id: int, action: str, to: InbandTarget, duration_ms: int = 0) -> None:
        """Ask ``to.task`` to carry out ``action`` on its own executor, as this run's application."""
        if action not in ACTIONS:
            raise ValueError(f"unknown in-band action {action!r}")
        app = self.app_id()
        if app is None:
            raise NoTaskThere("the driver does not know its application id yet")
        msg = InbandFault(int(fault_id), action, app, to.home.executor_id, int(duration_ms))
        if not self._send(to.task, msg):
            raise NoTaskThere(f"subtask {to.task} is not connected")
