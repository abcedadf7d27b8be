"""The process of a Structured Streaming query's driver, as the orchestrator (:mod:`chaos.sss.run`)
starts, finds the executors of, stops and kills it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from harness.run_store import RunStore
from harness.sss.pyspark_env import child_env
from harness.sss.query_run import DRIVER_LOG

__all__ = ["DriverProcess"]

_EXECUTOR = "CoarseGrainedExecutorBackend"


class DriverProcess:
    """``python -m harness.sss.driver WORKDIR`` (or ``module``: harness.sss.query_driver for a user's
    query) in its own session (process group), with the import
    path and ``PATH`` the query needs; killed as a whole, as losing the driver host would."""

    def __init__(self, workdir: Path, module: str = "harness.sss.driver", python: Path | None = None) -> None:
        # the project, the working directory and this process's import path, where the processor's
        # module is found (local executors too; remote ones get it pickled by value); with the user's
        # pyspark (harness.sss.pyspark_env) ours must not shadow it
        env = child_env(python, workdir / "pylib")
        exe = str(python) if python is not None else sys.executable
        self.log = open(workdir / DRIVER_LOG, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [exe, "-m", module, str(workdir)],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )  # fmt: skip

    def tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def executor_pids(self) -> list[int]:
        out = []
        for p in self.tree():
            with contextlib.suppress(psutil.Error):
                if any(_EXECUTOR in a for a in p.cmdline()):
                    out.append(p.pid)
        return out

    def _cpu_s(self) -> float:
        """CPU seconds the driver and its processes (the JVM, local executors) used so far."""
        total = 0.0
        for p in self.tree():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def kill(self) -> None:
        """SIGKILL the driver's whole process group and anything of its tree that escaped it."""
        procs = self.tree()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=30)
        self.proc.wait()
        self.log.close()

    def stop(self, workdir: Path, stall_s: float) -> int | None:
        """Ask the driver to stop (the ``stop`` file) and wait for it to exit: it ends its batch and
        reads the state, which a loaded machine makes slow. Gives up (None; the driver is killed) only
        when neither its work folder nor its processes' CPU time (in 5 s steps: a hung JVM's background
        threads barely move it) changed for ``stall_s``."""
        from harness.progress import ProgressWatch, tree_size

        RunStore(workdir).stop_request.write_text("")
        watch = ProgressWatch(stall_s)
        rc: int | None = None
        while watch.stalled() is None:
            try:
                rc = self.proc.wait(1.0)
                break
            except subprocess.TimeoutExpired:
                watch.observe(files=tree_size(workdir), cpu=int(self._cpu_s() // 5))
        self.kill()
        with contextlib.suppress(FileNotFoundError):
            RunStore(workdir).stop_request.unlink()
        return rc

