"""Fault schedule: every fault the run planned struck and acted, and every planned rescale step
happened. A run whose faults never acted proved nothing: this says so instead of passing quietly.

The plan is what the run recorded in its ``run_start`` (``plan``: each planned fault's id, kind and
trigger, and the number of rescale steps); the history says what happened. A fault whose injection
failed (at its start or while it lasted) did not act; nor did an in-band fault its task refused or
never confirmed (``fault_delivered``). The same oracle judges a Structured Streaming query's faults
(engine ``structured_streaming``): there a planned fault that could not strike is a ``fault_skipped``,
and one deferred (``fault_deferred``) acted only if a later ``fault_start`` of it followed."""

from __future__ import annotations

from typing import Any

from harness.engines import RUNTIME, STRUCTURED_STREAMING
from harness.events import (
    ABSENT,
    Event,
    FaultDeferred,
    FaultDelivered,
    FaultEnd,
    FaultSkipped,
    FaultStart,
    Rescale,
)
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict

__all__ = ["check_fault_schedule", "unconfirmed", "planned_fault"]


def planned_fault(fault_id: int, kind: str, trigger: str) -> dict[str, Any]:
    """One planned fault as ``run_start``'s ``plan`` records it (``trigger``: e.g. ``checkpoint=2+100ms``)."""
    return {"fault_id": fault_id, "kind": kind, "trigger": trigger}


def _describe(p: dict[str, Any]) -> str:
    return f"#{p['fault_id']} {p['kind']} at {p['trigger']}"


def unconfirmed(events: list[Event]) -> dict[int, str]:
    """Fault id -> why an in-band fault did not act: its task refused, failed, or never confirmed."""
    inband = {
        e.fault_id: e for e in events if isinstance(e, FaultStart) and (e.details or {}).get("delivery") == "inband"
    }
    last: dict[int, FaultDelivered] = {}
    for e in events:
        if isinstance(e, FaultDelivered):
            last[e.fault_id] = e
    out = {}
    for fid, start in inband.items():
        reply = last.get(fid)
        if reply is None:
            task = (start.details or {}).get("task")
            out[fid] = (
                f"its task {task} never confirmed the in-band fault (it stopped or was redeployed first)"
            )
        elif not reply.acted:
            out[fid] = f"the task refused it in band: {reply.extra.get('reason')}"
    return out


def check_fault_schedule(art: RunArtifacts, spec: JobSpec) -> Verdict:
    start = art.run_start
    plan = None if start is None or start.plan is ABSENT else start.plan
    if plan is None:
        return Verdict.unknown("fault_schedule", "the history's run_start records no plan to judge against")
    events = list(art.events)
    started = {e.fault_id: e for e in events if isinstance(e, FaultStart)}
    errors: dict[int | None, str] = {}
    for e in events:
        if isinstance(e, FaultStart) and (e.details or {}).get("error"):
            errors.setdefault(e.fault_id, str(e.details["error"]))
        elif isinstance(e, FaultEnd) and e.error is not ABSENT and e.error:
            errors.setdefault(e.fault_id, str(e.error))
    for fid, why in unconfirmed(events).items():  # in-band faults: their task confirms that it acted
        errors.setdefault(fid, why)
    deferred: dict[int, str] = {}  # a query's fault deferred and not struck since
    for e in events:
        if isinstance(e, FaultSkipped) and e.fault_id is not ABSENT:
            errors.setdefault(e.fault_id, e.why)
        elif isinstance(e, FaultDeferred) and e.fault_id is not ABSENT:
            deferred[e.fault_id] = e.why
        elif isinstance(e, FaultStart):
            deferred.pop(e.fault_id, None)
    for fid, why in deferred.items():
        errors.setdefault(fid, f"deferred ({why}) and never struck after")
    problems = []
    faults = plan.get("faults", [])
    for p in faults:
        if p["fault_id"] not in started and p["fault_id"] in errors:  # a query's fault that could not strike
            problems.append(f"fault {_describe(p)} did not fire: {errors[p['fault_id']]}")
        elif p["fault_id"] not in started:
            problems.append(f"fault {_describe(p)} never fired: the run ended before its trigger was reached")
        elif p["fault_id"] in errors:
            problems.append(f"fault {_describe(p)} did not fire: its injection failed: {errors[p['fault_id']]}")
    planned_rescales = int(plan.get("rescales", 0))
    rescales = sum(1 for e in events if isinstance(e, Rescale) and e.reason != "adaptive")
    if rescales < planned_rescales:
        problems.append(
            f"only {rescales} of {planned_rescales} rescale steps happened: the run ended before the others' "
            "triggers were reached"
        )
    return Verdict.of(
        "fault_schedule",
        problems,
        f"all {len(faults)} planned faults fired and acted"
        + (f"; all {planned_rescales} rescale steps happened" if planned_rescales else ""),
        "{n} planned faults or rescales did not take effect",
    )


for _engine in (RUNTIME, STRUCTURED_STREAMING):
    register_oracle("fault_schedule", check_fault_schedule, engine=_engine)
