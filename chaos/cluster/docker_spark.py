"""Scenarios on the dockerised Spark standalone cluster: the driver runs on the host (in the
``statechaos`` process, so triggers, history and oracles work as on every other cluster), executors
run in the compose stack's worker containers, and faults act on those containers.

Why the driver stays on the host: the Nemesis fires faults from the driver's own loop (at checkpoint
n, after k records), and the run directory, history and oracles are the host's. The containers reach
the host at the gateway address of the run's network (the driver and the checkpoint coordinator
bind there), the host reaches the master at its container address, and the host's run directory is
bind-mounted at the same path into every worker so executors write checkpoints and output where the
driver reads them. Executors run the image's Python, with the same pyspark as the host and the same
project code: the stack mounts this checkout's packages (compose/docker-compose.yml), no image holds it.

One stack serves one run, or every run of a :func:`docker_session` (``statechaos run`` over several
docker scenarios, the docker test suite): starting the stack is the slow part. Between runs the
session repairs what faults left (a killed worker is started again, a paused one resumed, a cut one
reconnected). On a session's stack the runtime's runs also share one Spark application (its
executors' JVMs in the containers took 29-46 s to start per run), handed back reset by
:mod:`harness.spark.shared_cluster`; a run that brings its own application has it stopped first. Stacks carry their owner's pid in a label; each new session first removes the stacks
of owners that died without cleaning up (SIGKILL).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chaos.cluster.docker_stack import (
    DockerStack,
    DockerStackError,
    build_images,
    compose_command,
    docker_client,
    owner_token,
    sweep_dead_owners,
)
from chaos.errors import EnvironmentProblem
from chaos.injectors.base import Injector, InjectorError
from chaos.scope import RunScope

__all__ = [
    "DockerSparkCluster",
    "ExecSignal",
    "forked_python_workers",
    "docker_cluster_for",
    "docker_session",
    "session_stack",
    "workers_for",
]

IMAGE_PYTHON = "/opt/statechaos/venv/bin/python"
CORES_PER_WORKER = 2
# Spark declares an executor lost after spark.network.timeout without a heartbeat: short, so a cut or
# frozen worker fails the stage in seconds, yet longer than the pauses scenarios use to expire a
# checkpoint (a pause is meant to be survived).
SPARK_CONF = {
    "spark.network.timeout": "12s",
    "spark.network.timeoutInterval": "4s",
    "spark.executor.heartbeatInterval": "2s",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
}


# the Python workers a worker container's pyspark daemons forked (zombies not yet reaped excluded)
_FORKED_WORKERS = (
    "for d in $(pgrep -f '[p]yspark.daemon'); do for w in $(pgrep -P $d); do "
    'case "$(ps -o stat= -p $w)" in Z*) ;; *) echo $w ;; esac; done; done; true'
)
_FORKED_WORKERS_KILL = "for d in $(pgrep -f '[p]yspark.daemon'); do pkill -KILL -P $d; done; true"


def workers_for(slots: int, cores: int = CORES_PER_WORKER) -> int:
    """Workers for a barrier stage of ``slots`` tasks, plus one to spare: a killed, frozen or cut
    worker must not leave the relaunched stage without enough free slots."""
    return math.ceil(slots / cores) + 1


def _image_python(client: Any, image: str) -> tuple[int, int] | None:
    """The image's Python (major, minor), read from its SPARK_HOME (…/lib/python3.X/site-packages/…)."""
    env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
    for item in env:
        m = re.search(r"/lib/python(\d+)\.(\d+)/", item)
        if item.startswith("SPARK_HOME=") and m:
            return int(m.group(1)), int(m.group(2))
    return None


def _locked_pyspark() -> str | None:
    lock = Path(__file__).resolve().parents[2] / "compose" / "requirements.lock"
    with contextlib.suppress(OSError):
        for line in lock.read_text().splitlines():
            if line.lower().startswith("pyspark=="):
                return line.split("==", 1)[1].strip()
    return None


