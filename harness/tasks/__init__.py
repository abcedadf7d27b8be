"""Subtasks: the executor-agnostic task code that the sim and Spark executors both drive.

An executor owns threads, sockets, clocks and scheduling; a task is driven by plain method calls:
sources by ``poll`` and ``trigger_checkpoint``, keyed stages by ``on_item`` (records, barriers,
cancel markers, end of input) while the executor honours ``blocked_channels()`` (barrier
alignment), and both by ``notify_checkpoint_complete``/``_aborted``. Tasks reach the outside only
through their :class:`TaskEnv`: checkpoint storage, the coordinator gateway, the output writer, the
history and the failpoints.

One import for the task code, which lives in ``task_env`` (the environment), ``partitioner``,
``task_base``, ``source_task`` and ``stream_task``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from harness.tasks.partitioner import Partitioner
    from harness.tasks.source_task import SPLIT_TIMESTAMPS_STATE, SPLITS_STATE, SourceTask
    from harness.tasks.stream_task import WATERMARK_STATE, StreamTask, merge_record_runs
    from harness.tasks.task_env import CheckpointWriter, CoordinatorGateway, OutputWriter, TaskEnv

# each name loads its module on first use: importing one module of this package imports no other
_API = {
    "CheckpointWriter": "harness.tasks.task_env",
    "CoordinatorGateway": "harness.tasks.task_env",
    "OutputWriter": "harness.tasks.task_env",
    "TaskEnv": "harness.tasks.task_env",
    "Partitioner": "harness.tasks.partitioner",
    "SourceTask": "harness.tasks.source_task",
    "StreamTask": "harness.tasks.stream_task",
    "merge_record_runs": "harness.tasks.stream_task",
    "SPLITS_STATE": "harness.tasks.source_task",
    "SPLIT_TIMESTAMPS_STATE": "harness.tasks.source_task",
    "WATERMARK_STATE": "harness.tasks.stream_task",
}

__all__ = [
    "CheckpointWriter",
    "CoordinatorGateway",
    "OutputWriter",
    "TaskEnv",
    "Partitioner",
    "SourceTask",
    "StreamTask",
    "merge_record_runs",
    "SPLITS_STATE",
    "SPLIT_TIMESTAMPS_STATE",
    "WATERMARK_STATE",
]

if not TYPE_CHECKING:
    __getattr__ = lazy_getattr(__name__, _API, globals())


def __dir__() -> list[str]:
    return __all__
