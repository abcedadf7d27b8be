"""``pause_worker``: freeze a worker container (cgroup freezer) for ``duration_ms``. Docker cluster."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.executors import worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import DOCKER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.containers import ContainerFault


class PauseWorkerFault(FaultParams):
    kind: Literal["pause_worker"]

    @model_validator(mode="after")
    def _needs(self) -> PauseWorkerFault:
        if self.duration_ms is None:
            raise ValueError(f"{self.kind} needs duration_ms (how long the target stays paused)")
        return self


def injector(f: PauseWorkerFault, on: FaultTarget, rng: random.Random) -> Injector:
    container = worker_container(on, f.target_name, rng)
    return ContainerFault(on.scope, container, f.kind, f.duration_ms is not None)


register(FaultKind(PauseWorkerFault, DOCKER, injector))
