"""Which phases of the job each fault struck, read from the run's history: a fault that only ever
strikes a job at rest tests little, so each run says whether its faults hit a barrier alignment, a
checkpoint's snapshot, timers firing, a restore or a rescale.

A fault (its ``fault_start``) hit
- ``snapshot``: a checkpoint was pending (triggered, neither completed nor aborted);
- ``alignment``: some subtask was blocked aligning barriers (an ``alignment`` event whose blocked
  span covers the fault's time);
- ``timer firing``: timers fired within the stats window after it (``timers_fired`` events: every
  50 ms of simulated time on sim, every 200 ms on Spark);
- ``restore``: the job had restored from a checkpoint and not completed a checkpoint since;
- ``rescale``: the job had rescaled and not completed a checkpoint since.
"""

from __future__ import annotations

from collections import Counter

from harness.engines import STRUCTURED_STREAMING
from harness.events import (
    BarrierAlignment,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointTriggered,
    Event,
    FaultStart,
    JobFailover,
    JobRestart,
    Rescale,
    Restore,
    RunStart,
    TimersFired,
)

__all__ = ["PHASES", "phases_hit", "describe_phases"]

PHASES = ("alignment", "snapshot", "timer firing", "restore", "rescale")
# how often timers_fired is reported: sim every 50 ms of its time (SimConfig.stats_every_ms), a Spark
# task every 200 ms
_STATS_WINDOW_MS = {"sim": 50, "spark": 200}


def phases_hit(events: list[Event]) -> dict[int, list[str]]:
    """fault id -> the phases its start struck (in :data:`PHASES` order); empty for a Structured
    Streaming query, whose faults are placed by micro-batch and sink window, not by these phases."""
    out: dict[int, list[str]] = {}
    pending: set[int] = set()
    since: dict[str, bool] = {"restore": False, "rescale": False}
    fired_at = [e.t for e in events if isinstance(e, TimersFired)]
    executor = next((e.executor for e in events if isinstance(e, RunStart)), "sim")
    if executor == STRUCTURED_STREAMING:
        return out
    window = _STATS_WINDOW_MS.get(executor, 200)
    aligning = [(e.t - e.blocked_ms, e.t) for e in events if isinstance(e, BarrierAlignment)]
    for e in events:
        match e:
            case CheckpointTriggered():
                pending.add(e.checkpoint_id)
            case CheckpointCompleted():
                pending.discard(e.checkpoint_id)
                since = {"restore": False, "rescale": False}
            case CheckpointAborted():
                pending.discard(e.checkpoint_id)
            case JobRestart() | JobFailover():
                pending.clear()  # the attempt's checkpoints died with it
            case Restore() if e.checkpoint_id is not None:
                since["restore"] = True
            case Rescale():
                since["rescale"] = True
            case FaultStart() if not (e.details or {}).get("error"):
                hit = {
                    "alignment": any(a <= e.t <= b for a, b in aligning),
                    "snapshot": bool(pending),
                    "timer firing": any(e.t <= f < e.t + window for f in fired_at),
                    "restore": since["restore"],
                    "rescale": since["rescale"],
                }
                out[e.fault_id] = [p for p in PHASES if hit[p]]
    return out


def describe_phases(phases: dict[int, list[str]], timers_counted: bool = True) -> str:
    """One line: how many faults hit each phase, the phases none hit named too; ``timers_counted``
    False (the history counts no timer firing: none fired) shows timer firing as not known."""
    n = Counter(p for ps in phases.values() for p in ps)
    return f"{len(phases)} faults hit: " + ", ".join(
        f"{p} {n[p]}" if timers_counted or p != "timer firing" else f"{p} ? (no timers_fired in the history)"
        for p in PHASES
    )
