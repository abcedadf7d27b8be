"""``kill_python_worker``: SIGKILL one Python worker of an executor (the process running the task's
Python code), or with ``process: daemon`` its ``pyspark.daemon`` (and with it every worker it forked).
Spark clusters. In band, the targeted executor's task kills its own worker (or the daemon above it);
see :mod:`chaos.faults.delivery`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from chaos.faults.delivery import Delivered, InbandProcessFault, ProcessFaultParams, delivery_of
from chaos.faults.executors import executor_target, in_worker_container, spark_of
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, FaultTarget, SssFacts, SssTarget, register
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


class ArmPythonWorkerKill(Injector):
    """A Structured Streaming query's Python worker kill, armed in band through the run directory every
    executor sees (:mod:`harness.sss.python_faults`), on any cluster: the next processor call kills
    its own worker (or its daemon). The history says ``fault_armed`` now, and ``fault_start`` when
    the kill fires (the run loop reads the worker's marker file)."""

    instant = True
    armed = True  # struck later, by the query's own code

    def __init__(self, f: Any, on: SssTarget) -> None:
        self.kind, self.process, self.run_dir = f.kind, f.process, on.run_dir

    def start(self) -> None:
        from harness.sss.python_faults import arm

        arm(self.run_dir, self.process)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "process": self.process}


def sss_injector(f: Any, on: SssTarget, rng: random.Random) -> Injector:
    return ArmPythonWorkerKill(f, on)


def sss_settings(run_dir: Path) -> dict[str, Any]:
    """The query's driver wraps the processor to take an armed kill from this file."""
    from harness.sss.python_faults import ARMED

    return {"python_fault_file": str(run_dir / ARMED)}


def sss_watch(kind: str, on: SssTarget, final: bool) -> None:
    """The armed kills that fired (or could not) since the last look, each read once from its marker
    file: a ``fault_start`` at the batch it was armed for (the batch whose first processor call took
    it); at the end, a kill still armed did not strike."""
    from harness.sss.python_faults import ARMED, fired

    for f in fired(on.run_dir):
        if "why" in f:
            on.query.skipped(kind, f["why"])
        else:
            on.query.confirmed(kind, f"python {f['process']} pid {f['pid']}", "first processor call after it was armed",
                               process=f["process"])  # fmt: skip
    if final and (on.run_dir / ARMED).exists():
        (on.run_dir / ARMED).unlink()
        on.query.skipped(kind, "no call of the processor came after it was armed (no batch with input or timers)",
                         armed_batch=False)  # fmt: skip


register(
    FaultKind(
        KillPythonWorkerFault, SPARK_CLUSTERS, injector, targets="executor", deliveries=("inband", "out_of_band"),
        sss=SssFacts(SPARK_CLUSTERS, sss_injector, options=("process",), settings=sss_settings, watch=sss_watch),
    )
)  # fmt: skip
