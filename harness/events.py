"""The run history's events: one frozen dataclass each, registered by the tag written as ``type``.

Writers build an event and hand it to ``HistoryWriter.write`` (``emit(RunEnd(status=..., ...))``);
readers get the same classes back from :func:`read_events` and match on them
(``case FaultStart(fault_id=fid): ...``) instead of looking fields up by string. The JSON form is
``{"seq", "t", "type": TAG, **fields}`` with sorted keys, exactly as before the events were typed,
so a sim run's ``history.jsonl`` is byte-identical for the same seed.

A field declared ``= ABSENT`` is left out of the JSON when not given (some events carry it only
sometimes, e.g. ``fault_end.error``); a field named after a Python keyword is spelled with a trailing
underscore (``Rescale.from_`` is ``"from"``). An event with ``OPEN = True`` keeps fields it does not
declare in ``extra`` (what an in-band injector reports in ``fault_delivered``).

Adding an event is one dataclass here, decorated with ``@event("tag")``. The older call form
``emit("tag", **fields)`` still works through :func:`from_fields`: an unknown tag or field is an
:class:`EventError` naming both.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, dataclass_transform

from harness.driver.abort_cause import AbortCause, AbortReason
from reference_impl.errors import StatechaosError

__all__ = [
    "ABSENT",
    "Emit",
    "EventError",
    "Event",
    "event",
    "event_types",
    "from_fields",
    "from_json",
    "to_json",
    "read_events",
    "read_history",
    "RunStart",
    "RunEnd",
    "CheckpointTriggered",
    "CheckpointAcked",
    "CheckpointDeclined",
    "CheckpointCompleted",
    "CheckpointAborted",
    "CheckpointSkipped",
    "SinkFence",
    "SinkPrecommit",
    "SinkCommit",
    "SinkAbort",
    "JobRestart",
    "JobFailover",
    "Rescale",
    "Restore",
    "RecordsIn",
    "RecordsOut",
    "TimersFired",
    "BarrierAlignment",
    "InputHeld",
    "InputReleased",
    "FaultStart",
    "FaultEnd",
    "FaultDelivered",
    "ConnectionRefused",
    "Listening",
    "ResourcesLost",
    "TaskSlots",
    "TaskRegistered",
    "SlotLayout",
    "DriverReplaced",
    "ClockSkewed",
    "DriverStart",
    "DriverFailed",
    "DriverStop",
    "BatchPlanned",
    "BatchCommitted",
    "FaultArmed",
    "FaultSkipped",
    "FaultDeferred",
    "TimeLimit",
]


class EventError(StatechaosError, ValueError):
    """A history event that is not one of ours: unknown tag, or a field its class does not have."""


class _Absent:
    """A field not given: left out of the JSON (distinct from ``None``, which is written as null)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()

Emit = Callable[["Event"], None]
"""Appends an event to the run's history (``HistoryWriter.emit``; over the coordinator link on Spark)."""

_BY_TAG: dict[str, type[Event]] = {}
_ENVELOPE = ("seq", "t", "type")


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every history event. ``seq`` and ``t`` are set by the writer (``-1`` before)."""

    TAG: ClassVar[str] = ""
    OPEN: ClassVar[bool] = False
    seq: int = -1
    t: int = -1

    def fields(self) -> dict[str, Any]:
        """The event's own fields as JSON keys (no ``seq``/``t``/``type``), absent ones left out."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("seq", "t", "extra"):
                continue
            v = getattr(self, f.name)
            if v is ABSENT:
                continue
            out[_json_name(f.name)] = v
        extra = getattr(self, "extra", None)
        if extra:
            out.update(extra)
        return out

    def get(self, name: str, default: Any = None) -> Any:
        """A field by its JSON name, ``default`` when absent (for code generic over event types)."""
        return self.fields().get(name, default)


E = TypeVar("E", bound=Event)


