"""Fault kinds, one module each (its parameters, clusters, checks and injector factory).

Importing this package registers every kind; adding a kind is one module and one line below.
"""

import random
from collections.abc import Callable
from typing import Any

from chaos.faults import (  # noqa: F401  (each module registers its kind on import)
    clock_skew,
    crash_task,
    delay_barrier,
    failpoint,
    kill_executor,
    kill_python_worker,
    kill_worker,
    network,
    partition_worker,
    pause_executor,
    pause_worker,
    restart_worker,
    stop_worker,
    storage,
)
from chaos.faults.params import FaultParams
from chaos.faults.registry import FAULT_KINDS, FaultKind, FaultTarget
from chaos.injectors.base import Injector

__all__ = ["FAULT_KINDS", "FaultKind", "FaultParams", "FaultTarget", "fault_injector"]


def fault_injector(on: FaultTarget) -> Callable[[Any, random.Random], Injector | None]:
    """The Nemesis' injector factory for a run: each planned fault's kind builds its injector."""

    def build(planned: Any, rng: random.Random) -> Injector | None:
        injector = FAULT_KINDS[planned.fault.kind].injector(planned.fault, on, rng)
        if hasattr(injector, "fault_id"):  # an in-band fault names its fault in the task's reply
            injector.fault_id = planned.fault_id
        return injector

    return build
