"""Liveness: the job ends as finished (a run that stopped progressing for its stall limit fails,
naming what stopped: the ``stalled`` event); each fault's recovery keeps progressing: from the fault's
heal until the job finishes or completes a new checkpoint, nothing it waits for (records in and out,
checkpoint acks and completions, timers fired, restores and restarts, tasks registering and deploying) stands still
for longer than ``bound_ms`` (a slow recovery that keeps moving passes, however long it takes; the
verdict names what stopped); after a checkpoint is aborted (declined, expired, subsumed) no subtask
stays blocked in its alignment longer than ``alignment_bound_ms``. Time while a fault that can hold a
task back is active counts against neither (a paused executor or a cut link cannot deliver the
abort, nor let the job move; each ``fault_start`` says whether its fault does, in ``holds_tasks``)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.events import (
    BarrierAlignment,
    CheckpointAborted,
    CheckpointAcked,
    CheckpointCompleted,
    Event,
    FaultEnd,
    FaultStart,
    JobRestart,
    Listening,
    RecordsIn,
    RecordsOut,
    Rescale,
    Restore,
    RunStalled,
    TaskRegistered,
    TimersFired,
)
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict

__all__ = ["check_liveness", "LivenessConfig", "PROGRESS_SIGNALS", "Recovery", "recoveries"]


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


# what a recovery waits for, by the name a verdict gives it, and the history events that show it moving
PROGRESS_SIGNALS: dict[str, tuple[type[Event], ...]] = {
    "records": (RecordsIn, RecordsOut),
    "checkpoints": (CheckpointAcked, CheckpointCompleted),
    "timers": (TimersFired,),
    "restores": (JobRestart, Restore, Rescale),
    "deployments": (TaskRegistered, Listening),  # a task up and registered, its input gate listening (Spark)
}
_SIGNAL_OF = {cls: name for name, classes in PROGRESS_SIGNALS.items() for cls in classes}


@dataclass(frozen=True)
class Recovery:
    """One fault's recovery: from its heal until a checkpoint completes after it (or the run ends),
    and the longest time in it that nothing progressed (time held by an active fault aside)."""

    fault: str  # "#2 kill_executor"
    healed_at: int
    done_at: int | None  # the first checkpoint completed after the heal (the run's end if it finished)
    still_ms: int  # the longest stretch without progress
    still_from: int
    still_to: int
    last_moved: dict[str, int]  # each signal's last move before the stretch ended (since the run began)

    def problem(self, bound_ms: int) -> str:
        """What stood still, for a verdict: each signal with when it last moved (before the fault, if
        it did not move in the recovery at all)."""
        moved = sorted(self.last_moved.items(), key=lambda kv: kv[1])
        what = ", ".join(
            f"{name} last moved at t={t} ms" + ("" if t >= self.healed_at else " (before the fault)")
            for name, t in moved
        )
        return (
            f"the recovery from fault {self.fault} (healed at t={self.healed_at} ms) made no progress for "
            f"{self.still_ms} ms from t={self.still_from} ms (bound {bound_ms} ms), waiting for a checkpoint: "
            f"{what or 'nothing had moved yet'}"
        )

    def stopped(self) -> list[str]:
        """The signals that stood still over the stretch, longest first (all that ever moved)."""
        return [n for n, _ in sorted(self.last_moved.items(), key=lambda kv: kv[1])]


def recoveries(art: RunArtifacts) -> list[Recovery]:
    """Every healed fault's recovery, in the order the faults healed."""
    events = art.events
    end_t = art.run_end.t if art.run_end else max((e.t for e in events), default=0)
    finished = art.run_end is not None and art.run_end.status == "finished"
    moves = [(e.t, _SIGNAL_OF[type(e)]) for e in events if type(e) in _SIGNAL_OF and _moved(e)]
    completed = sorted(e.t for e in art.of_type(CheckpointCompleted))
    windows = _fault_windows(art)
    kinds: dict[int | None, str] = {e.fault_id: e.kind for e in art.of_type(FaultStart)}
    out = []
    for heal in art.of_type(FaultEnd):
        done = next((t for t in completed if t > heal.t), end_t if finished else None)
        until = end_t if done is None else done
        points = [heal.t, *(t for t, _ in moves if heal.t < t <= until), until]
        still, a, b = 0, heal.t, heal.t
        for x, y in zip(points, points[1:], strict=False):
            gap = y - x - _overlap(x, y, windows)
            if gap > still:
                still, a, b = gap, x, y
        last: dict[str, int] = {}
        for t, name in moves:
            if t <= a:
                last[name] = t
        fault = f"#{heal.fault_id} {kinds.get(heal.fault_id, heal.kind)}"
        out.append(Recovery(fault, heal.t, done, still, a, b, last))
    return out


def _moved(e: Event) -> bool:
    """A stats event that counted nothing is no progress."""
    return not isinstance(e, (RecordsIn, RecordsOut)) or e.count > 0


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
    recs = recoveries(art) if end is not None else []
    still = [r for r in recs if r.still_ms > bound_ms]
    if not stalls:  # a stall already names what stopped
        problems += [r.problem(bound_ms) for r in still]
    last = recs[-1] if recs else None
    if last is not None and last.done_at is None:
        problems.append(f"no checkpoint completed after the last fault healed at t={last.healed_at} ms")
    recovery = None if last is None or last.done_at is None else last.done_at - last.healed_at
    longest = max((r.still_ms for r in recs), default=None)
    stopped = [name for e in stalls for name in e.stopped] or [n for r in still[:1] for n in r.stopped()]
    if stalls:
        bad = f"the run stalled: {', '.join(stopped) or 'nothing'} stopped progressing"
    elif still:
        bad = f"a recovery stood still: {', '.join(stopped) or 'nothing'} stopped progressing"
    else:
        bad = "{n} liveness problems"
    return Verdict.of(
        "liveness",
        problems,
        "the job finished"
        + (
            f"; a checkpoint {recovery} ms after the last fault healed, recoveries never still for more "
            f"than {longest} ms (bound {bound_ms} ms)"
            if recovery is not None
            else ""
        ),
        bad,
        recovery_ms=recovery,
        still_ms=longest,
        stopped=stopped,
    )


@dataclass(frozen=True)
class LivenessConfig:
    bound_ms: int = 10_000  # a recovery fails when nothing progressed for this long after a fault healed
    alignment_bound_ms: int = 10_000  # no subtask stays blocked in alignment longer after an abort


register_oracle("liveness", check_liveness, LivenessConfig)
