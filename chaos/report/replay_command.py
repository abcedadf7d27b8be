"""The one shell command that replays a run, printed by the CLI, the pytest plugin and Allure alike."""

from __future__ import annotations

import shlex
from pathlib import Path

__all__ = ["replay_command"]


def replay_command(run_dir: Path) -> str:
    return f"statechaos replay {shlex.quote(str(run_dir))}"
