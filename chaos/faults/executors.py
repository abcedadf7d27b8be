"""Which executor (or, on the docker cluster, which worker container) a process fault acts on."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, cast

from chaos.faults.registry import FaultTarget, SssInjectorFactory, SssTarget
from chaos.injectors.base import Injector, InjectorError

if TYPE_CHECKING:
    from chaos.cluster.docker_spark import DockerSparkCluster
    from harness.spark.cluster import SparkCluster

__all__ = [
    "spark_of",
    "docker_of",
    "executor_target",
    "worker_container",
    "in_worker_container",
    "sss_worker_container",
    "EXECUTOR_JVM",
]


def spark_of(on: FaultTarget) -> SparkCluster:
    """The run's Spark cluster; an :class:`InjectorError` on a run that has none."""
    if on.spark is None:
        raise InjectorError(f"this fault acts on Spark executors, and a {on.cluster_kind} run has no Spark cluster")
    return on.spark


def docker_of(on: FaultTarget) -> DockerSparkCluster:
    """The run's docker Spark cluster; an :class:`InjectorError` on a run that has none."""
    if on.docker is None:
        raise InjectorError(f"this fault acts on worker containers, and a {on.cluster_kind} run has none")
    return cast("DockerSparkCluster", on.docker)  # the only class a run puts there


def executor_target(spark: SparkCluster, target: str | None, rng: random.Random) -> tuple[str, int]:
    """(executor id, pid): ``executor:N`` the N-th live executor (ids grow as Spark replaces them),
    none a random one."""
    pids = spark.executor_pids()
    if not pids:
        raise InjectorError("no executor process of this run is visible on this host")
    ids = sorted(pids, key=lambda x: int(x) if x.isdigit() else x)
    if target is None:
        eid = rng.choice(ids)
    else:
        want = str(target).removeprefix("executor:")
        if not want.isdigit():
            raise InjectorError(f"target {target!r}: expected executor:N")
        eid = ids[int(want) % len(ids)]
    return eid, pids[eid]


def worker_container(on: FaultTarget, target: str | None, rng: random.Random) -> Any:
    """The docker worker container a fault acts on (``worker:N``, none a busy one)."""
    return docker_of(on).pick_worker(on.spark, target, rng)


# the executor JVM inside a worker container (bracketed: the pattern must not match the sh -c running it)
EXECUTOR_JVM = "pgrep -f '[C]oarseGrainedExecutorBackend'"


def in_worker_container(
    kind: str, on: FaultTarget, target: str | None, signal: str, find: str, rng: random.Random
) -> Any | None:
    """On the docker cluster a process fault is sent into a worker's container (the executor's
    processes live there, not on this host): ``signal`` to one of the pids ``find`` lists; elsewhere None."""
    if on.docker is None:
        return None
    from chaos.cluster.docker_spark import ExecSignal

    return ExecSignal(on.scope, worker_container(on, target, rng), kind, signal, find, rng)


def sss_worker_container(kind: str, docker: Any, rng: random.Random) -> Any:
    """A Structured Streaming run's worker container that runs one of the query's executors (its JVM
    found inside the container), else any."""
    workers = docker.worker_containers()
    if not workers:
        raise InjectorError(f"{kind}: no worker container of this run is running")
    busy = [c for c in workers if c.exec_run(["sh", "-c", EXECUTOR_JVM]).exit_code == 0]
    return rng.choice(busy or workers)


def sss_executor_signal(signal: str) -> SssInjectorFactory:
    """A Structured Streaming query's injector that sends ``signal`` (``KILL``, ``STOP``) to one of its
    executor JVMs: a local one (local-cluster, through the run's blast-radius scope), or one inside a
    worker container of the run's docker stack."""

    def sss_injector(f: Any, on: SssTarget, rng: random.Random) -> Injector:
        kind = f.kind
        if on.docker is None:
            from chaos.injectors.process import KillProcess, PauseProcess

            pids = on.query.executor_pids()
            if not pids:
                raise InjectorError("no executor running")
            return (KillProcess if signal == "KILL" else PauseProcess)(on.scope, rng.choice(pids), "executor", kind)
        from chaos.cluster.docker_spark import ExecSignal

        return ExecSignal(on.scope, sss_worker_container(kind, on.docker, rng), kind, signal, EXECUTOR_JVM, rng)

    return sss_injector
