"""``clock_skew``: shift one subtask's processing-time clock by ``skew_ms`` (TTL expiry, timers).
Every cluster."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.params import FaultParams
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.runtime import SkewClock


class ClockSkewFault(FaultParams):
    kind: Literal["clock_skew"]
    skew_ms: int | None = None

    @model_validator(mode="after")
    def _needs(self) -> ClockSkewFault:
        if self.skew_ms is None:
            raise ValueError("clock_skew needs skew_ms")
        return self


def injector(f: ClockSkewFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    target = str(f.target) if f.target is not None else rng.choice(on.executor.task_names())
    return SkewClock(on.executor, target, int(f.skew_ms or 0))


# a skewed clock keeps no task from acting
register(FaultKind(ClockSkewFault, EVERY_CLUSTER, injector, targets="task", holds_tasks=False))
