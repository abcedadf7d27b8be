"""Fault schedules: when each fault of a scenario fires, decided from the seed alone.

``plan`` turns a scenario's faults into concrete firings (random triggers become seeded times, so the
same seed gives the same schedule). The :class:`Nemesis` (Jepsen's word) watches the run — time,
completed checkpoints, record counts, failpoint hits — fires each fault once through an executor's
injector factory, heals it after its duration, and records ``fault_start``/``fault_end`` in the
history. It is executor-agnostic: the sim executor and the Spark driver feed it the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.injectors.base import Injector, InjectorError, NotReady
from chaos.scenario import Fault, Scenario
from harness.driver.controls import Emit, ExecutorControls
from harness.events import FaultEnd, FaultStart

__all__ = [
    "PlannedFault",
    "plan",
    "Nemesis",
    "NemesisPlan",
    "DEFAULT_RANDOM_WINDOW_MS",
    "FailpointAction",
    "FaultEntry",
    "FaultEvents",
    "RuntimeFaultEvents",
]

DEFAULT_RANDOM_WINDOW_MS = 5_000


class FaultEntry(Protocol):
    """What the Nemesis reads of a planned fault: a scenario's fault (:data:`chaos.scenario.Fault`) or a
    Structured Streaming query's (:class:`chaos.sss.run.SssFault`)."""

    @property
    def kind(self) -> str: ...

    @property
    def target(self) -> str | int | None: ...

    @property
    def duration_ms(self) -> int | None: ...


@dataclass
class PlannedFault:
    """One firing of one scenario fault. ``kind`` is the trigger kind; ``value`` its resolved value."""

    fault_id: int
    fault: Fault | FaultEntry
    kind: str  # time_ms | checkpoint | records | failpoint | batches (a query's committed micro-batches)
    value: Any
    rng_seed: int
    fired: bool = False
    healed: bool = False
    fired_at: int | None = None
    injector: Injector | None = field(default=None, repr=False)
    after_ms: int = 0  # the trigger's after_ms: fire this long after the condition is reached
    due_at: int | None = None  # when a reached trigger with after_ms fires (or a not-ready one retries)
    not_ready: str | None = None  # why the last attempt found no target yet
    armed_after: int = 0  # a failpoint trigger's checkpoint: it fires only once that one completed

    @property
    def trigger(self) -> str:
        """``checkpoint=2``, ``time_ms=500+100ms`` (reached, then ``after_ms`` later),
        ``failpoint=during_sink_commit after checkpoint 3``."""
        armed = f" after checkpoint {self.armed_after}" if self.armed_after else ""
        return f"{self.kind}={self.value}" + (f"+{self.after_ms}ms" if self.after_ms else "") + armed

    def describe(self) -> str:
        return f"#{self.fault_id} {self.fault.kind} at {self.trigger}"


def plan(scenario: Scenario) -> list[PlannedFault]:
    """Concrete firings for a scenario's faults; a ``random: N`` trigger becomes N seeded times."""
    rng = random.Random(f"statechaos-schedule-{scenario.seed}")
    out: list[PlannedFault] = []
    for f in scenario.runtime.faults:
        at = f.at
        if at.kind == "random":
            window = at.within_ms or DEFAULT_RANDOM_WINDOW_MS
            times = sorted(rng.randrange(1, max(2, window)) for _ in range(at.random or 1))
            for t in times:
                out.append(PlannedFault(len(out) + 1, f, "time_ms", t, rng.getrandbits(32)))
        else:
            out.append(
                PlannedFault(
                    len(out) + 1,
                    f,
                    at.kind,
                    getattr(at, at.kind),
                    rng.getrandbits(32),
                    after_ms=at.after_ms or 0,
                    armed_after=(at.checkpoint or 0) if at.kind == "failpoint" else 0,
                )
            )
    return out


@dataclass
class FailpointAction:
    """What a failpoint hit should do: crash the task, delay it by ``delay_ms``, or drop what follows."""

    action: str
    delay_ms: int = 0
    fault_id: int = 0


InjectorFactory = Callable[[PlannedFault, random.Random], Injector | None]


class FaultEvents(Protocol):
    """How a Nemesis writes its faults into the run's history: the runtime's events
    (:class:`RuntimeFaultEvents`), or a Structured Streaming query's, which name the micro-batch each
    fault hit (``chaos.sss.run.QueryHistory``)."""

    def started(self, p: PlannedFault, details: dict[str, Any], target: str | None, trigger: str) -> None:
        """``p`` fired: its injector (``p.injector``) is about to start."""

    def failed(self, p: PlannedFault, target: str | None, error: str, trigger: str) -> None:
        """``p`` could not be injected (nothing to act on): recorded, never silently dropped."""

    def ended(self, p: PlannedFault, error: str | None = None) -> None:
        """``p`` healed (or its injector failed to start, ``error``)."""