def check_host_matches_image(client: Any, image: str) -> None:
    """The host driver and the containers' executors must run the same pyspark and Python minor
    version (pickled functions and Spark's RPC cross between them): EnvironmentProblem if not."""
    import pyspark

    want = _locked_pyspark()
    if want and pyspark.__version__ != want:
        raise EnvironmentProblem(
            f"cluster 'docker': the host runs pyspark {pyspark.__version__} but the image has {want} "
            "(compose/requirements.lock); the driver and the executors must run the same Spark: "
            "reinstall the project's venv (./dev setup) or regenerate the lock"
        )
    py = _image_python(client, image)
    if py is not None and py != sys.version_info[:2]:
        raise EnvironmentProblem(
            f"cluster 'docker': the driver runs Python {sys.version_info[0]}.{sys.version_info[1]} but the "
            f"image's executors run Python {py[0]}.{py[1]}; pyspark refuses to mix them: run statechaos "
            f"with Python {py[0]}.{py[1]} (PYTHON=python{py[0]}.{py[1]} ./dev ...)"
        )


class DockerSparkCluster:
    """A compose stack prepared for a driver on this host: ``workers`` workers of ``cores`` task slots
    each, ``mount_root`` bind-mounted into them, the proxy, and the addresses a driver needs."""

    def __init__(
        self, mount_root: Path, workers: int, *, cores: int = CORES_PER_WORKER, image: str | None = None
    ) -> None:
        self.mount_root = Path(mount_root).resolve()
        self.workers, self.cores, self.image = workers, cores, image
        self.stack: DockerStack | None = None
        self.master_url = ""
        self.driver_host = ""
        self.proxy_url = ""
        self.startup_s = 0.0
        self.in_session = False  # a docker_session's stack, serving more runs than this one

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> DockerSparkCluster:
        """Sweep dead runs' stacks, build (or find) the image, start the stack and wait for health.
        Every failure is an EnvironmentProblem naming what is missing; nothing is left running."""
        import time

        t0 = time.monotonic()
        try:
            client = docker_client()
            compose_command()
        except DockerStackError as e:
            raise EnvironmentProblem(
                f"cluster 'docker' needs a Docker engine and docker-compose: {e}"
            ) from None
        sweep_dead_owners(client)
        try:
            image = self.image or build_images()
        except DockerStackError as e:
            raise EnvironmentProblem(f"cluster 'docker': {e}") from None
        check_host_matches_image(client, image)
        self.mount_root.mkdir(parents=True, exist_ok=True)
        project = f"statechaos-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        stack = DockerStack(
            project,
            workers=self.workers,
            image=image,
            client=client,
            driver=False,
            worker_cores=self.cores,
            mounts=[self.mount_root],
            owner=owner_token(),
        )
        try:
            stack.__enter__()
        except DockerStackError as e:
            raise EnvironmentProblem(f"cluster 'docker': the compose stack did not come up: {e}") from None
        self.stack = stack
        try:
            net = stack.network()
            self.driver_host = net.attrs["IPAM"]["Config"][0]["Gateway"]
            self.master_url = f"spark://{self._ip(stack.container('master'))}:7077"
            self.proxy_url = f"http://127.0.0.1:{stack.host_port('proxy', 8474)}"
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Remove the stack (containers, network, volumes), after the session's Spark application on
        it (``harness.spark.shared_cluster``), which would otherwise outlive its master; idempotent."""
        from harness.spark.shared_cluster import discard_master

        stack, self.stack = self.stack, None
        if stack is not None:
            if self.master_url:
                discard_master(self.master_url, f"its docker stack {stack.project} is removed")
            stack.__exit__(None, None, None)

    def __enter__(self) -> DockerSparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def covers(self, run_dir: Path, workers: int) -> bool:
        """Whether a run in ``run_dir`` needing ``workers`` workers can use this stack."""
        run_dir = Path(run_dir).resolve()
        inside = run_dir == self.mount_root or self.mount_root in run_dir.parents
        return self.stack is not None and inside and workers <= self.workers

    def repair(self, timeout: float = 120) -> None:
        """Undo what a previous run's faults left: resume paused workers, reconnect cut ones, start
        killed or stopped ones; then wait until every worker is healthy again."""
        assert self.stack is not None
        net = self.stack.network()
        for c in self.stack.containers("worker", all=True):
            c.reload()
            if c.status == "paused":
                c.unpause()
            if c.status in ("exited", "created"):
                c.start()
            c.reload()
            if net.name not in (c.attrs["NetworkSettings"]["Networks"] or {}):
                net.connect(c)
        self.stack.wait_healthy(timeout)

    def kill_python_workers(self, stall_s: float = 30.0) -> str | None:
        """Kill the Python workers the workers' pyspark daemons forked and pooled for reuse (the
        daemons stay), so a fault of the next run on a shared application finds only that run's
        workers; None when none is left, else why not."""
        import time

        from harness.progress import ProgressWatch

        assert self.stack is not None
        watch = ProgressWatch(stall_s, clock=time.monotonic)
        while True:
            left: dict[str, str] = {}
            for c in self.worker_containers():
                res = c.exec_run(["sh", "-c", f"{_FORKED_WORKERS_KILL}; {_FORKED_WORKERS}"])
                out = (res.output or b"").decode("utf-8", "replace").strip()
                if res.exit_code != 0 or out:
                    left[c.name] = out or f"exit {res.exit_code}"
            if not left:
                return None
            watch.observe(left=tuple(sorted(left.items())))
            if (stalled := watch.stalled()) is not None:
                return f"Python workers left in the worker containers: {left}: {stalled}"
            time.sleep(0.2)

    # ---- what a driver needs ----------------------------------------------------------------------
    def spark_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`harness.spark.cluster.SparkCluster`."""
        return {
            "driver_host": self.driver_host,
            "executor_python": IMAGE_PYTHON,
            "executor_memory_mb": 768,
            "extra_conf": dict(SPARK_CONF),
        }

    def as_spark_master(self) -> tuple[str, dict[str, str]]:
        """The multi-host profile: this stack as a plain ``spark://`` master whose executors run on
        other hosts (each worker container its own network namespace and host name), for a run that
        knows nothing of Docker (cluster ``spark://...``, every executor fault in band): the master URL
        and the environment :mod:`chaos.cluster.remote_spark` reads."""
        env = {
            "STATECHAOS_DRIVER_HOST": self.driver_host,
            "STATECHAOS_EXECUTOR_PYTHON": IMAGE_PYTHON,
            "STATECHAOS_EXECUTOR_MEMORY_MB": "768",
        }
        return self.master_url, env

    def _ip(self, container: Any) -> str:
        assert self.stack is not None
        container.reload()
        nets = container.attrs["NetworkSettings"]["Networks"] or {}
        info = nets.get(self.stack.network().name) or {}
        if not info.get("IPAddress"):
            raise DockerStackError(f"container {container.name} has no address on the run's network")
        return str(info["IPAddress"])

    def worker_containers(self) -> list[Any]:
        assert self.stack is not None
        return self.stack.containers("worker")

    def busy_workers(self, spark: Any) -> list[Any]:
        """Worker containers whose executor runs at least one task now (Spark's executor infos,
        matched to containers by address)."""
        infos = spark.sc._jsc.sc().statusTracker().getExecutorInfos()
        busy = {str(i.host()) for i in infos if int(i.numRunningTasks()) > 0}
        out = []
        for c in self.worker_containers():
            with contextlib.suppress(DockerStackError):
                if self._ip(c) in busy or c.attrs["Config"]["Hostname"] in busy:
                    out.append(c)
        return out

    def pick_worker(self, spark: Any, target: str | None, rng: random.Random) -> Any:
        """``worker:N``: the N-th running worker by name; none: a random worker that runs tasks."""
        workers = self.worker_containers()
        if not workers:
            raise InjectorError("no worker container of this run is running")
        if target is None:
            return rng.choice(self.busy_workers(spark) or workers)
        want = str(target).removeprefix("worker:")
        if not want.isdigit():
            raise InjectorError(f"target {target!r}: expected worker:N (or no target: a busy worker)")
        return workers[int(want) % len(workers)]


