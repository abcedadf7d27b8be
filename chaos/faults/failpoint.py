"""``failpoint``: crash or delay a subtask when it reaches a named point of the runtime
(``at: {failpoint: NAME}``); the runtime acts at the failpoint itself (``Nemesis.on_failpoint``),
so there is no injector. Every cluster."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.params import FaultParams, MaybeDuration
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector


class FailpointFault(FaultParams):
    kind: Literal["failpoint"]
    action: Literal["crash", "delay"] | None = None
    delay_ms: MaybeDuration = None

    @model_validator(mode="after")
    def _needs(self) -> FailpointFault:
        if self.at.failpoint is None:
            raise ValueError("a failpoint fault needs at: {failpoint: NAME}")
        if self.action is None:
            raise ValueError("a failpoint fault needs action: crash or delay")
        if self.action == "delay" and self.delay_ms is None:
            raise ValueError("action: delay needs delay_ms")
        return self


def injector(f: FailpointFault, on: FaultTarget, rng: random.Random) -> Injector | None:
    return None


register(FaultKind(FailpointFault, EVERY_CLUSTER, injector))
