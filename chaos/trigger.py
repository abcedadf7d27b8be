"""When a fault or a rescale step fires (a trigger), and the durations scenario files write.

Shared by the scenario model and every fault kind (``chaos.faults``), so neither imports the other.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.tasks.failpoints import FAILPOINTS  # the runtime owns its failpoint names

__all__ = ["Duration", "Strict", "Trigger", "coerce_trigger", "parse_duration_ms"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def parse_duration_ms(value: Any) -> int:
    """``250``, ``"250ms"``, ``"2s"``, ``"1.5m"`` -> milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 500, '500ms', '2s' or '1m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration must be >= 0")
        return int(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            n = float(m.group(1))
            return int(n * {"ms": 1, None: 1, "s": 1000, "m": 60_000}[m.group(2)])
    raise ValueError(f"expected a duration such as 500, '500ms', '2s' or '1m', got {value!r}")


Duration = Annotated[int, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Trigger(Strict):
    """When a fault or rescale fires: exactly one of time, checkpoint, records, failpoint, random. A
    failpoint may also name a ``checkpoint``: it is armed once that checkpoint completed, and fires at
    its first hit after (e.g. the sink's commit of a later checkpoint or savepoint, not checkpoint 1's)."""

    time_ms: Duration | None = None
    checkpoint: Annotated[int, Field(ge=1)] | None = None
    records: Annotated[int, Field(ge=0)] | None = None
    failpoint: str | None = None
    random: Annotated[int, Field(ge=1, description="how many firings, at seeded random times")] | None = None
    within_ms: Duration | None = None  # window for random triggers
    # fire this long after a checkpoint or records trigger is reached (e.g. in the middle of the next
    # checkpoint's barrier alignment, which the completion of the previous one cannot catch)
    after_ms: Duration | None = None

    @field_validator("time_ms", "within_ms", "after_ms", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration_ms(v)

    @field_validator("failpoint")
    @classmethod
    def _known_failpoint(cls, v: str | None) -> str | None:
        if v is not None and v not in FAILPOINTS:
            raise ValueError(f"unknown failpoint {v!r}; expected one of: {', '.join(FAILPOINTS)}")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> Trigger:
        set_ = [
            k
            for k in ("time_ms", "checkpoint", "records", "failpoint", "random")
            if getattr(self, k) is not None and not (k == "checkpoint" and self.failpoint is not None)
        ]
        if len(set_) != 1:
            raise ValueError(
                "a trigger needs exactly one of time_ms, checkpoint, records, failpoint, random "
                f"(got {', '.join(set_) or 'none'})"
            )
        if self.within_ms is not None and self.random is None:
            raise ValueError("within_ms only applies to random triggers")
        if self.after_ms is not None and self.failpoint is not None:
            raise ValueError("after_ms only applies to checkpoint and records triggers")
        if self.after_ms is not None and self.checkpoint is None and self.records is None:
            raise ValueError("after_ms only applies to checkpoint and records triggers")
        return self

    @property
    def kind(self) -> str:
        for k in ("time_ms", "failpoint", "checkpoint", "records", "random"):
            if getattr(self, k) is not None:
                return k
        raise AssertionError("validated trigger has a kind")

    def describe(self) -> str:
        after = f"+{self.after_ms}ms" if self.after_ms else ""
        armed = (
            f" after checkpoint {self.checkpoint}" if self.failpoint is not None and self.checkpoint else ""
        )
        return f"{self.kind}={getattr(self, self.kind)}{after}{armed}"


def coerce_trigger(v: Any) -> Any:
    """Accept shorthand strings: ``"checkpoint:3"``, ``"time:2s"``, ``"records:1000"``, ``"failpoint:x"``,
    ``"random:5"``."""
    if isinstance(v, str):
        if ":" not in v:
            raise ValueError(
                f"trigger {v!r}: expected 'checkpoint:N', 'time:2s', 'records:N', 'failpoint:NAME' or 'random:N'"
            )
        kind, _, arg = v.partition(":")
        kind = kind.strip()
        key = {
            "time": "time_ms",
            "checkpoint": "checkpoint",
            "records": "records",
            "failpoint": "failpoint",
            "random": "random",
        }.get(kind)
        if key is None:
            raise ValueError(f"trigger {v!r}: unknown trigger kind {kind!r}")
        return {key: arg.strip()}
    return v
