"""Adaptive recovery (``harness.driver.adaptive``, docs/adaptive-recovery.md), judged from the history alone,
so on any executor that records the facts (``task_slots``, ``slot_layout``, ``rescale``):

- every deployment adaptive recovery chose fits the task slots it was chosen on: it takes no more
  slots than there were, no subtask shares a slot while there were slots for one subtask each, each
  operator runs 1 to its configured parallelism, and it is the largest such deployment (as many
  subtasks as slots, up to the configured total; with fewer slots than operators, every operator at
  ``min(configured, slots)``);
- when slots for a larger deployment came back and stayed while the job still ran smaller (its end of
  input held for the scale-up), the job scaled back up before it completed ``scale_up_checkpoints``
  checkpoints past the resource stabilization timeout: a job that keeps checkpointing could have
  taken the scale-up's savepoint, while one that makes no progress (a loaded machine) is not blamed
  for a scale-up it had no chance to take.

The rules are stated here, not by calling :func:`harness.driver.adaptive.fit`, so a wrong ``fit`` fails them."""

from __future__ import annotations

from dataclasses import dataclass

from harness.events import (
    ABSENT,
    CheckpointCompleted,
    InputHeld,
    InputReleased,
    Rescale,
    ResourcesLost,
    RunEnd,
    SlotLayout,
    TaskSlots,
)
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict

__all__ = ["AdaptiveRecoveryConfig", "check_adaptive_recovery", "adaptive_recovery_acted"]

NAME = "adaptive_recovery"


@dataclass(frozen=True)
class AdaptiveRecoveryConfig:
    """``scale_up_checkpoints``: how many checkpoints a job still held for its scale-up may complete
    after slots for a larger deployment came back and stayed the stabilization timeout, before it must
    have scaled up. The scale-up's savepoint is the next checkpoint triggered once it is due, so
    it comes within two (one already in flight, then the savepoint); three leaves one to spare."""

    scale_up_checkpoints: int = 3


def adaptive_recovery_acted(art: RunArtifacts) -> bool:
    """Whether the run has anything for this oracle to judge: adaptive recovery scaled a job down."""
    return bool(art.of_type(ResourcesLost)) or any(e.reason == "adaptive" for e in art.of_type(Rescale))


def _layout_problems(e: SlotLayout, configured: dict[str, int]) -> list[str]:
    slots, p, per_slot = int(e.slots_available), e.parallelism, e.tasks_per_slot
    where = f"deployment {e.attempt} at {p} on {len(per_slot)} slots (t={e.t} ms, {slots} slots there)"
    out = []
    total, ops, wanted = sum(p.values()), len(p), sum(configured.values())
    if len(per_slot) > slots:
        out.append(f"{where}: takes {len(per_slot)} task slots, only {slots} were there")
    if sum(per_slot) != total:
        out.append(f"{where}: its slots run {sum(per_slot)} subtasks, its parallelism has {total}")
    for op, n in p.items():
        if not 1 <= n <= configured.get(op, n):
            out.append(f"{where}: operator {op} at {n}, outside 1..{configured.get(op)} (configured)")
    if slots >= ops:
        if max(per_slot, default=0) > 1:
            out.append(
                f"{where}: subtasks share a slot ({per_slot} per slot) although {slots} slots give each of "
                f"the {ops} operators one of its own"
            )
        if total != min(wanted, slots):
            out.append(f"{where}: runs {total} subtasks; {min(wanted, slots)} fit {slots} slots unshared")
    else:
        largest = {op: min(n, slots) for op, n in configured.items()}
        if p != largest:
            out.append(f"{where}: fewer slots than operators run every operator at min(configured, slots) = {largest}")
        if max(per_slot, default=0) > ops:
            out.append(f"{where}: a slot runs {max(per_slot)} subtasks, more than one of each of {ops} operators")
    return out


def check_adaptive_recovery(art: RunArtifacts, spec: JobSpec, scale_up_checkpoints: int = 3) -> Verdict:
    start = art.run_start
    if start is None:
        return Verdict.unknown(NAME, "the history has no run_start")
    if not adaptive_recovery_acted(art):
        return Verdict.unknown(NAME, "no executor loss left too few task slots: adaptive recovery never acted")
    timeout = int(((start.config or {}).get("adaptive_recovery") or {}).get("resource_stabilization_timeout_ms", 0))
    configured = dict(start.parallelism)
    problems: list[str] = []
    judged = downs = ups = 0
    slots_seen: list[tuple[int, int]] = []  # (t, slots)
    current: dict[str, int] = dict(configured)
    current_slots = sum(configured.values())
    smaller_since: int | None = None  # when the job last went below what the slots allow it
    held_since: int | None = None  # the end of input held for an adaptive scale-up
    returned: tuple[int, int] | None = None  # (t, slots): slots for a larger deployment, still there
    completed: list[int] = []  # when each checkpoint completed
    for e in art.events:
        if isinstance(e, Rescale):
            if e.reason != "adaptive":
                configured = dict(e.to)  # a planned rescale sets what adaptive recovery scales back up to
            elif e.savepoint:  # a scale-up stops with a savepoint; a scale-down restores the latest checkpoint
                ups += 1
            else:
                downs += 1
        elif isinstance(e, CheckpointCompleted):
            completed.append(e.t)
        elif isinstance(e, SlotLayout):
            current, current_slots = dict(e.parallelism), len(e.tasks_per_slot)
            smaller = current != configured or current_slots < sum(configured.values())
            smaller_since = (smaller_since or e.t) if smaller else None
            if not smaller:
                returned = None
            if e.reason == "adaptive" and e.slots_available is not ABSENT:
                judged += 1
                problems += _layout_problems(e, configured)
        elif isinstance(e, TaskSlots):
            slots_seen.append((e.t, e.slots))
            larger = e.slots > current_slots and (
                sum(current.values()) < sum(configured.values()) or current_slots < sum(current.values())
            )
            if smaller_since is not None and larger:
                returned = returned or (e.t, e.slots)
            elif not larger:
                returned = None
        elif isinstance(e, InputHeld) and any("adaptive scale-up" in w for w in e.waiting):
            held_since = e.t
        elif isinstance(e, (InputReleased, RunEnd)) and (held_since is not None or isinstance(e, RunEnd)):
            waited_until = e.t
            if returned is not None and smaller_since is not None and (held_since is not None):
                due = max(returned[0] + timeout, held_since)
                passed = sum(1 for t in completed if due <= t <= waited_until)
                if passed >= scale_up_checkpoints:
                    problems.append(
                        f"{returned[1]} task slots were back at t={returned[0]} ms and stayed while the end "
                        f"of input waited for the scale-up ({passed} checkpoints completed from t={due} ms "
                        f"to t={waited_until} ms, bound {scale_up_checkpoints}), but the job never scaled "
                        f"back up from {current} on {current_slots} slots (configured {configured})"
                    )
            held_since = None
            if isinstance(e, RunEnd):
                break
    evidence = f"{downs} adaptive scale-downs, {ups} scale-ups, {judged} deployments judged against their slots"
    return Verdict.of(
        NAME,
        problems,
        f"adaptive recovery fit the slots left unshared and scaled back up: {evidence}",
        "adaptive recovery broke {n} rules: " + evidence,
        scale_downs=downs,
        scale_ups=ups,
        deployments_judged=judged,
        slot_changes=len(slots_seen),
    )


register_oracle(NAME, check_adaptive_recovery, AdaptiveRecoveryConfig)
