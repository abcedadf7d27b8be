"""The state variables a StatefulProcessor declares, found by running its ``init`` against a handle
that only records (the same way Spark's driver learns them before the query starts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["StateVar", "discover_state_vars"]


@dataclass(frozen=True)
class StateVar:
    name: str
    kind: str  # "value" | "list" | "map"
    ttl_ms: int | None


class _RecordingHandle:
    def __init__(self) -> None:
        self.vars: list[StateVar] = []

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> None:  # noqa: N802, N803
        self.vars.append(StateVar(stateName, "value", ttlDurationMs))

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> None:  # noqa: N802, N803
        self.vars.append(StateVar(stateName, "list", ttlDurationMs))

    def getMapState(
        self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None
    ) -> None:  # noqa: N802, N803
        self.vars.append(StateVar(stateName, "map", ttlDurationMs))

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N802, N803
        self.vars = [v for v in self.vars if v.name != stateName]

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None  # timers and the rest: nothing to record


def discover_state_vars(processor: Any) -> list[StateVar]:
    handle = _RecordingHandle()
    processor.init(handle)
    return handle.vars
