"""The faults that act on a Structured Streaming query's docker cluster: the runtime's container
injectors on a worker container (kill, stop, pause, partition), a signal to the executor JVM inside
one, and a Toxiproxy toxic (or ``disable``) on the driver's link (:mod:`chaos.sss.driver_link`)."""

from __future__ import annotations

import random
from typing import Any

from chaos.injectors.base import Injector, InjectorError
from chaos.scope import RunScope

__all__ = ["WORKER_FAULTS", "CLUSTER_FAULTS", "cluster_injector"]

WORKER_FAULTS = ("kill_worker", "stop_worker", "pause_worker", "partition_worker")
CLUSTER_FAULTS = (*WORKER_FAULTS, "kill_executor", "pause_executor", "network")


def cluster_injector(kind: str, docker: Any, link: Any, scope: RunScope, rng: random.Random, toxic: str = "",
                     attributes: dict[str, Any] | None = None, stream: str = "downstream") -> Injector:  # fmt: skip
    """The injector for ``kind`` on the run's docker stack (``docker``, a DockerSparkCluster) or its
    driver link; InjectorError when the run has neither."""
    if kind == "network":
        from chaos.injectors.network import DisableLink, ToxicFault

        if link is None:
            raise InjectorError("network faults need the driver's proxies: cluster docker")
        if toxic == "disable":
            return DisableLink(link.proxies)
        return ToxicFault(link.proxies, toxic, attributes or {}, stream, 1.0, scope.run_id)
    if docker is None:
        raise InjectorError(f"{kind} needs cluster docker")
    from chaos.cluster.docker_spark import ExecSignal
    from chaos.injectors.containers import ContainerFault, PartitionContainer

    workers = docker.worker_containers()
    if not workers:
        raise InjectorError(f"{kind}: no worker container of this run is running")
    # a worker that runs one of the query's executors (its JVM found inside the container), else any
    busy = [
        c for c in workers if c.exec_run(["pgrep", "-f", "[C]oarseGrainedExecutorBackend"]).exit_code == 0
    ]
    container = rng.choice(busy or workers)
    if kind in ("kill_executor", "pause_executor"):
        return ExecSignal(scope, container, kind, rng)
    if kind == "partition_worker":
        return PartitionContainer(scope, container, docker.stack.network())
    return ContainerFault(scope, container, kind)
