"""One interface for every cluster a scenario names (sim, local, ``spark://``, docker): each starts
what the run needs, builds the executor and the :class:`~chaos.faults.FaultTarget` its faults act on,
runs the job under the scenario's nemesis and leaves nothing running."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from chaos.faults import FaultTarget, fault_injector
from chaos.scenario import Scenario
from chaos.schedule import NemesisPlan, PlannedFault
from harness.driver.controls import ExecutorControls
from harness.jobs import JobSpec

__all__ = ["Cluster", "nemesis_for"]


class Cluster(Protocol):
    def run(self, sc: Scenario, spec: JobSpec, run_dir: Path, resume: bool = False) -> dict[str, Any]:
        """Run ``spec`` for ``sc`` in ``run_dir`` (``resume``: take over a dead driver's run); the run's
        statistics."""
        ...


def nemesis_for(
    planned: list[PlannedFault], target: Callable[[ExecutorControls], FaultTarget]
) -> NemesisPlan:
    """The plan whose nemesis fires ``planned`` through each fault kind's injector, on what
    ``target(controls)`` names once the executor (constructed with this plan as its ``faults``) starts it."""
    return NemesisPlan(planned, lambda controls: fault_injector(target(controls)))
