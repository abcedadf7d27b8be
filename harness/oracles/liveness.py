"""Liveness: the job ends as finished (a run that stopped progressing for its stall limit fails,
naming what stopped: the ``stalled`` event), and after the last fault heals it finishes or completes a new
checkpoint within a bound; after a checkpoint is aborted (declined, expired, subsumed) no subtask
stays blocked in its alignment longer than ``alignment_bound_ms`` (time while a fault that can hold
a task back is active aside: a paused executor or a cut link cannot deliver the abort; each
``fault_start`` says whether its fault does, in ``holds_tasks``)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.events import (
    BarrierAlignment,
    CheckpointAborted,
    CheckpointCompleted,
    FaultEnd,
    FaultStart,
    RunStalled,
)
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict

__all__ = ["check_liveness", "LivenessConfig"]


def _fault_windows(art: RunArtifacts) -> list[tuple[int, int]]:
    start: dict[int, int] = {}
    out = []
    for e in art.of_type(FaultStart, FaultEnd):
        # a fault that cannot keep an abort notification from a task, nor the task from acting on it (a
        # history without the field: any fault may)
        if isinstance(e, FaultStart) and e.holds_tasks is False:
            continue
        if isinstance(e, FaultStart):
            start[e.fault_id] = e.t
        elif isinstance(e, FaultEnd) and e.fault_id is not None and e.fault_id in start:
            out.append((start.pop(e.fault_id), e.t))
    end = art.run_end.t if art.run_end else max((e.t for e in art.events), default=0)
    return out + [(t, end) for t in start.values()]


def _overlap(a: int, b: int, windows: list[tuple[int, int]]) -> int:
    """How much of [a, b] some window covers (windows may overlap each other)."""
    covered, at = 0, a
    for s, e in sorted(windows):
        s, e = max(s, at), min(e, b)
        if e > s:
            covered += e - s
            at = e
    return covered


def _blocked_after_abort(art: RunArtifacts, bound_ms: int) -> list[str]:
    aborted = {e.checkpoint_id: e.t for e in art.of_type(CheckpointAborted)}
    windows = _fault_windows(art)
    problems = []
    for e in art.of_type(BarrierAlignment):
        cid = e.checkpoint_id
        if cid not in aborted:
            continue
        end = e.t
        since = max(aborted[cid], end - e.blocked_ms)
        held = end - since - _overlap(since, end, windows)
        if held > bound_ms:
            problems.append(
                f"{e.operator}[{e.subtask}] stayed blocked in the alignment of checkpoint {cid} "
                f"{held} ms after it was aborted at t={aborted[cid]} (bound {bound_ms} ms; ended: {e.outcome})"
            )
    return problems


def check_liveness(
    art: RunArtifacts, spec: JobSpec, bound_ms: int = 10_000, alignment_bound_ms: int = 10_000
) -> Verdict:
    problems = _blocked_after_abort(art, alignment_bound_ms)
    end = art.run_end
    stalls = art.of_type(RunStalled)
    for e in stalls:  # the driver gave up waiting: name what stopped moving and what it waited for
        problems.append(
            f"the run stalled at t={e.t} ms: {e.reason}"
            + (f"; waiting for: {e.waiting_for}" if e.waiting_for else "")
        )
    if end is None:
        problems.append("the history has no run_end: the run never ended cleanly")
    elif end.status != "finished" and not stalls:
        problems.append(f"the job did not finish: {end.status}: {end.reason}")
    heal_times = [e.t for e in art.of_type(FaultEnd)]
    last = max(heal_times, default=None)
    if last is not None and end is not None:
        progress = [e.t for e in art.of_type(CheckpointCompleted) if e.t >= last]
        first = min(progress, default=None)
        if first is None and end.status == "finished":
            first = end.t
        if first is None:
            problems.append(f"no checkpoint completed after the last fault healed at t={last} ms")
        elif first - last > bound_ms:
            problems.append(
                f"first progress after the last fault (t={last} ms) came {first - last} ms later, "
                f"over the bound of {bound_ms} ms"
            )
        recovery = None if first is None else first - last
    else:
        recovery = None
    stopped = [name for e in stalls for name in e.stopped]
    return Verdict.of(
        "liveness",
        problems,
        "the job finished"
        + (f"; progress {recovery} ms after the last fault healed" if recovery is not None else ""),
        f"the run stalled: {', '.join(stopped) or 'nothing'} stopped progressing"
        if stalls
        else "{n} liveness problems",
        recovery_ms=recovery,
        stopped=stopped,
    )


@dataclass(frozen=True)
class LivenessConfig:
    bound_ms: int = 10_000  # progress must resume within this long after the last fault heals
    alignment_bound_ms: int = 10_000  # no subtask stays blocked in alignment longer after an abort


register_oracle("liveness", check_liveness, LivenessConfig)
