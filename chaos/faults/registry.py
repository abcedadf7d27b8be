"""The fault kinds a scenario may name, each defined by one module of ``chaos.faults``.

A kind is its parameters (a pydantic model, one branch of the scenario's ``faults`` union on ``kind``),
the clusters it works on, and its injector factory. Each kind module registers itself on its last line.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaos.faults.params import FaultParams
from chaos.injectors.base import Injector
from chaos.scope import RunScope
from harness.controls import ExecutorControls

__all__ = [
    "EVERY_CLUSTER",
    "SPARK_CLUSTERS",
    "DOCKER",
    "FAULT_KINDS",
    "FaultKind",
    "FaultTarget",
    "register",
]

EVERY_CLUSTER = ("sim", "local", "spark", "docker")
SPARK_CLUSTERS = ("local", "spark", "docker")
DOCKER = ("docker",)


@dataclass
class FaultTarget:
    """What a fault can act on in one run: the executor's controls (every cluster), and on Spark clusters
    the Spark cluster, the docker stack and the proxy router when the run has them."""

    executor: ExecutorControls
    scope: RunScope
    spark: Any = None  # harness.spark.cluster.SparkCluster
    docker: Any = None  # chaos.cluster.docker_spark.DockerSparkCluster
    router: Any = None  # chaos.injectors.network.ProxyRouter, when the scenario has network faults
    cluster_kind: str = "sim"  # the scenario's cluster kind (sim, local, spark, docker): default deliveries


# (the fault, what it acts on, the schedule's random source) -> its injector; None: the runtime acts
# by itself (a failpoint)
InjectorFactory = Callable[[Any, FaultTarget, random.Random], Injector | None]


@dataclass(frozen=True)
class FaultKind:
    params: type[FaultParams]
    clusters: tuple[str, ...]
    injector: InjectorFactory

    @property
    def name(self) -> str:
        return str(self.params.model_fields["kind"].annotation.__args__[0])


FAULT_KINDS: dict[str, FaultKind] = {}


def register(kind: FaultKind) -> None:
    if kind.name in FAULT_KINDS:
        raise ValueError(f"fault kind {kind.name!r} is registered twice")
    FAULT_KINDS[kind.name] = kind