@dataclass_transform(frozen_default=True, kw_only_default=True)
def event(tag: str) -> Callable[[type[E]], type[E]]:
    """Register an event class under ``tag`` (makes it a frozen, keyword-only dataclass)."""

    def register(cls: type[E]) -> type[E]:
        if tag in _BY_TAG:
            raise ValueError(f"history event tag {tag!r} is registered twice")
        dc = dataclass(frozen=True, kw_only=True)(cls)
        dc.TAG = tag
        _BY_TAG[tag] = dc
        return dc

    return register


def event_types() -> dict[str, type[Event]]:
    """Every registered event class by tag."""
    return dict(_BY_TAG)


def _json_name(name: str) -> str:
    return name[:-1] if name.endswith("_") else name


def from_fields(tag: str, fields: Mapping[str, Any], *, seq: int = -1, t: int = -1) -> Event:
    """The typed event for ``tag`` with JSON-named ``fields``; :class:`EventError` if it is not ours."""
    cls = _BY_TAG.get(tag)
    if cls is None:
        raise EventError(f"unknown history event type {tag!r} (known: {', '.join(sorted(_BY_TAG))})")
    names = {_json_name(f.name): f.name for f in dataclasses.fields(cls) if f.name not in ("seq", "t", "extra")}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for k, v in fields.items():
        if k in names:
            kwargs[names[k]] = v
        elif cls.OPEN:
            extra[k] = v
        else:
            raise EventError(f"history event {tag!r} has no field {k!r} (fields: {', '.join(sorted(names))})")
    if cls.OPEN:
        kwargs["extra"] = extra
    try:
        return cls(seq=seq, t=t, **kwargs)
    except TypeError as e:
        raise EventError(f"history event {tag!r}: {e}") from None


def from_json(obj: Mapping[str, Any]) -> Event:
    """The typed event of one parsed history line."""
    if "type" not in obj:
        raise EventError(f"history event without a type: {dict(obj)!r}")
    rest = {k: v for k, v in obj.items() if k not in _ENVELOPE}
    return from_fields(str(obj["type"]), rest, seq=int(obj.get("seq", -1)), t=int(obj.get("t", -1)))


def to_json(ev: Event, seq: int | None = None, t: int | None = None) -> str:
    """One history line (without the newline): sorted keys, exactly as the history has always read."""
    out = {"seq": ev.seq if seq is None else seq, "t": ev.t if t is None else t, "type": ev.TAG, **ev.fields()}
    return json.dumps(out, sort_keys=True, default=str)


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a history file in order, as JSON; a damaged line is an error naming the file
    and line."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON history event: {e}") from None


def read_events(path: Path) -> Iterator[Event]:
    """The typed events of a history file in order (any engine's); a damaged or unknown line names
    file and line."""
    for n, obj in enumerate(read_history(path), 1):
        try:
            yield from_json(obj)
        except EventError as e:
            raise EventError(f"{path}: event {n}: {e}") from None


# ---------------------------------------------------------------------------------------------- run


@event("run_start")
class RunStart(Event):
    job: str
    executor: str
    seed: int | None
    parallelism: dict[str, int]
    max_parallelism: int
    config: dict[str, Any]
    plan: dict[str, Any] = ABSENT  # the planned faults and rescale steps (harness.oracles.fault_schedule)


@event("run_end")
class RunEnd(Event):
    status: str
    reason: str
    records_committed: int
    attempts: int


@event("stalled")
class RunStalled(Event):
    """The driver gave up waiting: nothing it waited for progressed for ``bound_ms`` (harness.progress)."""

    reason: str
    stopped: list[str]
    waiting_for: str
    bound_ms: int


@event("driver_replaced")
class DriverReplaced(Event):
    attempt: int
    checkpoint_id: int | None
    parallelism: dict[str, int]
    master: str


# ------------------------------------------------------------------------------------- checkpoints


@event("checkpoint_triggered")
class CheckpointTriggered(Event):
    checkpoint_id: int
    kind: str


@event("checkpoint_acked")
class CheckpointAcked(Event):
    checkpoint_id: int
    operator: str
    subtask: int


@event("checkpoint_declined")
class CheckpointDeclined(Event):
    checkpoint_id: int
    operator: str
    subtask: int
    reason: str


