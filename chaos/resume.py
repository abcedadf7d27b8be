"""Driver replacement: where a new driver picks up the run of one that died. The job's storage says
which checkpoint to restore (the newest intact one, chosen by the job master as on any restart); the
history says what the dead driver already did, so the new one neither rescales again nor re-injects
faults that already fired, and runs at the parallelism the job last had."""

from __future__ import annotations

from pathlib import Path

from chaos.errors import EnvironmentProblem
from chaos.schedule import PlannedFault
from harness.driver.jobmaster import RescaleRequest
from harness.events import DriverReplaced, FaultStart, Rescale, RunEnd, read_events
from harness.job import JobGraph
from harness.run_store import RunStore

__all__ = ["resume_point"]


def resume_point(
    run_dir: Path, graph: JobGraph, rescales: list[RescaleRequest], planned: list[PlannedFault]
) -> tuple[JobGraph, list[RescaleRequest], list[PlannedFault]]:
    """(graph at its current parallelism, rescale steps still to do, faults still to inject)."""
    history = RunStore(run_dir).history
    if not history.is_file():
        raise EnvironmentProblem(f"{run_dir}: no history.jsonl, so there is no run to resume")
    fired: set[int] = set()
    done = 0
    ended: RunEnd | None = None
    for e in read_events(history):
        match e:
            case FaultStart():
                fired.add(e.fault_id)
            case Rescale():
                done += e.reason != "adaptive"  # adaptive ones are no scenario step
                graph = graph.with_parallelism(e.to)
            case RunEnd():
                ended = e
            case DriverReplaced():
                ended = None
    if ended is not None:
        raise EnvironmentProblem(
            f"{run_dir}: the run already ended ({ended.status}: {ended.reason}); "
            "only a run whose driver died can be resumed"
        )
    return graph, rescales[done:], [p for p in planned if p.fault_id not in fired]
