"""``kill_executor``: SIGKILL an executor JVM (``executor:N``, the executor running a subtask, else a
random one); Spark relaunches it and the job restores. Spark clusters: in band (the executor's own
task kills its ancestor JVM) or out of band (this host, or inside the docker worker's container);
see :mod:`chaos.faults.delivery`."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.delivery import Delivered, InbandProcessFault, ProcessFaultParams, delivery_of
from chaos.faults.executors import (
    EXECUTOR_JVM,
    executor_target,
    in_worker_container,
    spark_of,
    sss_executor_signal,
)
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, SssFacts, register
from chaos.injectors.base import Injector
from chaos.injectors.process import KillProcess


class KillExecutorFault(ProcessFaultParams):
    kind: Literal["kill_executor"]


def injector(f: KillExecutorFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    if delivery_of(f, on) == "inband":
        return InbandProcessFault(on.executor, f, "kill_executor", rng, fault_id, instant=True)
    if (inside := in_worker_container(f.kind, on, f.target_name, "KILL", EXECUTOR_JVM, rng)) is not None:
        return Delivered(inside)
    _, pid = executor_target(spark_of(on), f.target_name, rng)
    return Delivered(KillProcess(on.scope, pid, "executor", f.kind))


register(
    FaultKind(
        KillExecutorFault, SPARK_CLUSTERS, injector, targets="executor", deliveries=("inband", "out_of_band"),
        sss=SssFacts(("local", "docker"), sss_executor_signal("KILL"), options=("at",)),
    )
)  # fmt: skip
