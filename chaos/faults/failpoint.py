"""``failpoint``: crash or delay a subtask when it reaches a named point of the runtime
(``at: {failpoint: NAME}``), or (``drop``, at ``notify_checkpoint_complete``) lose the completion
notice a sink subtask is sent, as Flink's best-effort RPC may: a later completion or a restore must
commit the transactions it left pending. The runtime acts at the failpoint itself
(``Nemesis.on_failpoint``), so there is no injector. Every cluster."""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import model_validator

from chaos.faults.params import FaultParams, MaybeDuration
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector
from harness.tasks.failpoints import FAILPOINTS


class FailpointFault(FaultParams):
    kind: Literal["failpoint"]
    action: Literal["crash", "delay", "drop"] | None = None
    delay_ms: MaybeDuration = None

    @model_validator(mode="after")
    def _needs(self) -> FailpointFault:
        if self.at.failpoint is None:
            raise ValueError("a failpoint fault needs at: {failpoint: NAME}")
        if self.action is None:
            raise ValueError("a failpoint fault needs action: crash, delay or drop")
        if self.action == "drop" and self.at.failpoint != "notify_checkpoint_complete":
            raise ValueError(
                "action: drop loses a checkpoint's completion notice: it applies to failpoint "
                "notify_checkpoint_complete only"
            )
        if self.action == "delay" and self.delay_ms is None:
            raise ValueError("action: delay needs delay_ms")
        return self


def injector(f: FailpointFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector | None:
    return None


def explore(space: Any) -> Any:
    """A crash at a named failpoint, of any subtask or of one the calibration run deployed."""
    from hypothesis import strategies as st

    return st.builds(
        lambda fp, target: {
            "at": f"failpoint:{fp}",
            "kind": "failpoint",
            "action": "crash",
            **({"target": target} if target else {}),
        },
        st.sampled_from(FAILPOINTS),
        st.one_of(st.none(), st.sampled_from(space.tasks)),
    )


# its delay holds the task at the failpoint
register(FaultKind(FailpointFault, EVERY_CLUSTER, injector, targets="task", explore=explore))
