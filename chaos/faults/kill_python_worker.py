"""``kill_python_worker``: SIGKILL one Python worker of an executor (the process running the task's
Python code). Spark clusters."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.executors import executor_target, in_worker_container
from chaos.faults.params import FaultParams
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.process import KillProcess


class KillPythonWorkerFault(FaultParams):
    kind: Literal["kill_python_worker"]


def injector(f: KillPythonWorkerFault, on: FaultTarget, rng: random.Random) -> Injector:
    if (inside := in_worker_container(f.kind, on, f.target_name, rng)) is not None:
        return inside
    eid, _ = executor_target(on.spark, f.target_name, rng)
    workers = on.spark.python_worker_pids().get(eid, [])
    if not workers:
        raise InjectorError(f"executor {eid} has no Python worker running")
    return KillProcess(on.scope, rng.choice(workers), "python_worker")


register(FaultKind(KillPythonWorkerFault, SPARK_CLUSTERS, injector))
