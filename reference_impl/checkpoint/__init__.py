"""Checkpoint storage: the state file format, the Flink-like directory layout and ``_metadata``."""

from reference_impl.checkpoint.format import FORMAT_VERSION, CorruptStateFileError, Identity
from reference_impl.checkpoint.storage import (
    CheckpointError,
    CompletedCheckpoint,
    FileSystemCheckpointStorage,
    NoIntactCheckpointError,
    RestoreReport,
    StateFileHandle,
    load_metadata,
    read_subtask_state,
    validate_checkpoint,
)

__all__ = [
    "FORMAT_VERSION",
    "CorruptStateFileError",
    "Identity",
    "CheckpointError",
    "CompletedCheckpoint",
    "FileSystemCheckpointStorage",
    "NoIntactCheckpointError",
    "RestoreReport",
    "StateFileHandle",
    "load_metadata",
    "read_subtask_state",
    "validate_checkpoint",
]
