"""``delay_barrier``: hold the next checkpoint barrier on one channel (``channel``, else a random one)
for ``delay_ms``. Every cluster."""

from __future__ import annotations

import random
from typing import Any, Literal

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


def injector(f: DelayBarrierFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    channels = on.executor.channel_names()
    return DelayBarrier(on.executor, f.channel or rng.choice(channels), f.delay_ms or 0)


def explore(space: Any) -> Any:
    """A barrier held up to 300 ms on a random channel, at a checkpoint the calibration run reached."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries(
        {
            "at": st.integers(1, space.checkpoints).map(lambda n: f"checkpoint:{n}"),
            "kind": st.just("delay_barrier"),
            "delay_ms": st.integers(1, 300),
        }
    )


# a held barrier keeps no task from acting on an abort notification
register(
    FaultKind(DelayBarrierFault, EVERY_CLUSTER, injector, targets="channel", holds_tasks=False, explore=explore)
)
