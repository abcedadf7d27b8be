"""Blast radius: what a run started, and the guard every injector passes before it touches anything.

Injectors act only on the run's own processes, files under its checkpoint root, and containers that
carry its compose project label; anything else is refused with :class:`BlastRadiusError`, so a
mistyped target can never kill a developer's IDE or another team's container.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BlastRadiusError", "RunScope", "PROJECT_LABEL"]

PROJECT_LABEL = "io.statechaos.project"


class BlastRadiusError(PermissionError):
    """An injector was pointed at something the run did not start."""


@dataclass
class RunScope:
    """The things one run owns. ``pids`` is called each time (executors come and go during a run)."""

    run_id: str
    pids: Callable[[], Iterable[int]] = lambda: ()
    paths: list[Path] = field(default_factory=list)
    compose_project: str | None = None

    def check_pid(self, pid: int, what: str = "process") -> int:
        owned = set(self.pids())
        if pid not in owned:
            raise BlastRadiusError(
                f"refusing to touch {what} pid {pid}: it was not started by run {self.run_id} "
                f"(run-owned pids: {sorted(owned) or 'none'})"
            )
        return pid

    def check_path(self, path: Path) -> Path:
        p = Path(path).resolve()
        for root in self.paths:
            r = Path(root).resolve()
            if p == r or r in p.parents:
                return p
        raise BlastRadiusError(
            f"refusing to touch {p}: it is outside run {self.run_id}'s directories "
            f"({', '.join(str(r) for r in self.paths) or 'none'})"
        )

    def check_container(self, container: Any) -> Any:
        labels = (getattr(container, "labels", None) or {}) if not isinstance(container, dict) else container
        name = getattr(container, "name", "?")
        if self.compose_project is None:
            raise BlastRadiusError(
                f"refusing to touch container {name}: run {self.run_id} started no containers"
            )
        found = labels.get(PROJECT_LABEL) or labels.get("com.docker.compose.project")
        if found != self.compose_project:
            raise BlastRadiusError(
                f"refusing to touch container {name}: its project label is {found!r}, "
                f"not this run's {self.compose_project!r}"
            )
        return container
