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

from harness.job import task_name
from harness.partitioner import Partitioner
from harness.source_task import SPLIT_TIMESTAMPS_STATE, SPLITS_STATE, SourceTask
from harness.stream_task import WATERMARK_STATE, StreamTask, merge_record_runs
from harness.task_env import CheckpointWriter, CoordinatorGateway, OutputWriter, TaskEnv

__all__ = [
    "task_name",
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
