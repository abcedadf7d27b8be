"""Fault kinds, one module each holding every fact about its kind (:class:`FaultKind`: parameters,
clusters, injector, target, whether it holds tasks, explore generator, delivery, Structured Streaming);
the docker worker kinds share one module, a table of their differences.

Importing this package registers every kind; adding a kind is one module and one line below.
"""

import random
from collections.abc import Callable
from typing import Any

from chaos.faults import (  # noqa: F401  (each module registers its kind on import)
    checkpoint_damage,
    clock_skew,
    crash_task,
    delay_barrier,
    failpoint,
    kill_driver,
    kill_executor,
    kill_python_worker,
    network,
    pause_executor,
    storage,
    workers,
)
from chaos.faults.params import FaultParams
from chaos.faults.registry import FAULT_KINDS, FaultKind, FaultTarget
from chaos.injectors.base import Injector

__all__ = ["FAULT_KINDS", "FaultKind", "FaultParams", "FaultTarget", "fault_injector"]


def fault_injector(on: FaultTarget) -> Callable[[Any, random.Random], Injector | None]:
    """The Nemesis' injector factory for a run: each planned fault's kind builds its injector."""

    def build(planned: Any, rng: random.Random) -> Injector | None:
        return FAULT_KINDS[planned.fault.kind].injector(planned.fault, on, rng, planned.fault_id)

    return build
