"""``kill_python_worker`` for a Structured Streaming query, delivered in band: the orchestrator arms
the fault by writing ``python-fault.armed`` in the run directory before the next micro-batch gets
input; the first call of the processor (or GroupState function) in that batch's Python worker takes
the file by an atomic rename and SIGKILLs its own worker, or with ``process: daemon`` the
``pyspark.daemon`` that forked it (and so every worker of that executor). The task fails while its
executor JVM lives on, and Spark retries it on the same executor: the path where a state store is
reloaded in place. The rename lets exactly one call fire, whatever the speed of the machine; the
retried task finds no armed file and runs normally.

The run directory is the same path for the driver and every executor (local-cluster, and docker by
its bind mount), so the file reaches the worker without any network."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pyspark < 4.0 has no transformWithState: only faulting_function runs there
    StatefulProcessor = object  # type: ignore[misc,assignment]  # a stand-in base there

__all__ = ["ARMED", "FaultingProcessor", "faulting_function", "faulting_frame", "arm", "fired"]

ARMED = "python-fault.armed"
_FIRED = ".fired-"


def arm(workdir: Path, process: str) -> None:
    """Arm one kill of the next processor call's Python ``worker`` or its ``daemon``."""
    tmp = workdir / f".{ARMED}.tmp"
    tmp.write_text(process)
    tmp.rename(workdir / ARMED)


def fired(workdir: Path) -> list[dict[str, Any]]:
    """The kills that fired since the last call (each read once): process, pid killed, or why not."""
    out = []
    for p in sorted(workdir.glob(f"{ARMED}{_FIRED}*")):
        if p.name.endswith(".seen"):
            continue
        text = p.read_text().strip()
        if not text.startswith(("killed ", "not fired: ")):  # still being written by the worker
            continue
        p.rename(p.with_name(p.name + ".seen"))
        if text.startswith("killed "):
            process, pid = text.removeprefix("killed ").split()
            out.append({"process": process, "pid": int(pid)})
        else:
            out.append({"why": text.removeprefix("not fired: ")})
    return out


def _maybe_fire(armed: str) -> None:
    mine = f"{armed}{_FIRED}{os.getpid()}"
    try:
        os.rename(armed, mine)
    except FileNotFoundError:
        return
    process = Path(mine).read_text().strip()
    target = os.getppid() if process == "daemon" else os.getpid()
    if process == "daemon" and b"pyspark.daemon" not in _cmdline(target):
        Path(mine).write_text("not fired: the Python worker was not forked by a pyspark.daemon")
        return
    Path(mine).write_text(f"killed {process} {target}")
    os.kill(target, signal.SIGKILL)
    if target != os.getpid():  # the daemon is gone: this worker goes with it, as its siblings do
        os.kill(os.getpid(), signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


class FaultingProcessor(StatefulProcessor):
    """The user's StatefulProcessor, unchanged, with the armed kill checked before each call."""

    def __init__(self, inner: Any, armed: str) -> None:
        self.inner, self.armed = inner, armed

    def init(self, handle: Any) -> None:
        self.inner.init(handle)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:  # noqa: N802, N803
        _maybe_fire(self.armed)
        return self.inner.handleInputRows(key, rows, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N802, N803
        _maybe_fire(self.armed)
        return self.inner.handleExpiredTimer(key, timerValues, expiredTimerInfo)

    def close(self) -> None:
        self.inner.close()


def faulting_function(func: Callable[..., Any], armed: str) -> Callable[..., Any]:
    """An ``applyInPandasWithState`` function with the armed kill checked before each call."""

    def call(key: Any, pdfs: Any, state: Any) -> Any:
        _maybe_fire(armed)
        return func(key, pdfs, state)

    return call


def faulting_frame(df: Any, armed: str) -> Any:
    """A builder's streaming DataFrame with an identity ``mapInArrow`` after it that checks the armed
    kill: a builder's query need not call Python at all, and this step runs in the tasks of the last
    stateful operator's stage (no shuffle after it), so the kill fails a task that has its state store
    open, as a kill inside a processor would. The rows are unchanged; the replay builds the query
    without it."""

    def identity(batches: Iterator[Any]) -> Iterator[Any]:
        _maybe_fire(armed)
        yield from batches

    return df.mapInArrow(identity, df.schema)
