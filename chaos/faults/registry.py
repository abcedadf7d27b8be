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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from chaos.faults.params import FaultParams
from chaos.injectors.base import Injector
from chaos.scope import RunScope
from harness.driver.controls import ExecutorControls

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
    "SssFacts",
    "QueryControls",
    "runtime_none",
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


class QueryControls(Protocol):
    """What a fault acts through on a Structured Streaming query's run (``chaos.sss.run``): its driver,
    its local executors, and the history of a fault made of several acts (a checkpoint damaged
    while the driver is down)."""

    def kill_driver(self) -> None: ...

    def restart_driver(self) -> None:
        """A new driver from the checkpoint location, once it runs its query."""

    def executor_pids(self) -> list[int]: ...

    def part(self, inj: Injector, **extra: Any) -> None:
        """``inj`` acted as part of the fault now striking: its own ``fault_start``, with ``extra``."""

    def deferred(self, kind: str, why: str) -> None:
        """The fault found nothing to act on after all: a ``fault_deferred``; it strikes after a later batch."""

    def confirmed(self, kind: str, target: str, trigger: str, **extra: Any) -> None:
        """An armed fault the query's own code struck (``fault_start``, at the batch it was armed for)."""

    def skipped(self, kind: str, why: str, armed_batch: bool = True) -> None:
        """An armed fault that did not strike (``fault_skipped``): at the batch it was armed for, or the next one."""


@dataclass(frozen=True)
class SssTarget:
    """What a fault acts on in a Structured Streaming run: its docker stack (None elsewhere), the
    driver's proxied link (None without network faults), the blast-radius scope, the run directory
    and checkpoint location, and the query's driver and executors."""

    docker: Any  # chaos.cluster.docker_spark.DockerSparkCluster
    link: Any  # chaos.sss.driver_link.DriverLink
    scope: RunScope
    query: QueryControls
    run_dir: Path
    checkpoint: Path


# (the fault, what it acts on, the schedule's random source, the fault's id in the run) -> its injector;
# None: the runtime acts by itself (a failpoint)
InjectorFactory = Callable[[Any, FaultTarget, random.Random, int], Injector | None]
# explore's search space (chaos.explore.SearchSpace: checkpoints, records, tasks) -> a Hypothesis
# strategy of fault entries (dicts as a scenario's ``faults`` holds them)
ExploreStrategy = Callable[[Any], Any]
# (the query's fault, chaos.sss.run.SssFault: kind, after_batches, its options; a Structured Streaming
# run's target; a random source) -> its injector there; NotReady: nothing to act on yet (a later batch)
SssInjectorFactory = Callable[[Any, SssTarget, random.Random], Injector]


@dataclass(frozen=True)
class SssFacts:
    """Where and how a kind applies to a Structured Streaming query: the clusters, its injector there
    (delivered by the same :class:`chaos.schedule.Nemesis` as the runtime's, once ``after_batches``
    micro-batches have committed), and the query fault entry's own fields it takes besides ``kind``,
    ``after_batches`` and ``duration`` (``at``: inside a batch's sink window; ``process``; ``toxic``...).
    ``check`` names a problem with an entry of this kind: (field, message), or None.
    ``link``: it acts on the driver's proxied link, which the run then sets up. A kind the query's own
    code strikes once armed gives its driver's ``settings`` (from the run directory) and ``watch``es
    for it to strike: the run loop calls it every tick, and once more at the end (``final``)."""

    clusters: tuple[str, ...]
    injector: SssInjectorFactory
    options: tuple[str, ...] = ()
    check: Callable[[Any], tuple[str, str] | None] | None = None
    link: bool = False
    settings: Callable[[Path], dict[str, Any]] | None = None
    watch: Callable[[str, SssTarget, bool], None] | None = None


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
    # where it applies to a Structured Streaming query, and how (None: it does not)
    sss: SssFacts | None = None

    @property
    def name(self) -> str:
        return str(get_args(self.params.model_fields["kind"].annotation)[0])


FAULT_KINDS: dict[str, FaultKind] = {}


def runtime_none(f: Any, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector | None:
    """The runtime injector of a kind that applies to Structured Streaming queries only (its ``clusters``
    is empty, so no runtime scenario takes it)."""
    from chaos.injectors.base import InjectorError

    raise InjectorError(f"{f.kind} applies to Structured Streaming queries only")


def register(kind: FaultKind) -> None:
    if kind.name in FAULT_KINDS:
        raise ValueError(f"fault kind {kind.name!r} is registered twice")
    FAULT_KINDS[kind.name] = kind


def kinds_where(test: Callable[[FaultKind], bool]) -> tuple[str, ...]:
    """The names of the registered kinds for which ``test`` holds, in registration order."""
    return tuple(name for name, k in FAULT_KINDS.items() if test(k))
