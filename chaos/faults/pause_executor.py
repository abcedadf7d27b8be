"""``pause_executor``: SIGSTOP an executor JVM (and its Python processes) for ``duration_ms``, then
SIGCONT. Spark clusters. In band, a detached helper the task starts on the executor's host, in its own
session, sends the SIGCONT (the task itself is frozen with its executor); see
:mod:`chaos.faults.delivery`."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

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
from chaos.injectors.process import PauseProcess


class PauseExecutorFault(ProcessFaultParams):
    kind: Literal["pause_executor"]

    @model_validator(mode="after")
    def _needs(self) -> PauseExecutorFault:
        if self.duration_ms is None:
            raise ValueError(f"{self.kind} needs duration_ms (how long the target stays paused)")
        return self


def injector(f: PauseExecutorFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    if delivery_of(f, on) == "inband":
        return InbandProcessFault(on.executor, f, "pause_executor", rng, fault_id, instant=False)
    if (inside := in_worker_container(f.kind, on, f.target_name, "STOP", EXECUTOR_JVM, rng)) is not None:
        return Delivered(inside)
    _, pid = executor_target(spark_of(on), f.target_name, rng)
    return Delivered(PauseProcess(on.scope, pid, "executor", f.kind))


register(
    FaultKind(
        PauseExecutorFault, SPARK_CLUSTERS, injector, targets="executor", deliveries=("inband", "out_of_band"),
        sss=SssFacts(("local", "docker"), sss_executor_signal("STOP")),
    )
)  # fmt: skip
