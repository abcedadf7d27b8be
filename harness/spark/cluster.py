"""Spark cluster lifecycle and process discovery for the ``spark`` executor and the chaos layer.

Why: the spark executor needs a cluster whose executors are real processes (so chaos can SIGKILL
them), every process of a run must be found (blast-radius guard) and reaped (Ctrl-C included),
and a barrier stage needs as many free task slots as it has tasks.

Processes of a run on ``local-cluster`` (measured, pyspark 4.3.0, Java 17, 2 cores):
- the py4j gateway = driver JVM (``SparkSubmit``), a child of this Python process; the
  local-cluster Master and Workers live *inside* it (threads, no separate worker JVMs);
- one executor JVM per worker (``CoarseGrainedExecutorBackend --executor-id N --app-id A
  --driver-url spark://CoarseGrainedScheduler@127.0.0.1:PORT``), children of the driver JVM;
- per executor one ``python -m pyspark.daemon`` (child of the executor JVM) and the Python workers
  it forks (children of the daemon, same command line); a task's Python code runs in a worker.

Measured facts (this machine: 2 cores, local-cluster[2,1,1024], other engineers' jobs running):
- startup (``SparkCluster.start`` until both executors are registered): 8-10 s with the JVM options
  set here (``-XX:+UseSerialGC -XX:TieredStopAtLevel=1``), 14-17 s with Spark's defaults; override
  through ``extra_conf`` ("spark.driver.extraJavaOptions" / "spark.executor.extraJavaOptions").
- SIGKILL of an executor JVM: the driver logs "Lost executor N ... exited with code 137"; the
  in-process Worker launches a replacement executor (next executor id) ~0.15 s later, and it is
  registered with the driver ~3.5 s after the kill. A running barrier ShuffleMapStage fails
  (ExecutorLostFailure; Spark kills the sibling tasks) and is resubmitted as a new stage attempt
  (same stage id); its tasks were running again ~7 s after the kill (suites/spark/test_cluster.py).
- Python's BarrierTaskContext has no ``stageAttemptNumber()``; ``attemptNumber()`` restarts at 0 in
  a new stage attempt. ``taskAttemptId()`` (the TID, unique per app, growing) identifies a task
  attempt; the driver reads the stage attempt with ``SparkCluster.stage_attempt(stage_id)``.
- pyspark's SparkContext installs its own SIGINT handler when it starts (cancel jobs, raise
  KeyboardInterrupt): install your own handler *after* ``start()``, or rely on ``try/finally``;
  ``start`` also registers ``stop`` with ``atexit``. ``stop`` after SIGINT took ~1 s, nothing left.
- ``SparkContext.stop()`` takes ~1 s and the executors exit with it, but the gateway JVM stays up
  until it is shut down; ``SparkCluster.stop`` shuts it down when it launched it.
- Executor logs go to ``$SPARK_HOME/work/<app-id>/<executor-id>/`` (SPARK_HOME is the pyspark
  package in the venv; local-cluster workers offer no other place); ``stop`` removes that folder
  unless ``keep_work_dir``, and ``start`` sweeps the folders of runs that were SIGKILLed
  (:func:`sweep_stale_work_dirs`).
- Executors import the project without ``spark.files``: ``spark.pyspark.python`` points at this venv,
  where statechaos is installed editable. ``ship_project=True`` zips the packages into pyFiles for
  masters whose Python lacks them.

One module although long: starting, discovering and reaping a run's processes walk the same
process tree (the pids the blast-radius guard allows are the pids ``stop`` reaps).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from harness.progress import ProgressWatch
from harness.spark.cmdline import arg, cmdline
from reference_impl.errors import EnvironmentFault

__all__ = [
    "SparkEnvironmentError",
    "SparkCluster",
    "parse_master",
    "check_java",
    "alive_pids",
    "sweep_stale_work_dirs",
    "parse_local_cluster",
    "set_idle_shared",
]

_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
_EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


NO_SPARK = "STATECHAOS_NO_SPARK"
"""Set (to a reason) to refuse starting Spark: the test suite sets it for every test not marked
``spark``, so a test that needs Spark cannot hide in the fast tier (subprocesses inherit it)."""


_idle_shared: SparkCluster | None = None


def set_idle_shared(cluster: SparkCluster | None) -> None:
    """Mark the session-shared cluster idle between runs (None: in use or gone). pyspark allows one
    SparkContext per process: an idle shared cluster is stopped when another cluster starts here
    (``harness.spark.shared_cluster`` starts a new one for its next run)."""
    global _idle_shared
    _idle_shared = cluster


def parse_local_cluster(master: str) -> tuple[int, int, int] | None:
    """(workers, cores, memory MB) of a ``local-cluster[W,C,MEM]`` master, None for any other."""
    m = _LOCAL_CLUSTER.match(master)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


class SparkRefused(RuntimeError):
    """Spark was asked to start where ``STATECHAOS_NO_SPARK`` forbids it (a bug in the caller's
    classification, not an environment problem: it must fail, never skip)."""


class SparkEnvironmentError(EnvironmentFault, RuntimeError):
    """Spark cannot run here (no suitable Java, the cluster does not come up); says what to do."""


def parse_master(cluster: str, slots_needed: int) -> str:
    """Spark master URL for a cluster name, with at least ``slots_needed`` task slots.

    ``local`` -> ``local-cluster[2, ceil(slots/2), 1024]``: two workers so one executor can be killed
    while another survives; a barrier stage needs as many free slots as it has tasks.
    """
    if slots_needed < 1:
        raise ValueError(f"slots_needed must be >= 1, got {slots_needed}")
    if cluster == "local":
        return f"local-cluster[2,{max(1, math.ceil(slots_needed / 2))},1024]"
    m = _LOCAL_CLUSTER.match(cluster)
    if m:
        w, c, mem = (int(x) for x in m.groups())
        if w * c < slots_needed:
            raise ValueError(
                f"{cluster}: {w} workers x {c} cores = {w * c} task slots, but the job needs {slots_needed} "
                f"(a barrier stage runs all its tasks at once)"
            )
        return f"local-cluster[{w},{c},{mem}]"
    if cluster.startswith("spark://"):
        return cluster
    raise ValueError(
        f"unknown cluster {cluster!r}: expected local, local-cluster[W,C,MEM] or spark://host:port"
    )


def _min_java() -> tuple[str, int]:
    """This process's pyspark and the oldest Java it runs on: 17 for 4.x, 8 before (a user's pyspark
    under chaos.sss, harness.sss.pyspark_env, which checks the exact list before the run)."""
    import importlib.metadata

    version = importlib.metadata.version("pyspark")
    return version, 17 if int(version.split(".")[0]) >= 4 else 8


def check_java() -> str:
    """Path of a Java binary (JAVA_HOME first, then PATH) this pyspark runs on (17+ for pyspark 4);
    SparkEnvironmentError if none."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    hint = "install Java 17 or 21 and set JAVA_HOME, or run through ./dev (it finds or installs one)"
    pyspark, minimum = _min_java()
    too_old = []
    for java in candidates:
        if not java or not os.access(java, os.X_OK):
            continue
        try:
            out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
        except (OSError, subprocess.TimeoutExpired):
            continue
        m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
        if m and (int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))) >= minimum:
            return java
        too_old.append(f"{java} is Java {m.group(1) if m else '?'}")
    if too_old:
        raise SparkEnvironmentError(f"{'; '.join(too_old)}; pyspark {pyspark} needs Java {minimum}+: {hint}")
    raise SparkEnvironmentError(f"no Java found (JAVA_HOME unset or invalid, no java on PATH): {hint}")


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class SparkCluster:
    """One Spark application (SparkSession) on a master, plus the processes it started.

    One per Python process at a time (pyspark allows a single active SparkContext).
    """

    def __init__(
        self,
        master: str = "local-cluster[2,1,1024]",
        *,
        app_name: str | None = None,
        task_max_failures: int = 4,
        stage_max_consecutive_attempts: int = 4,
        executor_memory_mb: int | None = None,
        driver_memory_mb: int = 1024,
        py_files: Sequence[str] = (),
        ship_project: bool = False,
        extra_conf: Mapping[str, str] | None = None,
        log_level: str = "WARN",
        start_timeout_s: float = 120.0,
        keep_work_dir: bool = False,
        driver_host: str = "127.0.0.1",
        executor_python: str | None = None,
        logs_dir: Path | None = None,
    ) -> None:
        self.master = master
        # the driver JVM's log lines go to logs_dir/driver.log (not the terminal), and executors'
        # stdout/stderr are copied to logs_dir/executors/ before the work dir is removed
        self.logs_dir = None if logs_dir is None else Path(logs_dir).resolve()
        # Where the driver listens and what executors dial; loopback unless executors run elsewhere
        # (containers: an address of the host that they reach).
        self.driver_host = driver_host
        # The executors' Python; default this interpreter (a venv every executor on this host shares).
        self.executor_python = executor_python or sys.executable
        self.app_name = app_name or f"statechaos-{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.task_max_failures = task_max_failures
        self.stage_max_consecutive_attempts = stage_max_consecutive_attempts
        self.driver_memory_mb = driver_memory_mb
        self.py_files = list(py_files)
        self.ship_project = ship_project
        self.extra_conf = dict(extra_conf or {})
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.keep_work_dir = keep_work_dir
        self.local_cluster = parse_local_cluster(master)
        if executor_memory_mb is None:
            executor_memory_mb = min(self.local_cluster[2], 1024) if self.local_cluster else 1024
        self.executor_memory_mb = executor_memory_mb
        self.spark: Any = None  # pyspark.sql.SparkSession
        self.sc: Any = None  # pyspark.SparkContext
        self.app_id: str | None = None
        self.startup_s: float | None = None
        self._driver_url_suffix: str | None = None
        self._gateway_proc: psutil.Process | None = None
        self._seen: dict[int, psutil.Process] = {}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._work_dir: Path | None = None
        self._state = "new"  # new | started | stopping | stopped
        self._lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------

    def _conf(self) -> dict[str, str]:
        py = self.executor_python
        conf = {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            "spark.driver.host": self.driver_host,
            "spark.driver.bindAddress": self.driver_host,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.pyspark.python": py,
            "spark.pyspark.driver.python": sys.executable,
            "spark.executorEnv.PYSPARK_PYTHON": py,
            "spark.task.maxFailures": str(self.task_max_failures),
            "spark.stage.maxConsecutiveAttempts": str(self.stage_max_consecutive_attempts),
            "spark.driver.memory": f"{self.driver_memory_mb}m",
            "spark.executor.memory": f"{self.executor_memory_mb}m",
            "spark.sql.shuffle.partitions": "4",
            "spark.locality.wait": "0s",
            # a barrier job submitted before enough executors registered is re-checked, not failed
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "60",
            # a barrier task killed with its stage (an executor lost) frees its slot for the relaunch
            # soon: its Python worker is killed after 200 ms, not Spark's 2 s (its task never checks)
            "spark.python.task.killTimeout": "200ms",
            # 2-core box: fewer GC threads, quicker JIT warm-up
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        }
        if self.driver_host == "127.0.0.1":  # executors on this host: keep them on loopback too
            conf["spark.executorEnv.SPARK_LOCAL_IP"] = "127.0.0.1"
        py_files = list(self.py_files)
        if self.ship_project:
            py_files.append(self._zip_project())
        if py_files:
            conf["spark.submit.pyFiles"] = ",".join(py_files)
        conf.update(self.extra_conf)
        if self.logs_dir is not None:
            opt = f"-Dlog4j2.configurationFile={self._log4j_config().as_uri()}"
            conf["spark.driver.extraJavaOptions"] = (
                f"{conf.get('spark.driver.extraJavaOptions', '')} {opt}".strip()
            )
        return conf

    def _log4j_config(self) -> Path:
        """A log4j2 configuration writing every driver log line to ``logs_dir/driver.log``."""
        assert self.logs_dir is not None
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        path = self.logs_dir / "log4j2.properties"
        path.write_text(
            "\n".join(
                [
                    f"rootLogger.level = {self.log_level.lower()}",
                    "rootLogger.appenderRef.file.ref = file",
                    "appender.file.type = File",
                    "appender.file.name = file",
                    f"appender.file.fileName = {self.logs_dir / 'driver.log'}",
                    "appender.file.append = true",
                    "appender.file.layout.type = PatternLayout",
                    "appender.file.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex",
                    "",
                ]
            )
        )
        return path

    def _launch_gateway(self) -> None:
        """Start the driver JVM as pyspark would, but with its stdout and stderr in
        ``logs_dir/driver.log``: the JVM's own notices (not only log4j's lines) stay off the terminal."""
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway

        assert self.logs_dir is not None
        conf = SparkConf()
        for k, v in self._conf().items():
            conf.set(k, v)
        with open(self.logs_dir / "driver.log", "ab") as out:  # the JVM keeps its own descriptor
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm

    def _redirect_driver_log(self) -> None:
        """A gateway JVM reused from an earlier run of this process keeps its logging: point it at
        this run's file too."""
        if self.logs_dir is None or self.sc is None:
            return
        with contextlib.suppress(Exception):  # best effort: logging must never fail a run
            jvm = self.sc._jvm
            ctx = jvm.org.apache.logging.log4j.LogManager.getContext(False)
            ctx.setConfigLocation(jvm.java.net.URI(self._log4j_config().as_uri()))

    def attach_logs(self, logs_dir: Path | None) -> None:
        """Send the driver's log lines to ``logs_dir/driver.log`` from now on (a shared cluster
        serving the next run); executors' output is copied there by :meth:`keep_executor_logs`."""
        self.logs_dir = None if logs_dir is None else Path(logs_dir).resolve()
        self._redirect_driver_log()

    def keep_executor_logs(self) -> None:
        """Copy each executor's stdout and stderr (``work/<app>/<id>/``) into ``logs_dir/executors``."""
        if self.logs_dir is None or self._work_dir is None or not self._work_dir.is_dir():
            return
        for f in self._work_dir.glob("*/std*"):
            dest = self.logs_dir / "executors" / f.parent.name / f.name
            with contextlib.suppress(OSError):
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest)

    def _zip_project(self) -> str:
        """Zip reference_impl and harness (never chaos) for executors whose Python lacks them."""
        self._tmp = self._tmp or tempfile.TemporaryDirectory(prefix="statechaos-pyfiles-")
        root = Path(__file__).resolve().parents[2]
        out = Path(self._tmp.name) / "statechaos.zip"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for pkg in ("reference_impl", "harness"):
                for f in (root / pkg).rglob("*.py"):
                    z.write(f, f.relative_to(root).as_posix())
        return str(out)

    def start(self) -> SparkCluster:
        """Start the application and wait for the local-cluster executors; SparkEnvironmentError if not."""
        if self._state != "new":
            raise RuntimeError(f"SparkCluster already {self._state}; create a new one")
        refused = os.environ.get(NO_SPARK)
        if refused:
            raise SparkRefused(f"Spark may not start here ({NO_SPARK} is set): {refused}")
        check_java()
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        idle = _idle_shared
        if idle is not None and idle is not self and SparkContext._active_spark_context is not None:
            set_idle_shared(None)  # a session's idle cluster gives way (one SparkContext per process)
            idle.stop()
        if SparkContext._active_spark_context is not None:
            raise RuntimeError(
                "another SparkContext is active in this process; stop it first (one Spark app at a time)"
            )
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # pyspark ships this (not spark.pyspark.python) to executors as the Python to run tasks with
        os.environ["PYSPARK_PYTHON"] = self.executor_python
        owns_gateway = SparkContext._gateway is None
        t0 = time.monotonic()
        self._state = "started"
        builder = SparkSession.builder
        for k, v in self._conf().items():
            builder = builder.config(k, v)
        try:
            if owns_gateway and self.logs_dir is not None:
                self._launch_gateway()
            with self._app_start_turn():
                self.spark = builder.getOrCreate()
        except BaseException as e:
            # the text first: a py4j error asks the gateway for it, and stop() shuts the gateway down
            try:
                what = f"{type(e).__name__}: {e}"
            except Exception:
                what = type(e).__name__
            proc = getattr(SparkContext._gateway, "proc", None) if owns_gateway else None
            if proc is not None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    self._gateway_proc = psutil.Process(proc.pid)
            self.stop()
            if not isinstance(e, Exception):  # Ctrl-C while the application starts: stopped, goes on
                raise
            raise SparkEnvironmentError(
                f"Spark did not start on {self.master}: {what}. Check Java 17/21 (JAVA_HOME), "
                f"free memory, and that {self.driver_host} is usable (SPARK_LOCAL_IP={self.driver_host})"
            ) from None
        self.sc = self.spark.sparkContext
        atexit.register(self.stop)  # from here on: a Ctrl-C before start() returns still stops it
        self._redirect_driver_log()
        self.sc.setLogLevel(self.log_level)
        self.app_id = self.sc.applicationId
        port = self.sc.getConf().get("spark.driver.port")
        self._driver_url_suffix = f"@127.0.0.1:{port}"
        if owns_gateway:
            proc = getattr(SparkContext._gateway, "proc", None)
            if proc is not None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    self._gateway_proc = psutil.Process(proc.pid)
                    self._seen[proc.pid] = self._gateway_proc
        if self.local_cluster:
            self._work_dir = _work_root(_spark_home()) / self.app_id
            sweep_stale_work_dirs(_spark_home())
            w, _, _ = self.local_cluster
            try:
                self.wait_for_executors(w, self.start_timeout_s)
            except TimeoutError as e:
                self.stop()
                raise SparkEnvironmentError(
                    f"{self.master}: {e}; executor logs (if any) are under {self._work_dir} "
                    f"(kept); check memory (each executor asks {self.executor_memory_mb} MB) and Java"
                ) from e
        self.startup_s = time.monotonic() - t0
        return self

    @contextlib.contextmanager
    def _app_start_turn(self) -> Iterator[None]:
        """A local cluster's master names its app ``app-<second>-0000``: two runs registering in the
        same second on one Spark install share ``work/<app-id>/`` and its executor folders (a
        second run's executors fail to start there, and the first run's cleanup removes the folder
        the other's executors run in). Starts are taken in turn across processes, and never two in
        one second; other masters number their apps themselves."""
        if not self.local_cluster:
            yield
            return
        work = _work_root(_spark_home())
        work.mkdir(parents=True, exist_ok=True)
        with open(work / ".statechaos-app-start", "a+", encoding="ascii") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed
            fh.seek(0)
            last = fh.read().strip()
            if last.isdigit() and int(last) >= int(time.time()):
                time.sleep(min(1.0, max(0.0, int(last) + 1 - time.time())))  # into the next second
            try:
                yield
            finally:
                fh.seek(0)
                fh.truncate()
                fh.write(str(int(time.time())))
                fh.flush()

    def __enter__(self) -> SparkCluster:
        return self.start()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` has run (or is running): the application is gone or going."""
        return self._state in ("stopping", "stopped")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the app and make sure every process it started is gone. Idempotent.

        Safe from ``finally`` and signal handlers: a second call while a first one is running (e.g.
        a second Ctrl-C) SIGKILLs everything the run owns at once.
        """
        with self._lock:
            state = self._state
            if state == "stopped":
                return
            if state != "stopping":
                self._state = "stopping"
        if state == "stopping":
            self._kill(self._snapshot(), hard=True)
            return
        procs = self._snapshot()
        deadline = time.monotonic() + timeout_s
        if self.spark is not None:
            t = threading.Thread(target=self._stop_spark, name="spark-stop", daemon=True)
            t.start()
            t.join(max(1.0, timeout_s / 2))
        procs.update(self._snapshot())
        # executors exit with the context; give them a moment, then force
        live = [p for p in procs.values() if p is not self._gateway_proc and _alive(p)]
        _, alive = psutil.wait_procs(live, timeout=max(0.5, min(10.0, deadline - time.monotonic())))
        self._kill({p.pid: p for p in alive}, hard=False)
        if self._gateway_proc is not None:
            self._shutdown_gateway()
        procs.update(self._snapshot())
        self._kill(procs, hard=False)
        self.keep_executor_logs()
        if self._work_dir is not None and not self.keep_work_dir:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        if self._tmp is not None:
            self._tmp.cleanup()
        self._state = "stopped"
        if _idle_shared is self:
            set_idle_shared(None)
        atexit.unregister(self.stop)

    def _stop_spark(self) -> None:
        with contextlib.suppress(Exception):
            self.spark.stop()

    def _shutdown_gateway(self) -> None:
        from pyspark import SparkContext

        assert self._gateway_proc is not None  # only called when we found the gateway's process
        gw = SparkContext._gateway
        if gw is not None and getattr(getattr(gw, "proc", None), "pid", None) == self._gateway_proc.pid:
            with contextlib.suppress(Exception):
                gw.shutdown()
            with contextlib.suppress(Exception):
                gw.proc.stdin.close()  # the gateway JVM exits when its stdin closes
            SparkContext._gateway = None
            SparkContext._jvm = None
        with contextlib.suppress(Exception):
            self._gateway_proc.wait(timeout=5)

    def _kill(self, procs: Mapping[int, psutil.Process], hard: bool) -> None:
        """SIGTERM (or SIGKILL if hard), wait, SIGKILL stragglers, wait; reaps our own children."""
        live = [p for p in procs.values() if _alive(p)]
        if not live:
            return
        for p in live:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        _, alive = psutil.wait_procs(live, timeout=0.5 if hard else 5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)

    # -- process discovery ------------------------------------------------------------------------

    def _snapshot(self) -> dict[int, psutil.Process]:
        """Every live process of this run now, merged into what was seen before."""
        found: dict[int, psutil.Process] = {}
        roots: list[psutil.Process] = []
        if self._gateway_proc is not None and _alive(self._gateway_proc):
            roots.append(self._gateway_proc)
        for pid, p in self._executor_procs().items():
            found[pid] = p
            roots.append(p)
        for r in roots:
            found[r.pid] = r
            with contextlib.suppress(psutil.Error):
                for c in r.children(recursive=True):
                    found[c.pid] = c
        for pid, p in found.items():
            self._seen.setdefault(pid, p)
        return {pid: p for pid, p in self._seen.items() if _alive(p)}

    def _executor_procs(self) -> dict[int, psutil.Process]:
        if not self.app_id or not self._driver_url_suffix:
            return {}
        out = {}
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info.get("cmdline") or []
            if _EXECUTOR_CLASS not in cmd:
                continue
            if arg(cmd, "--app-id") != self.app_id:
                continue
            if not (arg(cmd, "--driver-url") or "").endswith(self._driver_url_suffix):
                continue
            out[p.pid] = p
        return out

    def executor_pids(self) -> dict[str, int]:
        """Spark executor id -> pid of its live executor JVM, found by this app's id and driver URL.

        Only executors on this host are visible: for local-cluster that is all of them; for a remote
        ``spark://`` master usually none (use the container handles of the compose stack instead).
        """
        out: dict[str, int] = {}
        for pid, p in self._executor_procs().items():
            if not _alive(p):
                continue
            self._seen.setdefault(pid, p)
            eid = arg(cmdline(p), "--executor-id")
            if eid is not None:
                out[eid] = pid
        return out

    def python_daemon_pids(self) -> dict[str, int]:
        """Executor id -> pid of its ``pyspark.daemon`` (the forking parent of Python workers)."""
        out: dict[str, int] = {}
        for eid, pid in self.executor_pids().items():
            with contextlib.suppress(psutil.Error):
                for c in psutil.Process(pid).children():
                    if "pyspark.daemon" in cmdline(c):
                        out[eid] = c.pid
        return out

    def python_worker_pids(self) -> dict[str, list[int]]:
        """Executor id -> pids of the Python workers running (or idling between) tasks.

        Excludes the ``pyspark.daemon`` itself (killing it takes all the executor's workers and is
        a different fault); includes workers forked by the daemon and non-daemon ``pyspark.worker``
        children of the executor JVM.
        """
        out: dict[str, list[int]] = {}
        for eid, pid in self.executor_pids().items():
            pids: list[int] = []
            with contextlib.suppress(psutil.Error):
                for c in psutil.Process(pid).children():
                    cmd = cmdline(c)
                    if "pyspark.daemon" in cmd:
                        with contextlib.suppress(psutil.Error):
                            pids += [w.pid for w in c.children() if _alive(w)]
                    elif "pyspark.worker" in cmd and _alive(c):
                        pids.append(c.pid)
            for p in pids:
                with contextlib.suppress(psutil.Error):
                    self._seen.setdefault(p, psutil.Process(p))
            out[eid] = sorted(pids)
        return out

    def owned_pids(self) -> set[int]:
        """Every live pid this run started: the gateway/driver JVM (if this cluster launched it), the
        executor JVMs, their pyspark daemons and Python workers. For RunScope.pids."""
        if self._state not in ("started", "stopping"):
            return {pid for pid, p in self._seen.items() if _alive(p)}
        return set(self._snapshot())

    def seen_pids(self) -> set[int]:
        """Every pid this run ever owned, dead or alive (to check that ``stop`` left nothing)."""
        return set(self._seen)

    # -- scheduler state ------------------------------------------------------------------------

    def registered_executors(self) -> list[str]:
        """Executor ids the driver's scheduler knows now (the driver excluded)."""
        if self.sc is None:
            return []
        jsc = self.sc._jsc.sc()
        try:
            ids = jsc.getExecutorIds()  # private[spark] in Scala, public in bytecode
            s = ids.mkString(",")
            return [x for x in s.split(",") if x]
        except Exception:
            n = jsc.getExecutorMemoryStatus().size() - 1
            return [str(i) for i in range(n)]

    def task_slots(self) -> int | None:
        """Task slots of the executors the driver's scheduler knows now: what a barrier stage can run
        at once (Spark's own barrier check, ``SparkContext.maxNumConcurrentTasks``); None when this
        Spark does not say (adaptive recovery then stays off rather than guess)."""
        if self.sc is None:
            return None
        jsc = self.sc._jsc.sc()
        try:  # private[spark] in Scala, public in bytecode
            return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
        except Exception:
            return None

    def executors_coming(self) -> dict[str, Hashable]:
        """What moves while executors come to the driver, as progress signals: the task slots, the
        registered executors and, on local-cluster, the executor JVMs (a worker relaunching a lost
        one) and the CPU time used by those not registered yet (0.1 s steps). A new JVM on a loaded
        machine takes tens of seconds to register, and only its CPU time shows that it is starting
        rather than stuck."""
        reg = self.registered_executors()
        pids = self.executor_pids() if self.local_cluster else {}
        cpu = 0.0
        for eid, pid in pids.items():
            if eid not in reg:
                with contextlib.suppress(psutil.Error):
                    t = psutil.Process(pid).cpu_times()
                    cpu += t.user + t.system
        return {
            "task_slots": self.task_slots(),
            "executors_registered": tuple(sorted(reg)),
            "executor_jvms": tuple(sorted(pids.values())),
            "starting_executors_cpu_s": round(cpu, 1),
        }

    def wait_for_executors(self, n: int, timeout_s: float = 60.0) -> dict[str, int]:
        """Wait until ``n`` executors are registered (and, on local-cluster, their JVMs are found);
        returns ``executor_pids()``. The wait follows progress: TimeoutError only when no executor
        JVM appeared and none registered for ``timeout_s`` (a loaded machine starts them slowly, one
        by one), saying how many there were."""
        watch = ProgressWatch(timeout_s, clock=time.monotonic)
        while True:
            reg = set(self.registered_executors())
            pids = self.executor_pids() if self.local_cluster else {}
            if self.local_cluster:
                ok = len(reg & set(pids)) >= n
            else:
                ok = len(reg) >= n
            if ok:
                return pids
            watch.observe(executors_registered=len(reg), executor_jvms=len(pids))
            stalled = watch.stalled()
            if stalled is not None:
                raise TimeoutError(
                    f"{len(reg)} of {n} executors registered ({sorted(reg)}), executor JVMs found: {pids}: "
                    f"{stalled}"
                )
            time.sleep(0.1)

    def stage_attempt(self, stage_id: int) -> int | None:
        """Current attempt number of an active (or recently finished) stage, None if unknown.

        Tasks cannot see it (Python's TaskContext has no stageAttemptNumber); use
        ``ctx.taskAttemptId()`` as a task's attempt: it is unique per app and grows on relaunch.
        """
        if self.sc is None:
            return None
        info = self.sc.statusTracker().getStageInfo(stage_id)
        return None if info is None else int(info.currentAttemptId)

    def default_parallelism(self) -> int:
        return int(self.sc.defaultParallelism) if self.sc is not None else 0


def _pyspark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


STALE_WORK_DIR_S = 60.0  # an app folder untouched this long, with no process of its app, is a leftover
_APP_DIR = re.compile(r"^app-\d{14}-\d{4,}$")


def _spark_home() -> Path:
    """The Spark install a local cluster's workers run from: SPARK_HOME, else the pyspark package."""
    return Path(os.environ.get("SPARK_HOME") or _pyspark_home())


def _work_root(spark_home: Path) -> Path:
    """Where a local cluster's workers keep each app's folder (Spark's default worker dir)."""
    return spark_home / "work"


def sweep_stale_work_dirs(spark_home: Path, min_age_s: float = STALE_WORK_DIR_S) -> list[Path]:
    """Remove ``<spark_home>/work/app-*`` folders that runs killed with SIGKILL left behind (a run
    removes its own on every other exit). A folder goes only if no live process was started for its
    app (executors carry ``--app-id``) and nothing in it changed for ``min_age_s``: another run's
    folder, just created or still in use, is never touched. Returns what was removed."""
    work = _work_root(spark_home)
    if not work.is_dir():
        return []
    candidates = [d for d in work.iterdir() if d.is_dir() and _APP_DIR.match(d.name)]
    if not candidates:
        return []
    in_use = {arg(cmdline(p), "--app-id") for p in psutil.process_iter()}
    now, removed = time.time(), []
    for d in candidates:
        if d.name in in_use:
            continue
        try:
            newest = max([d.stat().st_mtime, *(f.stat().st_mtime for f in d.rglob("*"))])
        except OSError:
            continue  # changing under us: in use
        if now - newest >= min_age_s:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def alive_pids(pids: Iterable[int]) -> set[int]:
    """The subset of ``pids`` still running (zombies count as gone)."""
    out = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if _alive(psutil.Process(pid)):
                out.add(pid)
    return out
