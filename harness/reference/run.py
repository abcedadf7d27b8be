"""The fault-free reference: the job run in this process at parallelism 1, one stage after another.

For a deterministic job this is what the sim executor at parallelism 1 computes, without threads,
checkpoints or files: every stage keeps all key groups in one heap backend, and a record's outputs
reach the next stage in the order they were emitted. It gives the oracles the expected output (the
whole input, polled split by split as a single source subtask polls it) and each stage's state at a
checkpoint's cut (the input before the checkpoint's source offsets). Its clock stays at 0, so TTL'd
state never expires in the reference: the oracles compare TTL state on the run's own clock.

Time in the reference: no watermark passes until the end of input, which is the maximum watermark:
then every event-time timer fires, stage after stage (a stage's timer output reaches the next stage
before that one ends). Processing-time timers never fire (the clock stays at 0; at end of input they
are dropped, as Flink does). A job whose output depends on *when* a timer fires is not deterministic.
"""

from __future__ import annotations

import copy
from typing import Any

from harness.job import JobGraph, RuntimeContext, apply_chain
from reference_impl.keygroups import KeyGroupRange
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.snapshot import KeyedStateSnapshot
from reference_impl.state import HeapKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.timers import MAX_WATERMARK, InternalTimerService, TimerService

__all__ = ["ReferenceRun", "reference_output"]

_POLL = 1024


class ReferenceRun:
    """Feed input records through every stage; read each stage's keyed state at any point."""

    def __init__(self, graph: JobGraph) -> None:
        self.graph = graph
        self.clock = ManualClock(0)
        max_p = graph.max_parallelism
        self._stages: list[tuple[Any, HeapKeyedStateBackend, Any, RuntimeContext]] = []
        self._timers: dict[str, InternalTimerService] = {}
        for st in graph.stages:
            backend = HeapKeyedStateBackend(max_p, KeyGroupRange(0, max_p - 1), self.clock)
            fn = copy.deepcopy(st.function)
            ctx = RuntimeContext(backend, OperatorStateBackend(), self.clock, st.name, 0, 1, max_p)
            self._timers[st.name] = InternalTimerService(backend)
            ctx._timers = TimerService(self._timers[st.name], self.clock)
            fn.open(ctx)
            self._stages.append((st, backend, fn, ctx))
        self.offsets: dict[str, int] = {}
        self.output: list[Any] = []
        for k, (st, _, fn, ctx) in enumerate(self._stages):
            if st.broadcast is not None:  # the whole broadcast input first: a deterministic job
                ctx._broadcast_side = True  # must not depend on when broadcast elements arrive
                for r in _read_all(st.broadcast.function, st.broadcast.name, max_p):
                    fn.process_broadcast_element(r, ctx)
                ctx._broadcast_side = False
                self._feed_from(k + 1, apply_chain(st.chain, ctx._drain()))

    def feed(self, records: list[Any]) -> None:
        self._feed_from(0, apply_chain(self.graph.source.chain, records))

    def _feed_from(self, first: int, recs: list[Any]) -> None:
        for st, backend, fn, ctx in self._stages[first:]:
            out: list[Any] = []
            for r in recs:
                backend.set_current_key(st.key_selector(r))
                fn.process_element(r, ctx)
                if ctx._out:
                    out.extend(ctx._drain())
            recs = apply_chain(st.chain, out)
        self.output.extend(recs)

    def finish(self) -> None:
        """End of input: the maximum watermark fires every event-time timer, stage after stage."""
        carried: list[Any] = []
        for st, backend, fn, ctx in self._stages:
            out: list[Any] = []
            for r in carried:
                backend.set_current_key(st.key_selector(r))
                fn.process_element(r, ctx)
                if ctx._out:
                    out.extend(ctx._drain())

            def fire(domain: str, ts: int, key: Any, ns: Any, fn: Any = fn, ctx: RuntimeContext = ctx) -> None:
                ctx.time_domain, ctx.timer_namespace = domain, ns
                fn.on_timer(ts, ctx)
                ctx.time_domain = ctx.timer_namespace = None

            self._timers[st.name].advance_watermark(MAX_WATERMARK, fire)
            out.extend(ctx._drain())
            carried = apply_chain(st.chain, out)
        self.output.extend(carried)

    def advance(self, offsets: dict[str, int]) -> ReferenceRun:
        """Feed the input between the current offsets and ``offsets``; a reference that would have to
        go back is rebuilt from the start (offsets of later checkpoints normally only grow)."""
        if any(int(offsets.get(k, 0)) < n for k, n in self.offsets.items()):
            return ReferenceRun(self.graph).advance(offsets)
        batch: list[Any] = []
        for r in self.graph.source.function.between(self.offsets, offsets):
            batch.append(r)
            if len(batch) >= _POLL:
                self.feed(batch)
                batch = []
        self.feed(batch)
        self.offsets = {k: int(v) for k, v in offsets.items()}
        return self

    def state_names(self) -> set[str]:
        """The keyed and operator states the stages have declared so far (in ``open`` or while
        processing; not the runtime's own ``__`` states)."""
        keyed = {n for _, backend, _, _ in self._stages for n in backend.registered_state_names()}
        own = {n for *_, ctx in self._stages for n in ctx.operator_state.live() if not n.startswith("__")}
        return keyed | own

    def state(self, stage: str) -> KeyedStateSnapshot:
        """The keyed state of ``stage`` (all key groups) as a checkpoint would hold it."""
        for st, backend, _, _ in self._stages:
            if st.name == stage:
                return backend.snapshot(0)
        raise KeyError(f"job {self.graph.name!r} has no keyed stage {stage!r}")


    def operator_state(self, stage: str) -> dict[str, tuple[str, Any]]:
        """The operator state of ``stage`` (its one subtask): name -> (mode, value), as a checkpoint
        view (``reference_impl.inspect``) holds it."""
        for st, _, _, ctx in self._stages:
            if st.name == stage:
                return {n: (mode.value, v) for n, (mode, v) in ctx.operator_state.live().items()}
        raise KeyError(f"job {self.graph.name!r} has no keyed stage {stage!r}")


