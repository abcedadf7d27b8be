"""A verdict: which oracle, whether its property holds, one-line summary and the evidence behind it.

Three-valued, as Jepsen's checkers are: a property *holds*, *fails* (with evidence), or is *unknown*
(the oracle crashed or cannot apply to this run, and says why). Only "holds" counts as a pass: a check
that could not decide has proven nothing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Verdict", "Status", "MAX_DETAILS", "status_of"]

MAX_DETAILS = 40


class Status(StrEnum):
    HOLDS = "holds"
    FAILS = "fails"
    UNKNOWN = "unknown"


@dataclass
class Verdict:
    oracle: str
    passed: bool  # the property holds (status == "holds"); kept as a field for readers of old JSON
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    status: Status | None = None  # derived from ``passed`` unless given (``unknown``)

    def __post_init__(self) -> None:
        if self.status is None:
            self.status = Status.HOLDS if self.passed else Status.FAILS
        self.status = Status(self.status)
        if (self.status is Status.HOLDS) != self.passed:
            raise ValueError(f"verdict {self.oracle}: passed={self.passed} contradicts status {self.status}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        return d

    @staticmethod
    def of(oracle: str, problems: list[str], ok: str, bad: str, **data: Any) -> Verdict:
        """Holds when ``problems`` is empty; otherwise fails, the first problems being the details."""
        if not problems:
            return Verdict(oracle, True, ok, [], data)
        more = [f"... and {len(problems) - MAX_DETAILS} more"] if len(problems) > MAX_DETAILS else []
        return Verdict(oracle, False, bad.format(n=len(problems)), problems[:MAX_DETAILS] + more, data)

    @staticmethod
    def unknown(oracle: str, why: str, details: list[str] | None = None) -> Verdict:
        """The oracle could not decide (it crashed, or the run gives it nothing to judge)."""
        return Verdict(oracle, False, f"unknown: {why}", list(details or []), status=Status.UNKNOWN)


def status_of(v: dict[str, Any]) -> str:
    """The status of a verdict as stored in JSON (``outcome.json`` of older runs has only ``passed``)."""
    return str(v.get("status") or ("holds" if v.get("passed") else "fails"))
