"""Subtasks: the executor-agnostic task code that the sim and Spark executors both drive.

An executor owns threads, sockets, clocks and scheduling; a task is driven by plain method calls:
sources by ``poll`` and ``trigger_checkpoint``, keyed stages by ``on_item`` (records, barriers,
cancel markers, end of input) while the executor honours ``blocked_channels()`` (barrier
alignment), and both by ``notify_checkpoint_complete``/``_aborted``. Tasks reach the outside only
through their :class:`TaskEnv`: checkpoint storage, the coordinator gateway, the output writer, the
history and the failpoints.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.barriers import Alignment, BarrierAligner
from harness.failpoints import Failpoints
from harness.items import CancelCheckpointMarker, CheckpointBarrier, EndOfInput, Watermark
from harness.job import JobGraph, RuntimeContext, StageSpec, apply_chain, task_name  # task_name re-exported
from harness.run_store import RunStore
from harness.sinks import SINK_STATE, TwoPhaseCommitFileSink
from reference_impl.checkpoint import StateFileHandle
from reference_impl.checkpoint.format import encode_subtask_state
from reference_impl.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.rescale import RestoredSubtask
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.time import TimeProvider
from reference_impl.timers import MAX_WATERMARK, MIN_WATERMARK, InternalTimerService, TimerService

__all__ = [
    "task_name",
    "CheckpointWriter",
    "CoordinatorGateway",
    "OutputWriter",
    "TaskEnv",
    "Partitioner",
    "SourceTask",
    "StreamTask",
    "SPLITS_STATE",
]

SPLITS_STATE = "__source_splits"
SPLIT_TIMESTAMPS_STATE = "__split_max_timestamps"  # union: [split, largest event time] per split
WATERMARK_STATE = "__watermark"  # union: each keyed subtask's watermark at the checkpoint
Emit = Callable[..., None]


class CheckpointWriter(Protocol):
    def write_subtask_state(
        self, job_id: str, checkpoint_id: int, state: SubtaskStateSnapshot
    ) -> StateFileHandle: ...


class CoordinatorGateway(Protocol):
    def ack(
        self,
        checkpoint_id: int,
        operator: str,
        subtask: int,
        handle: StateFileHandle | None,
        extra: dict[str, Any] | None = None,
    ) -> None: ...

    def decline(self, checkpoint_id: int, operator: str, subtask: int, reason: str) -> None: ...


class OutputWriter(Protocol):
    """Output channels of one subtask, one per downstream subtask; control items go to all."""

    def send(self, target: int, record: Any) -> None: ...

    def broadcast(self, item: Any) -> None: ...


@dataclass
class TaskEnv:
    job_id: str
    attempt: int
    graph: JobGraph
    storage: CheckpointWriter
    gateway: CoordinatorGateway
    clock: TimeProvider
    emit: Emit
    failpoints: Failpoints
    run_dir: Path
    output: OutputWriter | None = None


class Partitioner:
    """Routes a record to the downstream subtask owning its key group (cached per key)."""

    def __init__(self, key_selector: Callable[[Any], Any], max_parallelism: int, parallelism: int) -> None:
        self.key_selector = key_selector
        self.max_p = max_parallelism
        self.p = parallelism
        self._cache: dict[Any, int] = {}

    def __call__(self, record: Any) -> int:
        key = self.key_selector(record)
        t = self._cache.get(key)
        if t is None:
            kg = assign_to_key_group(key, self.max_p)
            t = compute_operator_index_for_key_group(self.max_p, self.p, kg)
            self._cache[key] = t
        return t


class _TaskBase:
    operator: str

    def __init__(self, env: TaskEnv, operator: str, subtask: int, parallelism: int) -> None:
        self.env = env
        self.operator = operator
        self.subtask = subtask
        self.parallelism = parallelism
        self.max_p = env.graph.max_parallelism
        self.name = task_name(operator, subtask)
        self.key_group_range = compute_key_group_range_for_operator_index(self.max_p, parallelism, subtask)
        self.op_state = OperatorStateBackend()
        self.records_in = 0
        self.records_out = 0
        self.keyed: Any = None  # the keyed state backend, for keyed stages

    def _hit(self, failpoint: str) -> None:
        self.env.failpoints.hit(failpoint, self.name)

    def _restore_state(self, restored: RestoredSubtask | None) -> None:
        self._hit("during_restore")
        if restored is not None:
            if self.keyed is not None:
                self.keyed.restore(restored.keyed)
            self.op_state.restore(restored.operator)

    def _subtask_snapshot(self, keyed: bool = True) -> SubtaskStateSnapshot:
        """Keyed (if any, and if asked) and operator state of this subtask, as checkpoints and restored
        files hold it."""
        return SubtaskStateSnapshot(
            self.operator,
            self.subtask,
            self.parallelism,
            self.max_p,
            keyed=None if self.keyed is None or not keyed else self.keyed.snapshot(),
            operator=self.op_state.snapshot(),
        )

    @property
    def _incremental(self) -> bool:
        return self.keyed is not None and self.env.graph.state_backend.incremental

    def _checkpoint_snapshot(self) -> SubtaskStateSnapshot:
        """What a checkpoint writes: with incremental checkpoints the keyed part is written from the
        backend itself (only changed key groups) when the snapshot is persisted."""
        return self._subtask_snapshot(keyed=not self._incremental)

    def _write_restored_file(self, checkpoint_id: int | None, path: str | None) -> None:
        """Record what this subtask actually holds after restore: the restored-state oracle compares it
        with the checkpoint (read independently) and with a sequential model."""
        d = RunStore(self.env.run_dir).restored
        d.mkdir(parents=True, exist_ok=True)
        fname = f"a{self.env.attempt:04d}-{self.operator}-{self.subtask}.state"
        (d / fname).write_bytes(encode_subtask_state(self._subtask_snapshot()))
        self.env.emit(
            "restore",
            checkpoint_id=checkpoint_id,
            path=path,
            attempt=self.env.attempt,
            operator=self.operator,
            subtask=self.subtask,
            parallelism=self.parallelism,
            key_group_range=[self.key_group_range.start, self.key_group_range.end],
            restored_state_file=f"restored/{fname}",
            **self._restore_event_extra(),
        )

    def _restore_event_extra(self) -> dict[str, Any]:
        return {}

    def _write_and_ack(
        self, checkpoint_id: int, snap: SubtaskStateSnapshot, extra: dict[str, Any] | None
    ) -> None:
        try:
            if self._incremental:
                handle = self.keyed.checkpoint_incremental(
                    self.env.storage,
                    self.env.job_id,
                    checkpoint_id,
                    self.operator,
                    self.subtask,
                    self.parallelism,
                    snap.operator,
                ).handle
            else:
                handle = self.env.storage.write_subtask_state(self.env.job_id, checkpoint_id, snap)
        except OSError as e:  # storage unavailable or full: this checkpoint cannot complete
            self.env.gateway.decline(checkpoint_id, self.operator, self.subtask, f"state write failed: {e}")
            return
        self._hit("after_snapshot_before_ack")
        self.env.gateway.ack(checkpoint_id, self.operator, self.subtask, handle, extra)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass

    def close(self) -> None:
        pass


class SourceTask(_TaskBase):
    """One subtask of a source: polls the source function and routes records by key group to the
    first stage, or, for a source broadcast to stage ``broadcast_to``, sends each to every subtask."""

    is_source = True

    def __init__(self, env: TaskEnv, subtask: int, broadcast_to: int | None = None) -> None:
        spec = env.graph.source if broadcast_to is None else env.graph.stages[broadcast_to].broadcast
        assert spec is not None
        super().__init__(env, spec.name, subtask, spec.parallelism)
        self.function = copy.deepcopy(spec.function)
        self.chain = list(spec.chain)
        self.broadcast_to = broadcast_to
        first = env.graph.stages[0 if broadcast_to is None else broadcast_to]
        self.partition = Partitioner(first.key_selector, self.max_p, first.parallelism)
        self.fan_out = first.parallelism
        self.ctx = RuntimeContext(
            None, self.op_state, env.clock, spec.name, subtask, spec.parallelism, self.max_p
        )
        self.finished = False
        self.watermarks = spec.watermarks
        self.split_max: dict[str, int] = {}  # split -> largest event time read from it
        self.watermark = MIN_WATERMARK  # the last watermark emitted

    def restore(
        self, restored: RestoredSubtask | None, checkpoint_id: int | None = None, path: str | None = None
    ) -> None:
        self._restore_state(restored)
        stamps = self.op_state.get_union_list_state(SPLIT_TIMESTAMPS_STATE)
        restored_stamps = {str(n): int(ts) for n, ts in stamps.get()}
        splits_state = self.op_state.get_list_state(SPLITS_STATE)
        if restored is None:
            everything = self.function.initial_splits()
            base, rem = divmod(len(everything), self.parallelism)
            start = self.subtask * base + min(self.subtask, rem)
            splits_state.update(everything[start : start + base + (1 if self.subtask < rem else 0)])
        self.function.open(splits_state.get(), self.ctx)
        own = self.function.offsets()
        self.split_max = {n: ts for n, ts in restored_stamps.items() if n in own}
        self._write_restored_file(checkpoint_id, path)
        stamps.clear()  # the restored file shows the union as restored; snapshots write this subtask's

    def _poll_with_watermarks(self, max_records: int) -> list[Any]:
        assert self.watermarks is not None
        ts_of, out = self.watermarks.timestamp, []
        for split, records in self.function.poll_splits(max_records):
            if records:
                top = max(int(ts_of(r)) for r in records)
                if top > self.split_max.get(split, MIN_WATERMARK):
                    self.split_max[split] = top
                out.extend(records)
        return out

    def _emit_watermark(self) -> None:
        """The minimum over this subtask's unfinished splits (a split not read yet holds it at the
        minimum; finished splits no longer count), emitted when it rose."""
        fn, wms = self.function, []
        for split in fn.offsets():
            if not fn.split_finished(split):
                top = self.split_max.get(split)
                wms.append(MIN_WATERMARK if top is None else self.watermarks.watermark_for(top))
        if wms and min(wms) > self.watermark:
            self.watermark = min(wms)
            assert self.env.output is not None
            self.env.output.broadcast(Watermark(self.watermark))

    def poll(self, max_records: int) -> int:
        """Emit up to ``max_records`` records downstream, then the watermark if it rose; returns how
        many records were polled."""
        if self.watermarks is not None:
            records = self._poll_with_watermarks(max_records)
        else:
            records = self.function.poll(max_records)
        polled = len(records)
        if self.chain:
            records = apply_chain(self.chain, records)
        out = self.env.output
        assert out is not None
        part = self.partition
        if self.broadcast_to is not None:
            for r in records:
                for target in range(self.fan_out):
                    out.send(target, r)
        else:
            for r in records:
                out.send(part(r), r)
        self.records_out += len(records)
        if self.watermarks is not None:
            self._emit_watermark()
        return polled

    def exhausted(self) -> bool:
        return self.function.exhausted()

    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int, kind: str = "checkpoint") -> None:
        """Take this source's snapshot (its splits), inject barrier ``checkpoint_id`` into every output
        channel, then persist the snapshot and acknowledge with the offsets it covers."""
        self._hit("before_snapshot")
        self.op_state.get_list_state(SPLITS_STATE).update(self.function.snapshot_splits())
        if self.watermarks is not None:
            self.op_state.get_union_list_state(SPLIT_TIMESTAMPS_STATE).update(
                [[n, ts] for n, ts in sorted(self.split_max.items())]
            )
        snap = self._subtask_snapshot()
        offsets = self.function.offsets()
        if self.broadcast_to is not None:  # kept apart from the main source's splits
            offsets = {f"{self.operator}/{k}": v for k, v in offsets.items()}
        assert self.env.output is not None
        self.env.output.broadcast(CheckpointBarrier(checkpoint_id, timestamp, kind))
        self._write_and_ack(checkpoint_id, snap, {"source_offsets": offsets})

    def end_input(self) -> None:
        """This subtask's input is exhausted: tell downstream no more records come (which stands for
        the maximum watermark, as Flink sends ``MAX_WATERMARK`` before end of partition)."""
        if not self.finished:
            self.finished = True
            assert self.env.output is not None
            self.env.output.broadcast(EndOfInput())


class StreamTask(_TaskBase):
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
            )
            if last
            else None
        )
        self.finished = False
        self._key_selector = self.stage.key_selector

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
        try:
            self.function.on_timer(timestamp, ctx)
        finally:
            ctx.time_domain = ctx.timer_namespace = None

    def _advance_watermark(self) -> None:
        """The watermark is the minimum over the input channels (a finished one counts as the
        maximum); when it rises, due event-time timers fire, then it is forwarded."""
        finished = self.aligner.finished
        wm = min(
            MAX_WATERMARK if i in finished else w for i, w in enumerate(self.channel_watermarks)
        )
        if wm <= self.timers.watermark:
            return
        self.timers.advance_watermark(wm, self._on_timer)
        if self.ctx._out:
            self._emit(self.ctx._drain())
        if self.env.output is not None and wm < MAX_WATERMARK:
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

    def on_records(self, channel: int, records: list[Any]) -> None:
        if channel >= self.keyed_inputs:  # the broadcast input: no key, broadcast state writable
            ctx = self.ctx
            ctx._broadcast_side = True
            try:
                for r in records:
                    self.function.process_broadcast_element(r, ctx)
            finally:
                ctx._broadcast_side = False
            self.records_in += len(records)
            if ctx._out:
                self._emit(ctx._drain())
            return
        set_key, process, ctx, sel = (
            self.keyed.set_current_key,
            self.function.process_element,
            self.ctx,
            self._key_selector,
        )
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
            for r in out:
                self.env.output.send(self.partition(r), r)

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
                "alignment",
                checkpoint_id=cid,
                operator=self.operator,
                subtask=self.subtask,
                blocked_ms=blocked,
                outcome=outcome,
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
        if self.sink is not None:
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
