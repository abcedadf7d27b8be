"""Reading a process's command line, as both the driver (finding this run's executors on its host) and
a task (proving its ancestor JVM is this run's executor) do: what a process that vanished or that we
may not read says is nothing, never an error."""

from __future__ import annotations

import psutil

__all__ = ["cmdline", "arg"]


def cmdline(p: psutil.Process | int) -> list[str]:
    """``p``'s argv (a process or a pid); empty when it is gone, a zombie, or not ours to read."""
    try:
        return (p if isinstance(p, psutil.Process) else psutil.Process(p)).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def arg(cmd: list[str], flag: str) -> str | None:
    """The value after ``flag`` in ``cmd``, or None."""
    try:
        return cmd[cmd.index(flag) + 1]
    except (ValueError, IndexError):
        return None
