"""``partition_worker``: cut a worker container off the run's network until the fault heals. Docker
cluster."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.executors import worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import DOCKER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.containers import PartitionContainer


class PartitionWorkerFault(FaultParams):
    kind: Literal["partition_worker"]


def injector(f: PartitionWorkerFault, on: FaultTarget, rng: random.Random) -> Injector:
    assert on.docker.stack is not None
    return PartitionContainer(on.scope, worker_container(on, f.target_name, rng), on.docker.stack.network())


register(FaultKind(PartitionWorkerFault, DOCKER, injector))