@dataclass(frozen=True)
class RuntimeFaultEvents:
    """The runtime's ``fault_start``/``fault_end``, numbered by the planned fault's id."""

    emit: Emit

    def started(self, p: PlannedFault, details: dict[str, Any], target: str | None, trigger: str) -> None:
        self.emit(FaultStart(fault_id=p.fault_id, kind=p.fault.kind, target=target, trigger=trigger,
                             details=details, holds_tasks=_holds_tasks(p.fault)))  # fmt: skip

    def failed(self, p: PlannedFault, target: str | None, error: str, trigger: str) -> None:
        self.emit(FaultStart(fault_id=p.fault_id, kind=p.fault.kind, target=target, trigger=trigger,
                             details={"error": error}, holds_tasks=_holds_tasks(p.fault)))  # fmt: skip
        self.emit(FaultEnd(fault_id=p.fault_id, kind=p.fault.kind, error=error))

    def ended(self, p: PlannedFault, error: str | None = None) -> None:
        if error is None:
            self.emit(FaultEnd(fault_id=p.fault_id, kind=p.fault.kind))
        else:
            self.emit(FaultEnd(fault_id=p.fault_id, kind=p.fault.kind, error=error))


def _holds_tasks(f: Fault | FaultEntry) -> bool:
    """Whether the fault's kind may keep a task from acting while it lasts (liveness reads it)."""
    from chaos.faults import FAULT_KINDS

    return FAULT_KINDS[f.kind].holds_tasks


@dataclass(frozen=True)
class NemesisPlan:
    """The run's planned faults as an executor is given them (:class:`harness.driver.controls.FaultPlan`): it
    records them in its ``run_start`` and, once constructed, starts a :class:`Nemesis` on its controls.
    ``injectors(controls)`` gives the factory that builds each planned fault's injector on that
    executor."""

    planned_faults: list[PlannedFault]
    injectors: Callable[[ExecutorControls], InjectorFactory]

    def planned(self) -> list[dict[str, Any]]:
        from harness.oracles.fault_schedule import planned_fault

        return [planned_fault(p.fault_id, p.fault.kind, p.trigger) for p in self.planned_faults]

    def start(self, controls: ExecutorControls, emit: Emit) -> Nemesis:
        return Nemesis(self.planned_faults, self.injectors(controls), emit)