def _read_all(function: Any, name: str, max_p: int) -> list[Any]:
    src = copy.deepcopy(function)
    src.open(src.initial_splits(), RuntimeContext(None, OperatorStateBackend(), ManualClock(0), name, 0, 1, max_p))
    out: list[Any] = []
    while not src.exhausted():
        batch = src.poll(_POLL)
        if not batch:
            break
        out.extend(batch)
    return out


def declared_state_names(graph: JobGraph, wanted: frozenset[str] = frozenset()) -> set[str]:
    """The keyed states ``graph``'s stages declare: those their ``open`` declares, and when that
    lacks some of ``wanted``, every state the whole fault-free run declares (states created lazily)."""
    names = ReferenceRun(graph).state_names()
    if wanted <= names:
        return names
    ref = ReferenceRun(graph)
    ref.feed(_read_all(graph.source.function, graph.source.name, graph.max_parallelism))
    ref.finish()
    return names | ref.state_names()


def reference_output(graph: JobGraph, run_stages: bool = True) -> tuple[list[Any], list[Any]]:
    """(the whole input as one source subtask polls it, the fault-free output; empty unless
    ``run_stages``)."""
    src = copy.deepcopy(graph.source.function)
    ctx = RuntimeContext(
        None, OperatorStateBackend(), ManualClock(0), graph.source.name, 0, 1, graph.max_parallelism
    )
    src.open(src.initial_splits(), ctx)
    ref = ReferenceRun(graph)
    inputs: list[Any] = []
    while not src.exhausted():
        batch = src.poll(_POLL)
        if not batch:
            break
        inputs.extend(batch)
        if run_stages:
            ref.feed(batch)
    if run_stages:
        ref.finish()
    return inputs, ref.output
