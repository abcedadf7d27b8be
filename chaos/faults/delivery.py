"""How a process fault reaches its executor: ``inband`` (the job's own task on that executor carries
it out, on its host, over the coordinator link: any cluster manager, any host) or ``out_of_band``
(this host signals the executor's process: local-cluster's processes, or a docker worker's container
through the Docker API). The default is out of band where that is possible (local-cluster, docker)
and in band on a ``spark://`` master, whose executors are on other hosts.

The history says which delivery acted: ``fault_start``'s details carry ``delivery``; an in-band fault
is confirmed (or refused, with the reason) by its task in a ``fault_delivered`` event, and a fault
its task never confirmed did not fire (:func:`harness.oracles.fault_schedule.unconfirmed`).
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import model_validator

from chaos.faults.params import FaultParams
from chaos.faults.registry import FaultTarget
from chaos.injectors.base import Injector, InjectorError, NotReady
from harness.driver.controls import ExecutorControls, InbandControls

__all__ = ["Delivery", "ProcessFaultParams", "delivery_of", "InbandProcessFault", "Delivered"]

Delivery = Literal["inband", "out_of_band"]
# the cluster kinds (chaos.scenario.Scenario.cluster_kind) whose executors this host can signal
OUT_OF_BAND_CLUSTERS = ("local", "docker")


class ProcessFaultParams(FaultParams):
    """A fault on an executor's processes: with its ``delivery`` (default: see the module)."""

    delivery: Delivery | None = None

    @model_validator(mode="after")
    def _target_form(self) -> ProcessFaultParams:
        t = self.target_name
        if t is not None and t.startswith("executor:") and not t.removeprefix("executor:").isdigit():
            raise ValueError(f"target {t!r}: expected executor:N or a subtask name")
        return self


def cluster_problem(f: Any, cluster_kind: str) -> str | None:
    """Why ``f``'s delivery cannot work on ``cluster_kind``, or None (scenario validation)."""
    if getattr(f, "delivery", None) == "out_of_band" and cluster_kind not in OUT_OF_BAND_CLUSTERS:
        return (
            f"delivery out_of_band needs cluster local or docker, where this host can signal the executor: "
            f"on {cluster_kind!r} the executors run on other hosts (use delivery: inband)"
        )
    return None


def delivery_of(f: ProcessFaultParams, on: FaultTarget) -> Delivery:
    """The fault's ``delivery``; none: out of band where this host can signal the executors
    (``OUT_OF_BAND_CLUSTERS``), in band elsewhere."""
    if f.delivery is not None:
        return f.delivery
    return "out_of_band" if on.cluster_kind in OUT_OF_BAND_CLUSTERS else "inband"


class InbandProcessFault(Injector):
    """Sends ``action`` to the task running on the targeted executor; that task checks the executor is
    this run's own (its ancestor JVM, by app id and executor id) and acts, or refuses."""

    def __init__(
        self,
        executor: ExecutorControls,  # checked: it must also be InbandControls
        fault: ProcessFaultParams,
        action: str,
        rng: random.Random,
        fault_id: int,
        instant: bool,
    ) -> None:
        from harness.spark.inband_control import NoTaskThere

        if not isinstance(executor, InbandControls):
            raise InjectorError("in-band faults need an executor whose tasks take control messages (Spark)")
        self.executor, self.fault, self.action = executor, fault, action
        self.kind = fault.kind
        self.instant, self.fault_id = instant, fault_id
        try:
            self.to = executor.inband.target(fault.target_name, rng)
        except NoTaskThere as e:
            raise NotReady(str(e)) from None
        except ValueError as e:
            raise InjectorError(str(e)) from None

    def start(self) -> None:
        from harness.spark.inband_control import NoTaskThere

        try:
            self.executor.inband.send(self.fault_id, self.action, self.to, self.fault.duration_ms or 0)
        except NoTaskThere as e:
            raise InjectorError(f"in-band delivery failed: {e}") from None

    def describe(self) -> dict[str, Any]:
        h = self.to.home
        return {
            "kind": self.kind,
            "target": f"executor:{h.executor_id}",
            "delivery": "inband",
            "action": self.action,
            "task": self.to.task,
            "host": h.host,
        }


class Delivered(Injector):
    """An out-of-band injector whose ``describe`` also says ``delivery: out_of_band``."""

    def __init__(self, inner: Injector) -> None:
        self.inner, self.kind, self.instant = inner, inner.kind, inner.instant

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "delivery": "out_of_band"}