@event("checkpoint_completed")
class CheckpointCompleted(Event):
    checkpoint_id: int
    path: str
    source_offsets: dict[str, Any]
    kind: str


@event("checkpoint_aborted")
class CheckpointAborted(Event):
    """``reason`` is the sentence; ``cause`` (an :class:`AbortReason`, absent in histories written
    before it) and ``subsumed_by`` are what oracles match on."""

    checkpoint_id: int
    reason: str
    cause: AbortReason = ABSENT
    subsumed_by: int = ABSENT

    def __post_init__(self) -> None:
        if isinstance(self.cause, str) and not isinstance(self.cause, AbortReason):
            object.__setattr__(self, "cause", AbortReason(self.cause))

    @staticmethod
    def of(checkpoint_id: int, cause: AbortCause) -> CheckpointAborted:
        by = ABSENT if cause.subsumed_by is None else cause.subsumed_by
        return CheckpointAborted(checkpoint_id=checkpoint_id, reason=cause.text, cause=cause.reason, subsumed_by=by)


@event("checkpoint_skipped")
class CheckpointSkipped(Event):
    """A checkpoint found on restore that failed validation (the reason says why)."""

    path: str
    reason: str


@event("alignment")
class BarrierAlignment(Event):
    checkpoint_id: int
    operator: str
    subtask: int
    blocked_ms: int
    outcome: str


# ------------------------------------------------------------------------------------------- sink


@event("sink_fence")
class SinkFence(Event):
    restored_from: int | None
    txns: list[str]
    attempt: int


@event("sink_precommit")
class SinkPrecommit(Event):
    checkpoint_id: int
    subtask: int
    txn: str
    count: int


@event("sink_commit")
class SinkCommit(Event):
    checkpoint_id: int
    subtask: int
    txn: str
    count: int


@event("sink_abort")
class SinkAbort(Event):
    checkpoint_id: int | None
    subtask: int
    txn: str
    reason: str


# --------------------------------------------------------------------------------- recovery, scale


@event("job_restart")
class JobRestart(Event):
    """A new attempt of the job; a Structured Streaming query's driver restarted from its checkpoint
    location names the commit it resumes after (``commits/4``) as its ``checkpoint_id``."""

    attempt: int
    reason: str
    checkpoint_id: int | str | None


@event("job_failover")
class JobFailover(Event):
    reason: str


@event("rescale")
class Rescale(Event):
    from_: dict[str, int]
    to: dict[str, int]
    checkpoint_id: int | None
    savepoint: bool
    reason: str = ABSENT
    slots: int = ABSENT


@event("restore")
class Restore(Event):
    checkpoint_id: int | None
    path: str | None
    attempt: int
    operator: str
    subtask: int
    parallelism: int
    key_group_range: list[int]
    restored_state_file: str
    watermark: int = ABSENT


@event("resources_lost")
class ResourcesLost(Event):
    slots: int
    needed: int
    waited_ms: int


@event("task_slots")
class TaskSlots(Event):
    """The cluster's task slots as adaptive recovery's poll saw them, written when they change: what
    the ``adaptive_recovery`` oracle judges a scale-down and a missing scale-up against."""

    slots: int


@event("task_registered")
class TaskRegistered(Event):
    """A task of deployment ``attempt`` came up and registered with the driver (Spark): while Spark
    relaunches executors and tasks after a fault, the recovery's only progress the history can show."""

    task: str
    attempt: int


@event("slot_layout")
class SlotLayout(Event):
    """One deployment's task slots: each operator's parallelism, how many subtasks each slot runs, and,
    for a deployment adaptive recovery chose (``reason: adaptive``), the slots there were to choose on."""

    attempt: int
    parallelism: dict[str, int]
    tasks_per_slot: list[int]
    slots_available: int = ABSENT
    reason: str = ABSENT


# ---------------------------------------------------------------------------------------- progress


@event("records_in")
class RecordsIn(Event):
    operator: str
    subtask: int
    count: int


