"""The fault kinds a scenario may name, each defined by one module of ``chaos.faults``.

A kind is every fact about it, held by its :class:`FaultKind`: its parameters (a pydantic model, one
branch of the scenario's ``faults`` union on ``kind``), the clusters it works on, its injector factory,
what its ``target`` names, whether it can hold a task back while it lasts, how ``explore`` generates it,
how it is delivered, and where it applies to a Structured Streaming query. Each kind module registers
itself on its last line; nothing else lists kind names.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from chaos.faults.params import FaultParams
from chaos.injectors.base import Injector
from chaos.scope import RunScope
from harness.controls import ExecutorControls

if TYPE_CHECKING:  # pyspark and the docker SDK load only when a run starts their cluster
    from chaos.injectors.network import ProxyRouter
    from harness.spark.cluster import SparkCluster

__all__ = [
    "EVERY_CLUSTER",
    "SPARK_CLUSTERS",
    "DOCKER",
    "FAULT_KINDS",
    "FaultKind",
    "FaultTarget",
    "SssTarget",
    "kinds_where",
    "Targets",
    "register",
]

EVERY_CLUSTER = ("sim", "local", "spark", "docker")
SPARK_CLUSTERS = ("local", "spark", "docker")
DOCKER = ("docker",)

# what a kind's ``target`` (or ``channel``) names, checked against the scenario's job at validation:
# task: a subtask "op[i]"; executor: executor:N, worker:N or a subtask (the executor running it);
# channel: its ``channel`` "up[i]->down[j]" (or, for a network fault, "coordinator:task");
# worker: worker:N on the docker cluster (nothing the job declares)
Targets = Literal["task", "executor", "channel", "worker"]


class DockerCluster(Protocol):
    """A run's dockerised Spark cluster as a fault target holds it
    (``chaos.cluster.docker_spark.DockerSparkCluster``, named here as a protocol because the cluster
    code sits above the fault kinds; :func:`chaos.faults.executors.docker_of` gives the class)."""

    stack: Any


@dataclass
class FaultTarget:
    """What a fault can act on in one run: the executor's controls (every cluster), and on Spark clusters
    the Spark cluster, the docker stack and the proxy router when the run has them."""

    executor: ExecutorControls
    scope: RunScope
    spark: SparkCluster | None = None
    docker: DockerCluster | None = None
    router: ProxyRouter | None = None  # when the scenario has network faults
    cluster_kind: str = "sim"  # the scenario's cluster kind (sim, local, spark, docker): default deliveries


@dataclass(frozen=True)
class SssTarget:
    """What a fault acts on in a Structured Streaming run: its docker stack (None elsewhere), the
    driver's proxied link (None without network faults), the local executors' processes, and a
    network fault's toxic."""

    docker: Any  # chaos.cluster.docker_spark.DockerSparkCluster
    link: Any  # chaos.sss.driver_link.DriverLink
    scope: RunScope
    executor_pids: Callable[[], list[int]] = list  # the query's local executor JVMs (local-cluster)
    toxic: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    stream: str = "downstream"


# (the fault, what it acts on, the schedule's random source, the fault's id in the run) -> its injector;
# None: the runtime acts by itself (a failpoint)
InjectorFactory = Callable[[Any, FaultTarget, random.Random, int], Injector | None]
# explore's search space (chaos.explore.SearchSpace: checkpoints, records, tasks) -> a Hypothesis
# strategy of fault entries (dicts as a scenario's ``faults`` holds them)
ExploreStrategy = Callable[[Any], Any]
# (the kind's name, a Structured Streaming run's target, a random source) -> its injector there
SssInjectorFactory = Callable[[str, SssTarget, random.Random], Injector]


@dataclass(frozen=True)
class FaultKind:
    params: type[FaultParams]
    clusters: tuple[str, ...]
    injector: InjectorFactory
    targets: Targets | None = None  # what ``target``/``channel`` names (validated against the job)
    # while active, the fault may keep a task from acting (a paused executor, a cut link): the history's
    # fault_start says so (``holds_tasks``), and liveness does not count that time against the task
    holds_tasks: bool = True
    explore: ExploreStrategy | None = None  # how ``statechaos explore`` generates it (sim kinds)
    # how it reaches its target: the runtime (``runtime``), this host's signal or the Docker API
    # (``out_of_band``), the job's own task on the target's host (``inband``); see chaos.faults.delivery
    deliveries: tuple[str, ...] = ("runtime",)
    # the Structured Streaming clusters it applies to, and its injector on a query's docker cluster (None:
    # the query's run loop strikes it by itself, e.g. a Python worker kill armed in band)
    sss_clusters: tuple[str, ...] = ()
    sss_injector: SssInjectorFactory | None = None

    @property
    def name(self) -> str:
        return str(get_args(self.params.model_fields["kind"].annotation)[0])


FAULT_KINDS: dict[str, FaultKind] = {}


def register(kind: FaultKind) -> None:
    if kind.name in FAULT_KINDS:
        raise ValueError(f"fault kind {kind.name!r} is registered twice")
    FAULT_KINDS[kind.name] = kind


def kinds_where(test: Callable[[FaultKind], bool]) -> tuple[str, ...]:
    """The names of the registered kinds for which ``test`` holds, in registration order."""
    return tuple(name for name, k in FAULT_KINDS.items() if test(k))
