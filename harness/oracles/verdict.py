"""A verdict: which oracle, whether its property holds, one-line summary and the evidence behind it.

Three-valued, as Jepsen's checkers are: a property *holds*, *fails* (with evidence), or is *unknown*
(the oracle crashed or cannot apply to this run, and says why). Only "holds" counts as a pass: a check
that could not decide has proven nothing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Verdict", "Status", "MAX_DETAILS", "status_of", "fair_share"]

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
        """The JSON form (``outcome.json``, ``--json``, Allure): verdicts stay objects until then."""
        d = asdict(self)
        d["status"] = str(self.status)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Verdict:
        """A verdict read back from its JSON form (older files have no ``status``)."""
        return Verdict(
            str(d["oracle"]), bool(d["passed"]), str(d.get("summary", "")), list(d.get("details") or []),
            dict(d.get("data") or {}), Status(status_of(d)),
        )  # fmt: skip

    @property
    def holds(self) -> bool:
        return self.status is Status.HOLDS

    @property
    def fails(self) -> bool:
        return self.status is Status.FAILS

    def __getitem__(self, key: str) -> Any:
        """A field by its JSON name: tests written against the JSON form (``v["status"]``) read a
        verdict object unchanged."""
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    @staticmethod
    def of(oracle: str, problems: list[str], ok: str, bad: str, **data: Any) -> Verdict:
        """Holds when ``problems`` is empty; otherwise fails, the first problems being the details."""
        if not problems:
            return Verdict(oracle, True, ok, [], data)
        more = [f"... and {len(problems) - MAX_DETAILS} more"] if len(problems) > MAX_DETAILS else []
        return Verdict(oracle, False, bad.format(n=len(problems)), problems[:MAX_DETAILS] + more, data)

    @staticmethod
    def of_kinds(oracle: str, kinds: dict[str, list[str]], ok: str, bad: str, **data: Any) -> Verdict:
        """As :meth:`of`, for problems of several kinds (in the order given: pairs first): the
        details give every kind a fair share of the bound, so no kind hides another (a changed
        record shows as what was lost *and* what came instead), and what is left out is counted
        per kind."""
        problems = [p for ps in kinds.values() for p in ps]
        if not problems:
            return Verdict(oracle, True, ok, [], data)
        shown = fair_share([len(ps) for ps in kinds.values()], MAX_DETAILS)
        details = [p for ps, n in zip(kinds.values(), shown, strict=True) for p in ps[:n]]
        left = {k: len(ps) - n for (k, ps), n in zip(kinds.items(), shown, strict=True) if len(ps) > n}
        if left:
            details.append(
                f"... and {sum(left.values())} more (" + ", ".join(f"{n} {k}" for k, n in left.items()) + ")"
            )
        return Verdict(oracle, False, bad.format(n=len(problems)), details, data)

    @staticmethod
    def unknown(oracle: str, why: str, details: list[str] | None = None, **data: Any) -> Verdict:
        """The oracle could not decide (it crashed, or the run gives it nothing to judge)."""
        return Verdict(oracle, False, f"unknown: {why}", list(details or []), data, status=Status.UNKNOWN)


def fair_share(sizes: list[int], limit: int) -> list[int]:
    """How many of each list to show within ``limit`` in all: one each in turn (round robin), so
    every non-empty list gets at least ``limit // len(sizes)`` and none is cut while another holds
    room it cannot use."""
    shown = [0] * len(sizes)
    while sum(shown) < limit and any(n < s for n, s in zip(shown, sizes, strict=True)):
        for i, s in enumerate(sizes):
            if shown[i] < s and sum(shown) < limit:
                shown[i] += 1
    return shown


def status_of(v: dict[str, Any]) -> str:
    """The status of a verdict as stored in JSON (``outcome.json`` of older runs has only ``passed``)."""
    return str(v.get("status") or ("holds" if v.get("passed") else "fails"))
