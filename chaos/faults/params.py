"""What every fault entry of a scenario has: when it fires (``at``), its ``kind``, an optional
``target`` and ``duration_ms``. Each kind's model adds its own parameters and checks."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, field_validator

from chaos.trigger import Strict, Trigger, coerce_trigger, parse_duration_ms

__all__ = ["FaultParams", "MaybeDuration"]


def _maybe_duration(v: Any) -> Any:
    return None if v is None else parse_duration_ms(v)


# an optional duration in milliseconds, written as 500, "500ms", "2s" or "1m"
MaybeDuration = Annotated[int | None, BeforeValidator(_maybe_duration)]


class FaultParams(Strict):
    at: Trigger
    kind: str
    target: str | int | None = None
    duration_ms: MaybeDuration = None

    _coerce_at = field_validator("at", mode="before")(classmethod(lambda cls, v: coerce_trigger(v)))

    @property
    def target_name(self) -> str | None:
        return None if self.target is None else str(self.target)