class ExecSignal(Injector):
    """Signal a process inside a run-owned container (the executor JVM, a Python worker): the
    process faults of other clusters, for executors that are not processes of this host. The fault
    kind's module gives the ``signal`` and the shell ``find`` that lists candidate pids (patterns
    bracketed so they do not match the ``sh -c`` running them); a STOP is undone by a CONT on ``stop``."""

    def __init__(
        self, scope: RunScope, container: Any, kind: str, signal: str, find: str, rng: random.Random
    ) -> None:
        self.scope, self.container, self.kind, self.rng = scope, container, kind, rng
        self.signal, self.find = signal, find
        self.instant = signal != "STOP"
        self.pid: int | None = None

    def _exec(self, script: str) -> str:
        res = self.container.exec_run(["sh", "-c", script])
        out = (res.output or b"").decode("utf-8", "replace").strip()
        if res.exit_code != 0:
            raise InjectorError(
                f"{self.kind} in {self.container.name}: `{script}` exited {res.exit_code}: {out}"
            )
        return out

    def start(self) -> None:
        self.scope.check_container(self.container)
        pids = [int(x) for x in self._exec(self.find + " || true").split()]
        if not pids:
            raise InjectorError(f"{self.kind}: no such process in {self.container.name}")
        self.pid = self.rng.choice(sorted(pids))
        self._exec(f"kill -{self.signal} {self.pid}")

    def stop(self) -> None:
        if self.signal == "STOP" and self.pid is not None:
            pid, self.pid = self.pid, None
            with contextlib.suppress(Exception):  # the container may be gone
                self.scope.check_container(self.container)
                self.container.exec_run(["kill", "-CONT", str(pid)])

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.container.name, "pid": self.pid}


