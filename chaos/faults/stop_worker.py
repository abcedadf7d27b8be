"""``stop_worker``: stop a worker container; it is started again when the fault heals. Docker cluster."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.executors import worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import DOCKER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.containers import ContainerFault


class StopWorkerFault(FaultParams):
    kind: Literal["stop_worker"]


def injector(f: StopWorkerFault, on: FaultTarget, rng: random.Random) -> Injector:
    container = worker_container(on, f.target_name, rng)
    return ContainerFault(on.scope, container, f.kind, f.duration_ms is not None)


register(FaultKind(StopWorkerFault, DOCKER, injector))
