"""Waits that end a test on lack of progress, not on the clock (issue #35): a Spark or docker test
waiting for a run to reach a point, for processes to exit or for a child command to finish fails only
when what it watches (the run directory's files, the processes still alive) stood still for a bound.
A loaded machine makes such a wait long, never failed; a stuck one still fails, naming what stood
still (``harness.progress.ProgressWatch``)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harness.progress import ProgressWatch, tree_size

__all__ = ["wait_until", "tree_size", "run_while_progressing", "spark_tasks"]

T = TypeVar("T")


def wait_until(
    done: Callable[[], T],
    progress: Callable[[], Hashable],
    what: str,
    stall_s: float = 120.0,
    poll_s: float = 0.1,
) -> T:
    """Poll ``done`` until it returns something true and return it; ``AssertionError`` naming ``what``
    when ``progress()`` (anything that changes while the awaited work goes on) stood still for
    ``stall_s`` first."""
    watch = ProgressWatch(stall_s)
    while True:
        got = done()
        if got:
            return got
        watch.observe(progress=progress())
        if (why := watch.stalled()) is not None:
            raise AssertionError(f"waiting for {what}: {why}")
        time.sleep(poll_s)


def run_while_progressing(
    cmd: Sequence[str], watch: Path, what: str, stall_s: float = 180.0, **popen: object
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to its end, as ``subprocess.run(capture_output=True, text=True)`` does, failing
    (and killing it) only when neither ``watch`` (the run directory it writes) nor its output moved for
    ``stall_s``."""
    out, err = watch.parent / f".{watch.name}.stdout", watch.parent / f".{watch.name}.stderr"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(list(cmd), stdout=o, stderr=e, text=True, **popen)  # type: ignore[call-overload]
        try:
            progress = lambda: (tree_size(watch), out.stat().st_size, err.stat().st_size)  # noqa: E731
            wait_until(lambda: proc.poll() is not None, progress, what, stall_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out.read_text(), err.read_text())


def spark_tasks(sc: Any) -> tuple[tuple[int, int, int, int], ...]:
    """What Spark's running stages did so far (stage, tasks completed, active, failed): moves while a
    Spark job makes progress."""
    tracker = sc.statusTracker()
    stages = (tracker.getStageInfo(i) for i in tracker.getActiveStageIds())
    return tuple(
        sorted((s.stageId, s.numCompletedTasks, s.numActiveTasks, s.numFailedTasks) for s in stages if s is not None)
    )