@event("records_out")
class RecordsOut(Event):
    operator: str
    subtask: int
    count: int


@event("timers_fired")
class TimersFired(Event):
    """Timers fired since the last report, by time domain (only the domains that fired)."""

    operator: str
    subtask: int
    event: int = ABSENT
    processing: int = ABSENT


@event("input_held")
class InputHeld(Event):
    waiting: list[str]
    limit_ms: int


@event("input_released")
class InputReleased(Event):
    waiting: list[str]
    held_ms: int


@event("clock_skewed")
class ClockSkewed(Event):
    subtask: str
    skew_ms: int


# ------------------------------------------------------------------------------------------ faults


@event("fault_start")
class FaultStart(Event):
    """A fault struck; ``extra`` holds what an engine adds (the Structured Streaming runner's batch)."""

    OPEN: ClassVar[bool] = True
    fault_id: int
    kind: str
    target: str | None
    trigger: str
    details: dict[str, Any] = field(default_factory=dict)
    holds_tasks: bool = ABSENT  # can it keep a task from acting while it lasts (the liveness oracle)
    extra: dict[str, Any] = field(default_factory=dict)


@event("fault_end")
class FaultEnd(Event):
    OPEN: ClassVar[bool] = True
    fault_id: int | None
    kind: str
    error: str = ABSENT
    extra: dict[str, Any] = field(default_factory=dict)


@event("fault_delivered")
class FaultDelivered(Event):
    """What an in-band injector did in the task process (its report goes to ``extra``)."""

    OPEN: ClassVar[bool] = True
    fault_id: int
    delivery: str
    task: str
    acted: bool
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- network


@event("listening")
class Listening(Event):
    listener: str
    endpoint: str
    attempt: int | None = ABSENT
    tls: bool = ABSENT


@event("connection_refused")
class ConnectionRefused(Event):
    listener: str
    peer: str
    reason: str
    task: str = ABSENT


# ------------------------------------------------------------------ Structured Streaming query runs
# (chaos.sss.run: the query's driver is a child process; a micro-batch is the unit of progress, and a
# fault names the batch it struck, the first one not yet committed, in ``batch``)


@event("driver_start")
class DriverStart(Event):
    """Start ``start`` of the query's driver (0 first, then one per restart), before batch ``next_batch``."""

    start: int
    next_batch: int


@event("driver_failed")
class DriverFailed(Event):
    """The query's driver exited on its own: while starting (``start``) or during the run (``next_batch``)."""

    returncode: int | None
    start: int = ABSENT
    next_batch: int = ABSENT


@event("driver_stop")
class DriverStop(Event):
    returncode: int | None


@event("batch_planned")
class BatchPlanned(Event):
    """Micro-batch ``batch`` is in the offset log."""

    batch: int


@event("batch_committed")
class BatchCommitted(Event):
    """Micro-batch ``batch`` is in the commit log."""

    batch: int


@event("fault_armed")
class FaultArmed(Event):
    """A fault delivered later by the query's own code: a Python worker kill armed for the next
    processor call (``process``), or a kill inside the sink window of a batch (``at``); ``fault_id``:
    the planned fault's (``run_start``'s plan)."""

    kind: str
    batch: int
    trigger: str
    process: str = ABSENT
    at: str = ABSENT
    fault_id: int = ABSENT


@event("fault_skipped")
class FaultSkipped(Event):
    """A planned fault (``fault_id``) that could not strike (``why``): the fault schedule fails on it."""

    kind: str
    batch: int | None
    why: str
    fault_id: int = ABSENT


@event("fault_deferred")
class FaultDeferred(Event):
    """A damage fault found nothing to damage after all; it strikes after a later batch instead (the
    fault schedule fails on it unless a later ``fault_start`` of ``fault_id`` follows)."""

    kind: str
    batch: int
    why: str
    fault_id: int = ABSENT


@event("time_limit")
class TimeLimit(Event):
    """The query stopped progressing (or hit its overall cap) with ``committed`` batches: ``why`` says what."""

    committed: int
    why: str
