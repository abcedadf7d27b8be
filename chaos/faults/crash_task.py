"""``crash_task``: crash one subtask (``target``, else a random running one); the job fails over and
restores from the newest intact checkpoint. Every cluster."""

from __future__ import annotations

import random
from typing import Literal

from chaos.faults.params import FaultParams
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector, NotReady
from chaos.injectors.runtime import CrashTask


class CrashTaskFault(FaultParams):
    kind: Literal["crash_task"]


def injector(f: CrashTaskFault, on: FaultTarget, rng: random.Random) -> Injector:
    names = on.executor.task_names()
    if not names:
        raise NotReady("no subtask is running")
    return CrashTask(on.executor, f.target_name if f.target is not None else rng.choice(names))


register(FaultKind(CrashTaskFault, EVERY_CLUSTER, injector))
