"""One subtask of a source (:class:`SourceTask`): polls the source function, routes records by key
group (or broadcasts them), keeps its splits' positions and event-time high marks as operator state,
and sends barriers, watermarks and end of input downstream."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from harness.job import RuntimeContext, apply_chain
from harness.tasks.items import CheckpointBarrier, EndOfInput, Watermark
from harness.tasks.partitioner import Partitioner
from harness.tasks.task_base import TaskBase
from harness.tasks.task_env import TaskEnv
from reference_impl.rescale import RestoredSubtask
from reference_impl.timers import MAX_WATERMARK, MIN_WATERMARK

__all__ = ["SourceTask", "SPLITS_STATE", "SPLIT_TIMESTAMPS_STATE"]

SPLITS_STATE = "__source_splits"
SPLIT_TIMESTAMPS_STATE = "__split_max_timestamps"  # union: [split, largest event time] per split



def poll_tracking_split_max(
    fn: Any, ts_of: Callable[[Any], Any], split_max: dict[str, int], max_records: int
) -> list[Any]:
    """Poll up to ``max_records`` from the splits of source function ``fn``, raising ``split_max`` (per
    split, the largest event time read so far) as records come; shared with the fault-free reference,
    which must generate watermarks exactly as a source subtask does."""
    out: list[Any] = []
    for split, records in fn.poll_splits(max_records):
        if records:
            top = max(int(ts_of(r)) for r in records)
            if top > split_max.get(split, MIN_WATERMARK):
                split_max[split] = top
            out.extend(records)
    return out


def splits_watermark(fn: Any, watermark_for: Callable[[int], int], split_max: dict[str, int]) -> int | None:
    """The minimum over ``fn``'s unfinished splits of each one's watermark (a split not read yet holds
    it at the minimum; finished splits no longer count); None when every split finished."""
    wms = [
        MIN_WATERMARK if split not in split_max else watermark_for(split_max[split])
        for split in fn.offsets()
        if not fn.split_finished(split)
    ]
    return min(wms) if wms else None

class SourceTask(TaskBase):
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
        return poll_tracking_split_max(self.function, self.watermarks.timestamp, self.split_max, max_records)

    def _emit_watermark(self) -> None:
        """The minimum over this subtask's unfinished splits (a split not read yet holds it at the
        minimum; finished splits no longer count), emitted when it rose."""
        assert self.watermarks is not None
        wm = splits_watermark(self.function, self.watermarks.watermark_for, self.split_max)
        if wm is not None and wm > self.watermark:
            self.watermark = wm
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
        if self.broadcast_to is not None:
            if records:
                for target in range(self.fan_out):
                    out.send_records(target, records)
        else:
            self.partition.send_all(out, records)
        self.records_out += len(records)
        if self.watermarks is not None:
            self._emit_watermark()
        return polled

    def exhausted(self) -> bool:
        return self.function.exhausted()

    def announce_exhausted(self) -> None:
        """This subtask has read everything: the maximum watermark goes downstream at once (as Flink
        sends ``MAX_WATERMARK`` when a source finishes), whether or not its end of input is held back
        for a planned fault (``harness.driver.input_gate``): a hold must not freeze the watermarks of the
        stages it feeds (nor a broadcast input's, which has no watermarks of its own), or their
        event-time timers would fire only after the last fault."""
        if self.function.exhausted() and self.watermark < MAX_WATERMARK and not self.finished:
            self.watermark = MAX_WATERMARK
            assert self.env.output is not None
            self.env.output.broadcast(Watermark(MAX_WATERMARK))

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
