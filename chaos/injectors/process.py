"""Process faults: SIGKILL an executor or a Python worker, SIGSTOP/SIGCONT an executor."""

from __future__ import annotations

import os
import signal
from typing import Any

import psutil

from chaos.injectors.base import Injector, InjectorError
from chaos.scope import RunScope

__all__ = ["KillProcess", "PauseProcess"]


class KillProcess(Injector):
    """SIGKILL one run-owned process (an executor JVM, or a PySpark Python worker)."""

    instant = True

    def __init__(self, scope: RunScope, pid: int, role: str, kind: str) -> None:
        self.scope, self.pid, self.role, self.kind = scope, pid, role, kind

    def start(self) -> None:
        self.scope.check_pid(self.pid, self.role)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            raise InjectorError(f"{self.role} pid {self.pid} is already gone") from None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": f"{self.role}:{self.pid}", "signal": "SIGKILL"}


class PauseProcess(Injector):
    """SIGSTOP a run-owned process (and its children, so a paused executor's Python workers stop too),
    then SIGCONT them all on ``stop``."""

    def __init__(self, scope: RunScope, pid: int, role: str, kind: str) -> None:
        self.scope, self.pid, self.role, self.kind = scope, pid, role, kind
        self._stopped: list[int] = []

    def start(self) -> None:
        self.scope.check_pid(self.pid, self.role)
        try:
            proc = psutil.Process(self.pid)
            targets = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            raise InjectorError(f"{self.role} pid {self.pid} is already gone") from None
        for p in targets:
            try:
                os.kill(p.pid, signal.SIGSTOP)
                self._stopped.append(p.pid)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        for pid in self._stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._stopped.clear()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": f"{self.role}:{self.pid}", "signal": "SIGSTOP/SIGCONT"}
