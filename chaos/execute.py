"""Executes a validated scenario on its cluster and returns the oracle verdicts.

This is where the executors plug in: ``sim`` (harness.sim) and ``spark`` (harness.spark) drive the
same job graph, the :class:`~chaos.schedule.Nemesis` fires the scenario's faults through the
executor's injectors, and ``harness.oracles`` checks the run. Until the dataflow runtime ships, a run
stops here with a clear message (exit 2) rather than pretending to have run anything.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from chaos.errors import EnvironmentProblem
from chaos.scenario import Scenario

__all__ = ["execute_scenario"]


def execute_scenario(sc: Scenario, run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run ``sc`` in ``run_dir``; return (verdicts as plain dicts, run statistics)."""
    executor = "harness.sim" if sc.cluster_kind == "sim" else "harness.spark"
    if importlib.util.find_spec(executor) is None or importlib.util.find_spec("harness.oracles") is None:
        raise EnvironmentProblem(
            f"scenario {sc.name!r} needs the {sc.cluster_kind} executor ({executor}) and the oracles "
            "(harness.oracles), which this version of statechaos does not ship yet; "
            "validate, list, inspect and bench work today"
        )
    raise EnvironmentProblem(f"the {executor} executor is present but not wired to scenarios in this version")
