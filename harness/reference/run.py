"""The fault-free reference: the job run in this process at parallelism 1, one stage after another.

For a deterministic job this is what the sim executor at parallelism 1 computes, without threads,
checkpoints or files: every stage keeps all key groups in one heap backend, and a record's outputs
reach the next stage in the order they were emitted. It gives the oracles the expected output (the
whole input, polled split by split as a single source subtask polls it) and each stage's state at a
checkpoint's cut (the input before the checkpoint's source offsets). Its clock stays at 0, so TTL'd
state never expires in the reference: the oracles compare TTL state on the run's own clock.

Time in the reference. For the expected output (``reference_output``) watermarks advance as in a
fault-free run at parallelism 1: after each poll the source's watermark (per split, the minimum over
its unfinished splits, as ``harness.tasks.source_task``) goes through the stages after the records
of that poll, each stage firing its due event-time timers and handing their output to the next stage
before the watermark, so an event-time job's closed windows leave the reference's state as they
leave the job's (holding every window to the end of input made the reference cost more than the job,
and superlinearly). For the state at a checkpoint's cut (``ReferenceRun.advance``) no watermark
passes until the end of input: how far the run's watermark had come at a cut depends on how its
source subtasks interleaved, so the oracles judge event-time state at cuts on their own (timers and
watermarks) and compare the rest. The end of input is the maximum watermark: every event-time timer
left fires, stage after stage. Processing-time timers never fire (the clock stays at 0; at end of
input they are dropped, as Flink does). A job whose output depends on *when* a timer fires is not
deterministic.
"""

from __future__ import annotations

import copy
from typing import Any

from harness.job import JobGraph, RuntimeContext, apply_chain
from harness.job.job_graph import WatermarkStrategy
from harness.tasks.source_task import poll_tracking_split_max, splits_watermark
from reference_impl.keygroups import KeyGroupRange
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.snapshot import KeyedStateSnapshot
from reference_impl.state import HeapKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.timers import MAX_WATERMARK, MIN_WATERMARK, InternalTimerService, TimerService

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

    def feed(self, records: list[Any], watermark: int | None = None) -> None:
        """Feed records through every stage, then ``watermark`` (if given) after them."""
        self._feed_from(0, apply_chain(self.graph.source.chain, records), watermark)

    def _feed_from(self, first: int, recs: list[Any], watermark: int | None = None) -> None:
        for st, backend, fn, ctx in self._stages[first:]:
            out: list[Any] = []
            for r in recs:
                backend.set_current_key(st.key_selector(r))
                fn.process_element(r, ctx)
                if ctx._out:
                    out.extend(ctx._drain())
            if watermark is not None:  # the timers due fire, their output goes before the watermark
                self._fire(st, fn, ctx, watermark)
                out.extend(ctx._drain())
            recs = apply_chain(st.chain, out)
        self.output.extend(recs)

    def _fire(self, st: Any, fn: Any, ctx: RuntimeContext, watermark: int) -> None:
        def fire(domain: str, ts: int, key: Any, ns: Any) -> None:
            ctx.time_domain, ctx.timer_namespace = domain, ns
            fn.on_timer(ts, ctx)
            ctx.time_domain = ctx.timer_namespace = None

        self._timers[st.name].advance_watermark(watermark, fire)

    def finish(self) -> None:
        """End of input: the maximum watermark fires every event-time timer, stage after stage."""
        self._feed_from(0, [], MAX_WATERMARK)

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
    strategy = graph.source.watermarks
    marks = _SourceWatermarks(src, strategy) if run_stages and strategy is not None else None
    inputs: list[Any] = []
    while not src.exhausted():
        batch = src.poll(_POLL) if marks is None else marks.poll(_POLL)
        if not batch:
            break
        inputs.extend(batch)
        if run_stages:
            ref.feed(batch, None if marks is None else marks.rose())
    if run_stages:
        ref.finish()
    return inputs, ref.output


class _SourceWatermarks:
    """One source subtask's watermarks over all splits, as ``harness.tasks.source_task`` generates
    them: per split the largest event time read so far, the minimum over the unfinished splits (a
    split not read yet holds it at the minimum), reported when it rose."""

    def __init__(self, src: Any, strategy: WatermarkStrategy) -> None:
        self.src, self.strategy = src, strategy
        self.split_max: dict[str, int] = {}
        self.watermark = MIN_WATERMARK

    def poll(self, max_records: int) -> list[Any]:
        return poll_tracking_split_max(self.src, self.strategy.timestamp, self.split_max, max_records)

    def rose(self) -> int | None:
        """The watermark after the last poll if it rose, else None."""
        wm = splits_watermark(self.src, self.strategy.watermark_for, self.split_max)
        if wm is not None and wm > self.watermark:
            self.watermark = wm
            return self.watermark
        return None
