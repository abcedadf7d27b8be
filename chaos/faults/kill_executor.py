"""``kill_executor``: SIGKILL an executor JVM (``executor:N``, else a random one); Spark relaunches it
and the job restores. Spark clusters (on docker: inside the worker's container)."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.executors import executor_target, in_worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.process import KillProcess


class KillExecutorFault(FaultParams):
    kind: Literal["kill_executor"]


def injector(f: KillExecutorFault, on: FaultTarget, rng: random.Random) -> Injector:
    if (inside := in_worker_container(f.kind, on, f.target_name, rng)) is not None:
        return inside
    _, pid = executor_target(on.spark, f.target_name, rng)
    return KillProcess(on.scope, pid, "executor")


register(FaultKind(KillExecutorFault, SPARK_CLUSTERS, injector))