class Nemesis:
    """Fires planned faults when their triggers are reached and heals them after ``duration_ms``: the
    :class:`~harness.driver.controls.FaultScheduler` an executor starts from its :class:`NemesisPlan`.

    ``factory(planned, rng)`` builds each planned fault's injector on the executor (None when the
    runtime acts by itself, e.g. at a failpoint); ``emit`` writes the executor's history, in the
    runtime's events unless ``events`` says how (a Structured Streaming query's).
    """

    def __init__(self, planned: list[PlannedFault], factory: InjectorFactory, emit: Emit,
                 events: FaultEvents | None = None) -> None:  # fmt: skip
        self.planned = planned
        self.factory, self.emit = factory, emit
        self.events: FaultEvents = events if events is not None else RuntimeFaultEvents(emit)
        self.records = 0
        self.last_checkpoint = 0
        self.now_ms = 0

    # ---------------------------------------------------------------- observations

    def on_time(self, now_ms: int) -> None:
        self.now_ms = now_ms
        for p in self.planned:
            if not p.fired and p.kind == "time_ms" and now_ms >= p.value:
                self._fire(p)
            elif not p.fired and p.due_at is not None and now_ms >= p.due_at:
                self._fire(p)
        self._heal_due()

    def _reached(self, p: PlannedFault) -> None:
        """A checkpoint or records trigger was reached: fire now, or ``after_ms`` later (on_time)."""
        if not p.after_ms:
            self._fire(p)
        elif p.due_at is None:
            p.due_at = self.now_ms + p.after_ms

    def on_checkpoint_completed(self, checkpoint_id: int) -> None:
        self.last_checkpoint = max(self.last_checkpoint, checkpoint_id)
        for p in self.planned:
            if not p.fired and p.kind == "checkpoint" and checkpoint_id >= p.value:
                self._reached(p)

    def on_records(self, total_records: int) -> None:
        self.records = total_records
        for p in self.planned:
            if not p.fired and p.kind == "records" and total_records >= p.value:
                self._reached(p)

    def on_failpoint(self, name: str, target: str | None = None) -> FailpointAction | None:
        """Called by the runtime at a named failpoint; returns the action to take there, if any.
        A failpoint fault with a target fires only for that target (e.g. ``count[1]``)."""
        for p in self.planned:
            if p.fired or p.kind != "failpoint" or p.value != name or self.last_checkpoint < p.armed_after:
                continue
            if p.fault.target is not None and target is not None and str(p.fault.target) != target:
                continue
            self._fire(p, target_override=target)
            action = getattr(p.fault, "action", None)  # a failpoint fault's; other kinds crash
            if action == "delay":
                return FailpointAction("delay", getattr(p.fault, "delay_ms", None) or 0, p.fault_id)
            if action == "drop":
                return FailpointAction("drop", 0, p.fault_id)
            return FailpointAction("crash", 0, p.fault_id)
        return None

    # ---------------------------------------------------------------- firing and healing

    def fire(self, p: PlannedFault, trigger: str | None = None) -> bool:
        """Fire ``p`` now, as its placement decided (a query's run loop: once its micro-batches have
        committed, inside a batch's sink window, on an idle query); ``trigger`` says what placed it.
        False when its target is not ready (nothing to act on yet, or gone before the injector
        started): it stays planned, for the caller to place again later."""
        return self._fire(p, trigger=trigger, retry_on_tick=False)

    def _fire(self, p: PlannedFault, target_override: str | None = None, trigger: str | None = None,
              retry_on_tick: bool = True) -> bool:  # fmt: skip
        rng = random.Random(p.rng_seed)
        trigger = trigger or f"{p.kind}={p.value}"
        try:
            injector = self.factory(p, rng)
        except NotReady as e:  # the target is not there yet: try again on the next tick
            if retry_on_tick:
                p.due_at = self.now_ms + 1
            p.not_ready = str(e)
            return False
        except InjectorError as e:  # nothing to act on (target gone, refused)
            p.fired, p.fired_at = True, self.now_ms
            self._failed(p, target_override, str(e), trigger)
            return True
        p.fired, p.fired_at = True, self.now_ms
        p.injector = injector
        details = injector.describe() if injector else {}
        target = details.get("target") or target_override or p.fault.target
        self.events.started(p, details, None if target is None else str(target), trigger)
        if injector is not None:
            try:
                injector.start()
            except InjectorError as e:
                if isinstance(e, NotReady) and not retry_on_tick:  # gone meanwhile: placed again later
                    p.fired, p.fired_at, p.injector, p.not_ready = False, None, None, str(e)
                    return False
                p.healed = True
                self.events.ended(p, str(e))
                return True
        # instant faults (a kill, a crash, a damaged file) end as they start; the others last for
        # duration_ms, or until the run ends
        if injector is None or injector.instant:
            self._heal(p)
        return True

    def _failed(self, p: PlannedFault, target: str | None, error: str, trigger: str | None = None) -> None:
        """A fault that could not be injected is recorded (Jepsen's :info), never silently dropped."""
        p.healed = True
        tgt = target or p.fault.target
        self.events.failed(p, None if tgt is None else str(tgt), error, trigger or f"{p.kind}={p.value}")

    def skip(self, p: PlannedFault, why: str, trigger: str = "") -> None:
        """``p`` will not fire (its run ended before its placement came): recorded as a failure."""
        p.fired, p.fired_at = True, self.now_ms
        self._failed(p, None, why, trigger)

    def _heal(self, p: PlannedFault) -> None:
        if p.healed:
            return
        p.healed = True
        if p.injector is not None:
            p.injector.stop()
        self.events.ended(p)

    def _heal_due(self) -> None:
        for p in self.planned:
            if p.fired and not p.healed and p.fault.duration_ms is not None and p.fired_at is not None:
                if self.now_ms >= p.fired_at + p.fault.duration_ms:
                    self._heal(p)

    def heal_all(self) -> None:
        """Heal every active fault (end of run, Ctrl-C): nothing stays paused, cut or damaged-by-toxic."""
        errors = []
        for p in self.planned:
            if not p.fired and p.not_ready is not None:  # reached, but its target never appeared
                p.fired = True
                self._failed(p, None, f"its target never became available: {p.not_ready}")
            if p.fired and not p.healed:
                try:
                    self._heal(p)
                except Exception as e:  # keep healing the others
                    errors.append(e)
        if errors:
            raise errors[0]

    def awaiting(self, kinds: tuple[str, ...]) -> list[str]:
        """What the end-of-input gate keeps the job going for: planned faults not fired yet whose
        trigger is of one of ``kinds`` (or already reached and waiting for its ``after_ms``), and
        faults with a ``duration_ms`` still active (their window must not be cut short by the end)."""
        out = [
            p.describe() for p in self.planned if not p.fired and (p.kind in kinds or p.due_at is not None)
        ]
        out += [
            f"{p.describe()} until healed"
            for p in self.planned
            if p.fired and not p.healed and p.fault.duration_ms is not None
        ]
        return out

    def holding(self) -> list[str]:
        """Active faults with a duration whose kind may hold tasks (a pause, a cut link, closed
        storage): planned pauses, whose time the run's stall watch does not count. A fault without a
        duration lasts to the run's end and excuses nothing."""
        return [
            p.describe()
            for p in self.active
            if p.fault.duration_ms is not None and p.injector is not None and _holds_tasks(p.fault)
        ]

    @property
    def pending(self) -> list[PlannedFault]:
        return [p for p in self.planned if not p.fired]

    @property
    def active(self) -> list[PlannedFault]:
        return [p for p in self.planned if p.fired and not p.healed]
