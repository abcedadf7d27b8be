"""Why a checkpoint was aborted, as data rather than prose: a reason named after Flink's
``CheckpointFailureReason`` and the fields that go with it (the checkpoint that subsumed it, the
subtask that declined it). The history's ``checkpoint_aborted`` carries both the structured cause
(``cause``, ``subsumed_by``) and the sentence a person reads (``reason``, :attr:`AbortCause.text`),
so oracles match on the cause and never parse the sentence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["AbortReason", "AbortCause"]


class AbortReason(StrEnum):
    """Flink's ``CheckpointFailureReason`` values that this coordinator produces."""

    CHECKPOINT_EXPIRED = "expired"  # not acknowledged by every subtask within the timeout
    CHECKPOINT_DECLINED = "declined"  # a subtask could not take it (counts toward the tolerable failures)
    CHECKPOINT_SUBSUMED = "subsumed"  # a newer checkpoint completed first
    COORDINATOR_SUSPEND = "coordinator_suspend"  # the attempt ended (a restart, a rescale): pending ones go
    COORDINATOR_SHUTDOWN = "coordinator_shutdown"  # in flight when the driver holding the coordinator died


@dataclass(frozen=True)
class AbortCause:
    """One abort's cause; ``text`` is the sentence the history's ``reason`` has always held."""

    reason: AbortReason
    subsumed_by: int | None = None  # CHECKPOINT_SUBSUMED: the checkpoint that completed
    operator: str | None = None  # CHECKPOINT_DECLINED: the subtask that declined, and why
    subtask: int | None = None
    detail: str = ""  # CHECKPOINT_DECLINED: the subtask's reason; COORDINATOR_SUSPEND: why the attempt ended

    @staticmethod
    def subsumed(by: int) -> AbortCause:
        return AbortCause(AbortReason.CHECKPOINT_SUBSUMED, subsumed_by=by)

    @staticmethod
    def declined(operator: str, subtask: int, why: str) -> AbortCause:
        return AbortCause(AbortReason.CHECKPOINT_DECLINED, operator=operator, subtask=subtask, detail=why)

    @property
    def text(self) -> str:
        match self.reason:
            case AbortReason.CHECKPOINT_EXPIRED:
                return "expired"
            case AbortReason.CHECKPOINT_DECLINED:
                return f"declined by {self.operator}[{self.subtask}]: {self.detail}"
            case AbortReason.CHECKPOINT_SUBSUMED:
                return f"subsumed by checkpoint {self.subsumed_by}"
            case AbortReason.COORDINATOR_SHUTDOWN:
                return self.detail or "in flight when the previous driver died"
            case _:
                return self.detail
