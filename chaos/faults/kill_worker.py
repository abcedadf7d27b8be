"""``kill_worker``: kill a worker container (``worker:N``, else a busy one); with ``duration_ms`` it is
started again when the fault heals, as a supervisor would. Docker cluster."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.executors import worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import DOCKER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.containers import ContainerFault


class KillWorkerFault(FaultParams):
    kind: Literal["kill_worker"]


def injector(f: KillWorkerFault, on: FaultTarget, rng: random.Random) -> Injector:
    container = worker_container(on, f.target_name, rng)
    return ContainerFault(on.scope, container, f.kind, f.duration_ms is not None)


register(FaultKind(KillWorkerFault, DOCKER, injector))
