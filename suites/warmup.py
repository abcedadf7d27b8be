"""One-off preparations that tests need and a fresh machine lacks (the compose images: a cold build of
4-15 min, mostly downloads; another PySpark's venv: ~350 MB from PyPI), started in the background as
soon as collection shows a selected test needs one, so they overlap the tests that run before it
instead of blocking it (issue #35: a fresh-clone CI run within 30 minutes).

Each is a command that is a no-op when its result is cached and that serialises with any other maker
of the same result by a file lock (``compose/build-images.sh``, :func:`harness.venv_cache.ensure_venv`).
The test that needs it still makes or checks it itself, through the same command: it waits for the
background one (on that lock, or here by progress) and then finds the cache filled, or, when the
background one failed, builds it in the open and reports the failure as before. Nothing is hidden and
no test's outcome depends on when the warm-up started."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from suites.waits import wait_until

__all__ = ["wanted", "start", "wait", "stop_all"]


@dataclass
class _Job:
    proc: subprocess.Popen[bytes]
    log: Path
    progress: Callable[[], Hashable] | None


_jobs: dict[str, _Job] = {}


def wanted(session: pytest.Session, folder: Path) -> list[pytest.Item]:
    """The selected tests under ``folder`` that will run (none when only collecting)."""
    if session.config.option.collectonly:
        return []
    return [item for item in session.items if folder in Path(str(item.path)).resolve().parents]


def start(name: str, cmd: Sequence[str], progress: Callable[[], Hashable] | None = None) -> None:
    """Run ``cmd`` in the background (once per session and ``name``), its output to a log of its own;
    ``progress``: what else changes while it works, for :func:`wait` (besides its output)."""
    if name in _jobs:
        return
    fd, log = tempfile.mkstemp(prefix=f"statechaos-warmup-{name}-", suffix=".log")
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    _jobs[name] = _Job(proc, Path(log), progress)


def wait(name: str, stall_s: float = 600.0) -> None:
    """Until the background ``name`` (if one was started) has ended; ``AssertionError`` when neither
    its output nor its ``progress`` moved for ``stall_s``. Its exit status is not judged here:
    the caller then makes or checks the result itself."""
    job = _jobs.get(name)
    if job is None:
        return

    def progress() -> tuple[int, Hashable]:
        return job.log.stat().st_size, job.progress() if job.progress else None

    wait_until(
        lambda: job.proc.poll() is not None, progress, f"the background {name} ({job.log})", stall_s, 2.0
    )


def stop_all() -> None:
    """End every background job still running (SIGTERM to its process group: the build scripts clean
    up on it), and remove the logs of those that ended."""
    for job in _jobs.values():
        if job.proc.poll() is None:
            try:
                os.killpg(job.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            job.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
        job.log.unlink(missing_ok=True)
    _jobs.clear()
