"""Where a failure comes from: the job's own code or the runtime. A job that raises the same exception
from the same line of its own code on every restart will not get further by restarting; it is
reported as "your job raised" with the user's file and line, after a few identical failures instead
of when the restart budget is spent."""

from __future__ import annotations

import inspect
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.job.job_graph import JobGraph
from harness.tasks.failpoints import InjectedCrash

__all__ = ["UserFrame", "job_files", "user_frame", "user_frame_in_text", "IDENTICAL_FAILURES", "YOUR_JOB_RAISED"]

IDENTICAL_FAILURES = 3  # failures in a row from the same user frame, with the same exception, to stop
YOUR_JOB_RAISED = "your job raised"  # how such a run's failure reason starts


@dataclass(frozen=True)
class UserFrame:
    """The innermost frame of the job's own code in a failure, and the exception raised."""

    file: str
    line: int
    function: str
    exception: str  # "ValueError: bad record"

    def describe(self) -> str:
        return f"{self.exception} at {self.file}:{self.line} in {self.function}"


def _file_of(obj: Any) -> str | None:
    code = getattr(obj, "__code__", None)
    if code is not None:
        return str(Path(code.co_filename).resolve())
    try:
        return str(Path(inspect.getfile(type(obj))).resolve())
    except (TypeError, OSError):
        return None


def job_files(graph: JobGraph) -> frozenset[str]:
    """The source files of the job's own code: its functions, sources' record functions, key
    selectors and chained functions (the runtime's files are never among them)."""
    objs: list[Any] = []
    for src, _ in graph.sources():
        objs += [src.function, getattr(src.function, "fn", None), *(c.fn for c in src.chain)]
    for st in graph.stages:
        objs += [st.function, st.key_selector, *(c.fn for c in st.chain)]
    runtime = Path(__file__).resolve().parent
    files = {f for f in map(_file_of, (o for o in objs if o is not None)) if f is not None}
    # the runtime's own modules are not the job's code (jobs built into statechaos live in harness/jobs)
    return frozenset(f for f in files if Path(f).parent != runtime and "reference_impl" not in Path(f).parts)


def user_frame(exc: BaseException, files: frozenset[str]) -> UserFrame | None:
    """The innermost frame of ``exc``'s traceback in one of ``files``, or None (not the job's code,
    or a crash a fault injected: a failpoint reached from the job's code is still the chaos's doing)."""
    if isinstance(exc, InjectedCrash):
        return None
    last = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if str(Path(fs.filename).resolve()) in files:
            last = fs
    if last is None:
        return None
    what = f"{type(exc).__name__}: {exc}".rstrip(": ")
    return UserFrame(last.filename, int(last.lineno or 0), last.name, what)


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)', re.M)


def user_frame_in_text(text: str, files: frozenset[str]) -> UserFrame | None:
    """As :func:`user_frame`, from a Python traceback as text (an executor's, on Spark)."""
    frames = [m for m in _FRAME.finditer(text) if str(Path(m["file"]).resolve()) in files]
    if not frames:
        return None
    m = frames[-1]
    tail = [ln for ln in text[m.end() :].splitlines() if ln.strip() and not ln.startswith((" ", "\t"))]
    return UserFrame(m["file"], int(m["line"]), m["fn"], tail[0].strip() if tail else "an exception")
