"""The worker-container kinds of the docker cluster, one table of what sets them apart. Each acts on a
worker container (``worker:N``, else one that runs tasks):

- ``kill_worker``: kill it; with ``duration_ms`` it is started again when the fault heals, as a
  supervisor would;
- ``stop_worker``: stop it; it is started again when the fault heals;
- ``restart_worker``: restart it;
- ``pause_worker``: freeze it (cgroup freezer) for ``duration_ms``;
- ``partition_worker``: cut it off the run's network until the fault heals.

All but ``restart_worker`` also apply to a Structured Streaming query on the docker cluster.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import create_model, model_validator

from chaos.faults.executors import docker_of, sss_worker_container, worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import DOCKER, FaultKind, FaultTarget, SssFacts, SssTarget, register
from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.containers import ContainerFault, PartitionContainer
from chaos.scope import RunScope


@dataclass(frozen=True)
class WorkerKind:
    """What sets one worker kind apart: the Docker SDK call (None: a network partition), the call that
    heals it (None: instant), and whether it needs ``duration_ms``."""

    action: str | None
    heal: str | None
    needs_duration: bool = False
    heal_with_duration: str | None = None  # the heal when the fault has a duration_ms (a killed worker)
    sss: bool = True  # a Structured Streaming query on the docker cluster takes it too


WORKER_KINDS = {
    "kill_worker": WorkerKind("kill", None, heal_with_duration="start"),
    "stop_worker": WorkerKind("stop", "start"),
    "restart_worker": WorkerKind("restart", None, sss=False),
    "pause_worker": WorkerKind("pause", "unpause", needs_duration=True),
    "partition_worker": WorkerKind(None, None),
}


class WorkerFaultParams(FaultParams):
    @model_validator(mode="after")
    def _needs(self) -> WorkerFaultParams:
        if WORKER_KINDS[self.kind].needs_duration and self.duration_ms is None:
            raise ValueError(f"{self.kind} needs duration_ms (how long the target stays paused)")
        return self


def _container_fault(kind: str, scope: RunScope, container: Any, has_duration: bool, network: Any) -> Injector:
    """``container`` and ``network``: the Docker SDK's objects (the SDK loads with the docker cluster)."""
    w = WORKER_KINDS[kind]
    if w.action is None:
        return PartitionContainer(scope, container, network, kind)
    heal = w.heal_with_duration if has_duration and w.heal_with_duration else w.heal
    return ContainerFault(scope, container, kind, w.action, heal)


def injector(f: FaultParams, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    container = worker_container(on, f.target_name, rng)
    network = None
    if WORKER_KINDS[f.kind].action is None:  # a partition: the stack's network
        stack = docker_of(on).stack
        if stack is None:
            raise InjectorError("the run's docker stack is not up")
        network = stack.network()
    return _container_fault(f.kind, on.scope, container, f.duration_ms is not None, network)


def sss_injector(f: Any, on: SssTarget, rng: random.Random) -> Injector:
    kind = f.kind
    if on.docker is None:
        raise InjectorError(f"{kind} needs cluster docker")
    container = sss_worker_container(kind, on.docker, rng)
    network = on.docker.stack.network() if WORKER_KINDS[kind].action is None else None
    return _container_fault(kind, on.scope, container, False, network)


for _name, _w in WORKER_KINDS.items():
    _params = create_model(
        "".join(p.title() for p in _name.split("_")) + "Fault",
        __base__=WorkerFaultParams,
        __module__=__name__,
        kind=(Literal[_name], ...),  # type: ignore[arg-type]  # a Literal of a runtime name: pydantic takes it
    )
    register(
        FaultKind(
            _params, DOCKER, injector, targets="worker", deliveries=("out_of_band",),
            sss=SssFacts(DOCKER, sss_injector) if _w.sss else None,
        )
    )  # fmt: skip