# ---- sessions: one stack for several runs ------------------------------------------------------------
class _Session:
    def __init__(self, mount_root: Path, workers: int | None) -> None:
        self.mount_root, self.workers = Path(mount_root).resolve(), workers
        self.cluster: DockerSparkCluster | None = None


_SESSION: _Session | None = None


@contextlib.contextmanager
def docker_session(mount_root: Path, workers: int | None = None) -> Iterator[None]:
    """Share one stack among the docker runs inside this block whose run directories lie under
    ``mount_root``. The stack starts at the first such run (with ``workers`` workers, or as many as
    it needs; a run needing more replaces it with a bigger one) and is removed when the block ends."""
    global _SESSION
    if _SESSION is not None:  # nested: the outer session serves
        yield
        return
    _SESSION = _Session(mount_root, workers)
    try:
        yield
    finally:
        session, _SESSION = _SESSION, None
        if session.cluster is not None:
            session.cluster.stop()


def session_stack() -> DockerSparkCluster | None:
    """The current :func:`docker_session`'s stack, None outside one or before its first run."""
    return None if _SESSION is None else _SESSION.cluster


def forked_python_workers(container: Any) -> list[int]:
    """Pids of the Python workers the pyspark daemons in ``container`` forked (live, not zombies)."""
    res = container.exec_run(["sh", "-c", _FORKED_WORKERS])
    return [int(x) for x in (res.output or b"").decode("utf-8", "replace").split() if x.isdigit()]


@contextlib.contextmanager
def docker_cluster_for(
    run_dir: Path, slots: int, *, shared_app: bool = False
) -> Iterator[DockerSparkCluster]:
    """The docker cluster for one run: the session's (repaired) when there is one that fits, else a
    stack for this run alone, removed when the run ends. A run that does not use the session's shared
    Spark application (``shared_app``; a Structured Streaming driver process, another master's
    arguments) first has it stopped: an idle application still holds every worker's cores."""
    need = workers_for(slots)
    session = _SESSION
    inside = session is not None and (
        Path(run_dir).resolve() == session.mount_root or session.mount_root in Path(run_dir).resolve().parents
    )
    if session is None or not inside:
        with DockerSparkCluster(Path(run_dir), need) as dc:
            yield dc
        return
    if session.cluster is not None and not shared_app:
        from harness.spark.shared_cluster import discard_master

        discard_master(session.cluster.master_url, "a run on the stack with its own Spark application")
    if session.cluster is not None and not session.cluster.covers(run_dir, need):
        session.cluster.stop()
        session.cluster = None
    if session.cluster is None:
        session.cluster = DockerSparkCluster(session.mount_root, max(need, session.workers or 0)).start()
    else:
        try:
            session.cluster.repair()
        except Exception:  # beyond repair (a container gone, an API error): start afresh
            session.cluster.stop()
            session.cluster = DockerSparkCluster(session.mount_root, max(need, session.workers or 0)).start()
    session.cluster.in_session = True
    yield session.cluster
