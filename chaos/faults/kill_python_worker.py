"""``kill_python_worker``: SIGKILL one Python worker of an executor (the process running the task's
Python code), or with ``process: daemon`` its ``pyspark.daemon`` (and with it every worker it forked).
Spark clusters. In band, the targeted executor's task kills its own worker (or the daemon above it);
see :mod:`chaos.faults.delivery`."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.delivery import Delivered, InbandProcessFault, ProcessFaultParams, delivery_of
from chaos.faults.executors import executor_target, in_worker_container
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.process import KillProcess


class KillPythonWorkerFault(ProcessFaultParams):
    kind: Literal["kill_python_worker"]
    process: Literal["worker", "daemon"] = "worker"

    @model_validator(mode="after")
    def _daemon_where(self) -> KillPythonWorkerFault:
        if self.process == "daemon" and self.delivery == "out_of_band":
            raise ValueError("process: daemon is delivered in band only (delivery: inband)")
        return self


def injector(f: KillPythonWorkerFault, on: FaultTarget, rng: random.Random) -> Injector:
    if f.process == "daemon" or delivery_of(f, on) == "inband":
        action = "kill_python_daemon" if f.process == "daemon" else "kill_python_worker"
        return InbandProcessFault(on.executor, f, action, rng)
    if (inside := in_worker_container(f.kind, on, f.target_name, rng)) is not None:
        return Delivered(inside)
    eid, _ = executor_target(on.spark, f.target_name, rng)
    workers = on.spark.python_worker_pids().get(eid, [])
    if not workers:
        raise InjectorError(f"executor {eid} has no Python worker running")
    return Delivered(KillProcess(on.scope, rng.choice(workers), "python_worker"))


register(FaultKind(KillPythonWorkerFault, SPARK_CLUSTERS, injector))
