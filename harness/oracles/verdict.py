"""A verdict: which oracle, whether it holds, one-line summary and the evidence that explains it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Verdict", "MAX_DETAILS"]

MAX_DETAILS = 40


@dataclass
class Verdict:
    oracle: str
    passed: bool
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def of(oracle: str, problems: list[str], ok: str, bad: str, **data: Any) -> Verdict:
        """Pass when ``problems`` is empty; otherwise the first problems are the details."""
        if not problems:
            return Verdict(oracle, True, ok, [], data)
        more = [f"... and {len(problems) - MAX_DETAILS} more"] if len(problems) > MAX_DETAILS else []
        return Verdict(oracle, False, bad.format(n=len(problems)), problems[:MAX_DETAILS] + more, data)
