"""Limits that follow progress, not the clock: a wait fails only when nothing it waits for has moved
for a bound. A loaded machine makes a run slow, not stuck; a run that completes checkpoints while it
waits for a planned fault is idle, not stuck. When it does fail, the message names each signal and
how long it has not moved, so a user sees *what* stopped (records? checkpoints? a task that never
registered?) instead of "time limit reached". A planned pause (a fault that holds the run's tasks for
its duration: a paused executor or worker, a cut link, closed storage) is a known cause: time while it
holds does not count, and once it ends progress must come within the bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from harness.job.job_errors import JobFailure

__all__ = ["ChildStalled", "ProgressWatch", "Stalled", "run_while_progressing", "tree_size"]


class ProgressWatch:
    """Observes named progress signals (counters, sets' sizes: anything that changes when work is
    done); :meth:`stalled` says why when none has changed for ``bound_s`` seconds of ``clock``."""

    def __init__(self, bound_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if bound_s <= 0:
            raise ValueError(f"a progress bound must be positive, got {bound_s}")
        self.bound_s = float(bound_s)
        self._clock = clock
        self._since = clock()
        self._value: dict[str, Hashable] = {}
        self._moved_at: dict[str, float] = {}
        self._held_at = float("-inf")  # when a planned pause last held the run
        self._held_by: list[str] = []

    def observe(self, **signals: Hashable) -> None:
        """The signals' current values; any that changed since the last call counts as progress."""
        now = self._clock()
        for name, value in signals.items():
            if self._value.get(name, _UNSEEN) != value:
                self._value[name] = value
                self._moved_at[name] = now

    def hold(self, by: list[str]) -> None:
        """The planned pauses holding the run's tasks right now (e.g. ``#2 pause_executor at
        checkpoint=1``; empty when none): while any holds, the time does not count towards a stall;
        once they end, progress must come within the bound from then."""
        if by:
            self._held_at, self._held_by = self._clock(), list(by)

    def _counts_from(self, t: float) -> float:
        """When standing still since ``t`` started to count: not before the last pause ended."""
        return max(t, self._held_at)

    def idle_s(self) -> float:
        """Seconds since any signal last moved (or since the watch started, or a pause last held)."""
        return self._clock() - self._counts_from(max(self._moved_at.values(), default=self._since))

    def stalled(self, bound_s: float | None = None) -> str | None:
        """None while something moved within the bound (``bound_s``: this once instead of the watch's
        own, e.g. a longer one while tasks start); else what stopped, e.g. ``no progress for 121 s
        (bound 120 s): records (5000) unchanged for 121 s, checkpoints completed (3) ...``."""
        bound = self.bound_s if bound_s is None else bound_s
        idle = self.idle_s()
        if idle <= bound:
            return None
        now = self._clock()
        moved = sorted(self._moved_at.items(), key=lambda kv: kv[1])
        what = ", ".join(f"{name} ({self._value[name]}) unchanged for {now - t:.0f} s" for name, t in moved)
        paused = (
            f" since {', '.join(self._held_by)} stopped holding the tasks {now - self._held_at:.0f} s ago"
            if self._held_at > max(self._moved_at.values(), default=self._since)
            else ""
        )
        return f"no progress for {idle:.0f} s (bound {bound:.0f} s){paused}: {what or 'nothing observed'}"

    def stopped(self, bound_s: float | None = None) -> list[str]:
        """The signals that have not moved for the bound, longest first (what a stall names)."""
        bound = self.bound_s if bound_s is None else bound_s
        now = self._clock()
        return [
            name
            for name, t in sorted(self._moved_at.items(), key=lambda kv: kv[1])
            if now - self._counts_from(t) > bound
        ]


class Stalled(JobFailure):
    """The run stopped progressing: nothing it waits for moved for the stall bound. Not an
    infrastructure failure but a finding: the ``liveness`` verdict fails, naming ``stopped`` (the
    signals that stopped moving) and ``waiting_for`` (what the driver still waited for). The driver
    records it as a ``stalled`` history event before ``run_end``."""

    def __init__(self, reason: str, stopped: list[str], waiting_for: str, bound_s: float) -> None:
        super().__init__(f"{reason} (waiting for: {waiting_for})" if waiting_for else reason)
        self.reason, self.stopped, self.waiting_for, self.bound_s = reason, stopped, waiting_for, bound_s

    def event_fields(self) -> dict[str, Any]:
        """The ``stalled`` event's fields (docs/runtime-contract.md)."""
        return {
            "reason": self.reason,
            "stopped": list(self.stopped),
            "waiting_for": self.waiting_for,
            "bound_ms": int(self.bound_s * 1000),
        }


_UNSEEN = object()


def tree_size(path: Path) -> tuple[int, int]:
    """How many files ``path`` holds and their bytes: a progress signal for work that writes a folder
    (a run's history, logs and checkpoints grow while it runs, including while Spark starts)."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
                files += 1
            except OSError:  # removed meanwhile (checkpoint retention)
                pass
    return files, size


def _cpu_s(proc: subprocess.Popen[bytes]) -> float:
    """CPU seconds used by ``proc`` and every process under it (a JVM it started, Python workers)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:  # ended meanwhile
                pass
        return round(total, 2)
    except psutil.Error:
        return 0.0


class ChildStalled(RuntimeError):
    """A child process made no progress (wrote nothing, used no CPU) for the bound; it was killed."""


def run_while_progressing(cmd: list[str], *, folder: Path, bound_s: float = 300.0, poll_s: float = 1.0,
                          **popen: Any) -> int:  # fmt: skip
    """Run ``cmd`` to its end and return its exit code, however long a loaded machine makes it take,
    as long as it progresses: it writes to ``folder`` or it (or a process it started) uses CPU. Only
    when neither moved for ``bound_s`` is it killed with everything it started, and
    :class:`ChildStalled` names what stopped (a fixed time limit failed a slow, working replay)."""
    watch = ProgressWatch(bound_s)
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    try:
        while True:
            try:
                return proc.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                pass
            watch.observe(**{"files written": tree_size(folder), "CPU seconds": _cpu_s(proc)})
            if (why := watch.stalled()) is not None:
                raise ChildStalled(f"{Path(cmd[-1]).name if cmd else 'child'}: {why}")
    finally:
        if proc.poll() is None:  # stalled or interrupted: the child and all it started (its session)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
