"""One subtask of a keyed stage (:class:`StreamTask`): barrier alignment across its input channels,
the keyed function under each record's key, timers and watermarks, chained operators, snapshots of
keyed and operator state, and the two-phase-commit sink when it is the last stage.

One module although long (~260 lines of one class): alignment, timers, snapshots and the sink
hand-offs all act on the same per-subtask state at the same barrier, and read best together."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any, cast

from harness.events import BarrierAlignment
from harness.job import (
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    RuntimeContext,
    StageSpec,
    apply_chain,
)
from harness.job.sinks import SINK_STATE, TwoPhaseCommitFileSink
from harness.run_store import RunStore
from harness.tasks.barriers import Alignment, BarrierAligner
from harness.tasks.items import CancelCheckpointMarker, CheckpointBarrier, EndOfInput, Watermark
from harness.tasks.partitioner import Partitioner
from harness.tasks.task_base import TaskBase
from harness.tasks.task_env import TaskEnv
from reference_impl.keygroups import (
    KeyGroupRange,
)
from reference_impl.rescale import RestoredSubtask
from reference_impl.time import TimeProvider
from reference_impl.timers import MAX_WATERMARK, MIN_WATERMARK, InternalTimerService, TimerService

__all__ = ["StreamTask", "WATERMARK_STATE", "merge_record_runs"]

WATERMARK_STATE = "__watermark"  # union: each keyed subtask's watermark at the checkpoint


def merge_record_runs(
    messages: list[tuple[int, Any]], is_broadcast: Callable[[int], bool]
) -> list[tuple[int, Any]]:
    """``(channel, message)`` pairs as an input gate hands them out, each run of consecutive
    ``("records", list)`` messages of one side (keyed or broadcast inputs) merged into one, under
    the run's first channel. Any other message (a barrier, a watermark) ends a run, so a batch never
    spans one, and order is kept. Fewer, larger batches: larger groups per key for
    ``process_elements`` and less per-call overhead."""
    out: list[tuple[int, Any]] = []
    run: list[Any] | None = None
    side = False
    for ch, msg in messages:
        if msg[0] != "records":
            out.append((ch, msg))
            run = None
            continue
        if run is not None and is_broadcast(ch) == side:
            run.extend(msg[1])
            continue
        run, side = (
            msg[1] if isinstance(msg[1], list) else list(msg[1]),
            is_broadcast(ch),
        )  # extended in place
        out.append((ch, ("records", run)))
    return out


class StreamTask(TaskBase):
    """One subtask of a keyed stage: aligns barriers across its input channels, runs the keyed
    function under each record's key, applies its chained operators, and writes to the next stage or the
    exactly-once sink."""

    is_source = False

    def __init__(
        self,
        env: TaskEnv,
        stage_index: int,
        subtask: int,
        num_inputs: int,
        keyed_backend_factory: Callable[[int, KeyGroupRange, TimeProvider], Any] | None = None,
    ) -> None:
        self.stage: StageSpec = env.graph.stages[stage_index]
        super().__init__(env, self.stage.name, subtask, self.stage.parallelism)
        factory = keyed_backend_factory or env.graph.state_backend.create
        self.keyed = factory(self.max_p, self.key_group_range, env.clock)
        self.function = copy.deepcopy(self.stage.function)
        self.chain = list(self.stage.chain)
        self.ctx = RuntimeContext(
            self.keyed, self.op_state, env.clock, self.stage.name, subtask, self.stage.parallelism, self.max_p
        )
        self.timers = InternalTimerService(self.keyed)
        self.ctx._timers = TimerService(self.timers, env.clock)
        self.channel_watermarks = [MIN_WATERMARK] * num_inputs
        self.processing_timers_quiesced = False
        self.aligner = BarrierAligner(num_inputs)
        self._aligning: tuple[int, int] | None = None  # (checkpoint id, since ms) of a blocking alignment
        self.num_inputs = num_inputs
        b = self.stage.broadcast
        self.keyed_inputs = num_inputs - (b.parallelism if b is not None else 0)  # broadcast ones last
        last = stage_index == len(env.graph.stages) - 1
        self.partition = (
            None
            if last
            else Partitioner(
                env.graph.stages[stage_index + 1].key_selector,
                self.max_p,
                env.graph.stages[stage_index + 1].parallelism,
            )
        )
        self.sink = (
            TwoPhaseCommitFileSink(
                RunStore(env.run_dir).output,
                subtask,
                env.emit,
                failpoint=self._hit,
                attempt=env.attempt,
                identity=getattr(self.stage.sink, "identity", None),
                sync=env.durable,
            )
            if last
            else None
        )
        self.finished = False
        self._key_selector = self.stage.key_selector
        # a function that takes records grouped by key gets them so (KeyedProcessFunction.process_elements)
        self._batched = type(self.function).process_elements is not KeyedProcessFunction.process_elements

    def restore(
        self, restored: RestoredSubtask | None, checkpoint_id: int | None = None, path: str | None = None
    ) -> None:
        if restored is not None:
            self.timers.restore(restored.keyed)
        self._restore_state(restored)
        self._restore_watermark()
        self._write_restored_file(checkpoint_id, path)
        self.op_state.get_union_list_state(WATERMARK_STATE).clear()  # snapshots write this subtask's
        if self.sink is not None:
            txns = self.op_state.get_union_list_state(SINK_STATE)
            self.sink.restore(txns.get(), self.parallelism)
            txns.clear()
        self.function.open(self.ctx)

    def _restore_watermark(self) -> None:
        """The restored watermark is the smallest any subtask had at the checkpoint: every record
        after the checkpoint is later than it, at any parallelism. Input channels start there."""
        wms = self.op_state.get_union_list_state(WATERMARK_STATE)
        restored = min((int(w) for w in wms.get()), default=MIN_WATERMARK)
        self.timers.watermark = restored
        self.channel_watermarks = [restored] * self.num_inputs

    def _restore_event_extra(self) -> dict[str, Any]:
        return {"watermark": self.timers.watermark}

    def blocked_channels(self) -> set[int]:
        return self.aligner.blocked_channels()

    # ------------------------------------------------------------------ time

    def _on_timer(self, domain: str, timestamp: int, key: Any, namespace: Any) -> None:
        ctx = self.ctx
        ctx.time_domain, ctx.timer_namespace = domain, namespace
        self.timers_fired[domain] = self.timers_fired.get(domain, 0) + 1
        try:
            self.function.on_timer(timestamp, ctx)
        finally:
            ctx.time_domain = ctx.timer_namespace = None

    def _advance_watermark(self) -> None:
        """The watermark is the minimum over the input channels (a finished one counts as the
        maximum); when it rises, due event-time timers fire, then it is forwarded."""
        finished = self.aligner.finished
        wm = min(MAX_WATERMARK if i in finished else w for i, w in enumerate(self.channel_watermarks))
        if wm <= self.timers.watermark:
            return
        self.timers.advance_watermark(wm, self._on_timer)
        if self.ctx._out:
            self._emit(self.ctx._drain())
        if self.env.output is not None:  # the maximum too: a held end of input must not stop it
            self.env.output.broadcast(Watermark(wm))

    def advance_time(self) -> None:
        """Fire the processing-time timers due on this subtask's clock (executors call it per step)."""
        if self.processing_timers_quiesced:
            return
        nxt = self.timers.next_timestamp("processing")
        if nxt is not None and nxt <= self.env.clock.now_ms():
            self.timers.advance_processing_time(self.env.clock.now_ms(), self._on_timer)
            if self.ctx._out:
                self._emit(self.ctx._drain())

    # ------------------------------------------------------------------ input

    def is_broadcast_input(self, channel: int) -> bool:
        """Whether ``channel`` is a broadcast input (they come after the keyed ones)."""
        return channel >= self.keyed_inputs

    def on_records(self, channel: int, records: list[Any]) -> None:
        """Records taken in from ``channel`` (or from several keyed input channels, in the order they
        arrived with nothing else between them: executors may merge them, so a batched function
        gets larger groups; a barrier or watermark is never inside ``records``)."""
        if channel >= self.keyed_inputs:  # the broadcast input: no key, broadcast state writable
            ctx = self.ctx
            ctx._broadcast_side = True
            fn = cast(KeyedBroadcastProcessFunction, self.function)  # a stage with a broadcast input
            try:
                for r in records:
                    fn.process_broadcast_element(r, ctx)
            finally:
                ctx._broadcast_side = False
            self.records_in += len(records)
            if ctx._out:
                self._emit(ctx._drain())
            return
        set_key, ctx, sel = self.keyed.set_current_key, self.ctx, self._key_selector
        if self._batched:
            groups: dict[Any, list[Any]] = {}
            get = groups.get
            for k, r in zip(map(sel, records), records, strict=True):
                g = get(k)
                if g is None:
                    groups[k] = [r]
                else:
                    g.append(r)
            process_all = self.function.process_elements
            for k, values in groups.items():
                set_key(k)
                process_all(k, values, ctx)
        else:
            process = self.function.process_element
            for r in records:
                set_key(sel(r))
                process(r, ctx)
        self.records_in += len(records)
        if ctx._out:  # what the batch emitted, in order: drained once per batch, not per record
            self._emit(ctx._drain())

    def _emit(self, out: list[Any]) -> None:
        if self.chain:
            out = apply_chain(self.chain, out)
        self.records_out += len(out)
        if self.sink is not None:
            self.sink.write(out)
        else:
            assert self.env.output is not None and self.partition is not None
            self.partition.send_all(self.env.output, out)

    def _track_alignment(self, outcome: str) -> None:
        """Record how long a blocking alignment held channels back, when it ends (``alignment`` event:
        ``liveness`` bounds how long a task stays blocked after an abort). An alignment that completed
        within the same millisecond held nothing back and is not recorded."""
        current = None if self.aligner.current is None else self.aligner.current.checkpoint_id
        if self._aligning is not None and self._aligning[0] != current:
            cid, since = self._aligning
            self._aligning = None
            blocked = max(0, self.env.clock.now_ms() - since)
            if blocked == 0 and outcome == "aligned":
                return
            self.env.emit(
                BarrierAlignment(
                    checkpoint_id=cid,
                    operator=self.operator,
                    subtask=self.subtask,
                    blocked_ms=blocked,
                    outcome=outcome,
                )
            )
        if current is not None and self._aligning is None and self.aligner.blocked_channels():
            self._aligning = (current, self.env.clock.now_ms())

    def on_control(self, channel: int, item: Any) -> None:
        if isinstance(item, CheckpointBarrier):
            aligned = self.aligner.on_barrier(channel, item.checkpoint_id) is Alignment.ALIGNED
            self._track_alignment("aligned" if aligned else "superseded")
            if aligned:
                self._snapshot(item)
            self._forward_cancellations()
        elif isinstance(item, Watermark):
            if item.timestamp > self.channel_watermarks[channel]:
                self.channel_watermarks[channel] = item.timestamp
                self._advance_watermark()
        elif isinstance(item, CancelCheckpointMarker):
            self.aligner.on_cancel(item.checkpoint_id)
            self._track_alignment("cancelled")
            self._forward_cancellations()
        elif isinstance(item, EndOfInput):
            pending = self.aligner.current
            aligned = self.aligner.on_end_of_input(channel) is Alignment.ALIGNED
            self._track_alignment("aligned")
            if aligned and pending is not None:
                self._snapshot(CheckpointBarrier(pending.checkpoint_id, self.env.clock.now_ms()))
            if len(self.aligner.finished) == self.num_inputs and not self.finished:
                # end of input is the maximum watermark: every event-time timer fires; pending
                # processing-time timers are dropped, as Flink quiesces the processing-time service
                self._advance_watermark()
                self.processing_timers_quiesced = True
                self.finished = True
                if self.env.output is not None:
                    self.env.output.broadcast(item)
        else:
            raise TypeError(f"{self.name}: unknown control item {item!r}")

    def _forward_cancellations(self) -> None:
        while self.aligner.cancelled:
            cid = self.aligner.cancelled.pop(0)
            if self.env.output is not None:
                self.env.output.broadcast(CancelCheckpointMarker(cid))

    def _snapshot(self, barrier: CheckpointBarrier) -> None:
        """Aligned on ``barrier``: snapshot keyed and operator state, pre-commit the sink, forward the
        barrier, persist and acknowledge."""
        cid = barrier.checkpoint_id
        self._hit("before_snapshot")
        if self.sink is not None:
            self.op_state.get_union_list_state(SINK_STATE).update(self.sink.pre_commit(cid))
        if self.env.graph.source.watermarks is not None:
            self.op_state.get_union_list_state(WATERMARK_STATE).update([self.timers.watermark])
        snap = self._checkpoint_snapshot()
        if self.env.output is not None:
            self.env.output.broadcast(barrier)
        self._write_and_ack(cid, snap, None)

    # ------------------------------------------------------------------ notifications

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        # the failpoint (a notice lost: action drop) is reached while input flows: once it has ended,
        # the final checkpoint's notice is the one that commits the last transactions (FLIP-147)
        if self.sink is not None and (self.finished or not self._hit("notify_checkpoint_complete")):
            self.sink.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.aligner.on_cancel(checkpoint_id)
        self._track_alignment("cancelled")
        self._forward_cancellations()

    def close(self) -> None:
        if self._aligning is not None:  # still blocked when the task ends (run end, failover)
            self.aligner.current = None
            with contextlib.suppress(Exception):  # the history may be unreachable (a lost driver link)
                self._track_alignment("closed")
        try:
            self.function.close()
        finally:
            if self.sink is not None:
                self.sink.close()
            closer = getattr(self.keyed, "close", None)
            if closer is not None:
                closer()
