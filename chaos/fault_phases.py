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
from typing import Any

__all__ = ["PHASES", "phases_hit", "describe_phases"]

PHASES = ("alignment", "snapshot", "timer firing", "restore", "rescale")
# how often timers_fired is reported: sim every 50 ms of its time (SimConfig.stats_every_ms), a Spark
# task every 200 ms
_STATS_WINDOW_MS = {"sim": 50, "spark": 200}


def phases_hit(events: list[dict[str, Any]]) -> dict[int, list[str]]:
    """fault id -> the phases its start struck (in :data:`PHASES` order)."""
    out: dict[int, list[str]] = {}
    pending: set[int] = set()
    since: dict[str, bool] = {"restore": False, "rescale": False}
    fired_at = [int(e["t"]) for e in events if e["type"] == "timers_fired"]
    executor = next((str(e.get("executor")) for e in events if e["type"] == "run_start"), "sim")
    window = _STATS_WINDOW_MS.get(executor, 200)
    aligning = [
        (int(e["t"]) - int(e.get("blocked_ms", 0)), int(e["t"])) for e in events if e["type"] == "alignment"
    ]
    for e in events:
        kind = e["type"]
        if kind == "checkpoint_triggered":
            pending.add(int(e["checkpoint_id"]))
        elif kind == "checkpoint_completed":
            pending.discard(int(e["checkpoint_id"]))
            since = {"restore": False, "rescale": False}
        elif kind == "checkpoint_aborted":
            pending.discard(int(e["checkpoint_id"]))
        elif kind in ("job_restart", "job_failover"):
            pending.clear()  # the attempt's checkpoints died with it
        elif kind == "restore" and e.get("checkpoint_id") is not None:
            since["restore"] = True
        elif kind == "rescale":
            since["rescale"] = True
        elif kind == "fault_start" and not (e.get("details") or {}).get("error"):
            t = int(e["t"])
            hit = {
                "alignment": any(a <= t <= b for a, b in aligning),
                "snapshot": bool(pending),
                "timer firing": any(t <= f < t + window for f in fired_at),
                "restore": since["restore"],
                "rescale": since["rescale"],
            }
            out[int(e["fault_id"])] = [p for p in PHASES if hit[p]]
    return out


def describe_phases(phases: dict[int, list[str]], timers_counted: bool = True) -> str:
    """One line: how many faults hit each phase, the phases none hit named too; ``timers_counted``
    False (the history counts no timer firing: none fired) shows timer firing as not known."""
    n = Counter(p for ps in phases.values() for p in ps)
    return f"{len(phases)} faults hit: " + ", ".join(
        f"{p} {n[p]}" if timers_counted or p != "timer firing" else f"{p} ? (no timers_fired in the history)"
        for p in PHASES
    )
