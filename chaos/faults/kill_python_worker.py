"""``kill_python_worker``: SIGKILL one Python worker of an executor (the process running the task's
Python code), or with ``process: daemon`` its ``pyspark.daemon`` (and with it every worker it forked).
Spark clusters. In band, the targeted executor's task kills its own worker (or the daemon above it);
see :mod:`chaos.faults.delivery`."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.delivery import Delivered, InbandProcessFault, ProcessFaultParams, delivery_of
from chaos.faults.executors import executor_target, in_worker_container, spark_of
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.process import KillProcess

# in a docker worker's container: the workers the pyspark daemon forked (the daemon itself is
# ``process: daemon``, in band only)
_FORKED_WORKERS = "for d in $(pgrep -f '[p]yspark.daemon'); do pgrep -P $d; done"


class KillPythonWorkerFault(ProcessFaultParams):
    kind: Literal["kill_python_worker"]
    process: Literal["worker", "daemon"] = "worker"

    @model_validator(mode="after")
    def _daemon_where(self) -> KillPythonWorkerFault:
        if self.process == "daemon" and self.delivery == "out_of_band":
            raise ValueError("process: daemon is delivered in band only (delivery: inband)")
        return self


def injector(f: KillPythonWorkerFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    if f.process == "daemon" or delivery_of(f, on) == "inband":
        action = "kill_python_daemon" if f.process == "daemon" else "kill_python_worker"
        return InbandProcessFault(on.executor, f, action, rng, fault_id, instant=True)
    if (inside := in_worker_container(f.kind, on, f.target_name, "KILL", _FORKED_WORKERS, rng)) is not None:
        return Delivered(inside)
    spark = spark_of(on)
    eid, _ = executor_target(spark, f.target_name, rng)
    workers = spark.python_worker_pids().get(eid, [])
    if not workers:
        raise InjectorError(f"executor {eid} has no Python worker running")
    return Delivered(KillProcess(on.scope, rng.choice(workers), "python_worker", f.kind))


# a Structured Streaming query's Python workers are killed in band, through the run directory every
# executor sees (harness.sss.python_faults): the query's run loop arms it, on any cluster
register(
    FaultKind(
        KillPythonWorkerFault, SPARK_CLUSTERS, injector, targets="executor", deliveries=("inband", "out_of_band"),
        sss_clusters=SPARK_CLUSTERS,
    )
)  # fmt: skip
