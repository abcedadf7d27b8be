"""``crash_task``: crash one subtask (``target``, else a random running one); the job fails over and
restores from the newest intact checkpoint. Every cluster."""

from __future__ import annotations

import random
from typing import Any, Literal

from chaos.faults.params import FaultParams
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector, NotReady
from chaos.injectors.runtime import CrashTask


class CrashTaskFault(FaultParams):
    kind: Literal["crash_task"]


def injector(f: CrashTaskFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    names = on.executor.task_names()
    if not names:
        raise NotReady("no subtask is running")
    return CrashTask(on.executor, str(f.target) if f.target is not None else rng.choice(names))


def explore(space: Any) -> Any:
    """A crash of a subtask the calibration run deployed, at a checkpoint or a record count it reached."""
    from hypothesis import strategies as st

    at = st.one_of(
        st.integers(1, space.checkpoints).map(lambda n: f"checkpoint:{n}"),
        st.integers(1, max(1, space.records - 1)).map(lambda n: f"records:{n}"),
    )
    return st.fixed_dictionaries({"at": at, "kind": st.just("crash_task"), "target": st.sampled_from(space.tasks)})


# a crash ends at once: it holds no task back
register(FaultKind(CrashTaskFault, EVERY_CLUSTER, injector, targets="task", holds_tasks=False, explore=explore))
