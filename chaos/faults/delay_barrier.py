"""``delay_barrier``: hold the next checkpoint barrier on one channel (``channel``, else a random one)
for ``delay_ms``. Every cluster."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.params import FaultParams, MaybeDuration
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from chaos.injectors.runtime import DelayBarrier


class DelayBarrierFault(FaultParams):
    kind: Literal["delay_barrier"]
    delay_ms: MaybeDuration = None
    channel: str | None = None  # "source[0]->count[1]"

    @model_validator(mode="after")
    def _needs(self) -> DelayBarrierFault:
        if self.delay_ms is None:
            raise ValueError("delay_barrier needs delay_ms (how long the barrier is held on its channel)")
        return self


def injector(f: DelayBarrierFault, on: FaultTarget, rng: random.Random) -> Injector:
    channels = on.executor.channel_names()
    return DelayBarrier(on.executor, f.channel or rng.choice(channels), f.delay_ms or 0)


register(FaultKind(DelayBarrierFault, EVERY_CLUSTER, injector))
