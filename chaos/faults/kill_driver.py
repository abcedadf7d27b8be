"""``kill_driver``: kill a Structured Streaming query's driver (its process group: the JVM and, on
local-cluster, its executors), then start a new driver from the checkpoint location, as a supervisor
restarts a lost driver host. Structured Streaming queries only; with ``at`` it strikes inside the sink
window of a batch (:mod:`harness.sss.sink`)."""

from __future__ import annotations

import random
from typing import Any, Literal

from chaos.faults.params import FaultParams
from chaos.faults.registry import SPARK_CLUSTERS, FaultKind, SssFacts, SssTarget, register, runtime_none
from chaos.injectors.base import Injector


class KillDriverFault(FaultParams):
    kind: Literal["kill_driver"]


def described() -> dict[str, Any]:
    """A driver kill as the history names it (a checkpoint damage fault rides on one)."""
    return {"kind": "kill_driver", "target": "driver process group"}


class KillDriver(Injector):
    instant = True

    def __init__(self, kind: str, on: SssTarget) -> None:
        self.kind, self.on = kind, on

    def start(self) -> None:
        self.on.query.kill_driver()
        self.on.query.restart_driver()

    def describe(self) -> dict[str, Any]:
        return described()


def sss_injector(f: Any, on: SssTarget, rng: random.Random) -> Injector:
    return KillDriver(f.kind, on)


register(FaultKind(KillDriverFault, (), runtime_none, sss=SssFacts(SPARK_CLUSTERS, sss_injector, options=("at",))))
