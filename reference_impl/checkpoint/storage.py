"""Checkpoint storage on a file system, laid out like Flink's:
``<root>/<job-id>/chk-<n>/`` with one state file per subtask, ``shared/`` and ``taskowned/`` beside
them, and ``_metadata`` written last and atomically (write, fsync, rename). A checkpoint directory
without ``_metadata`` does not exist. ``_metadata`` names every file with its size and checksum;
restore validates a checkpoint completely (:mod:`reference_impl.checkpoint.completed`) before
choosing it, and falls back to the newest intact retained checkpoint, saying why.

Incremental checkpoints (on-disk backend) put per-key-group files, named by content hash, into
``<job>/shared/``; a subtask's manifest in ``chk-<n>`` names the ones it uses, and files of an older
checkpoint are reused. Validation checks every shared file a manifest names; retention deletes a
shared file only when no remaining checkpoint directory (completed or pending) names it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zlib
from pathlib import Path
from typing import Any

from reference_impl.checkpoint.completed import (
    CHECKPOINT_DIR,
    METADATA,
    METADATA_VERSION,
    CheckpointError,
    CompletedCheckpoint,
    RestoreReport,
    StateFileHandle,
    load_metadata,
    read_subtask_state,
    validate_checkpoint,
)
from reference_impl.checkpoint.format import (
    CorruptStateFileError,
    referenced_shared_files,
    write_subtask_state,
)
from reference_impl.checkpoint.format_v2 import confined_path
from reference_impl.checkpoint.syncing import SyncingWriter, write_all
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = [
    "CheckpointError",
    "NoIntactCheckpointError",
    "StateFileHandle",
    "CompletedCheckpoint",
    "RestoreReport",
    "FileSystemCheckpointStorage",
    "load_metadata",
    "validate_checkpoint",
    "read_subtask_state",
]

SHARED = "shared"


def _fsync_write(path: Path, data: bytes, sync: bool = True) -> None:
    """Write and (if ``sync``) fsync."""
    with open(path, "wb", buffering=0) as fh:
        write_all(fh.fileno(), data)
        if sync:
            os.fsync(fh.fileno())


class FileSystemCheckpointStorage:
    """Checkpoints of many jobs under one root directory. ``sync=False`` skips every ``fsync``: for
    a simulator whose crashes are of tasks, never of the machine, so the page cache is as durable
    as the disk (the files, their order and their atomic renames are the same)."""

    def __init__(self, root: str | Path, sync: bool = True) -> None:
        self.root = Path(root)
        self.sync = sync
        self._job_dirs: set[str] = set()  # jobs whose shared/ and taskowned/ this instance made
        self._swept: set[str] = set()  # jobs whose leftovers of a killed delete this instance removed

    def job_dir(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"invalid job id {job_id!r}")
        return self.root / job_id

    def checkpoint_dir(self, job_id: str, checkpoint_id: int) -> Path:
        return self.job_dir(job_id) / f"chk-{checkpoint_id}"

    def write_subtask_state(
        self, job_id: str, checkpoint_id: int, state: SubtaskStateSnapshot
    ) -> StateFileHandle:
        """Write one subtask's state file into ``chk-<n>/`` (before the checkpoint completes)."""
        d = self.checkpoint_dir(job_id, checkpoint_id)
        if job_id not in self._job_dirs:
            for sub in (self.job_dir(job_id) / "shared", self.job_dir(job_id) / "taskowned"):
                sub.mkdir(parents=True, exist_ok=True)
            self._job_dirs.add(job_id)
        name = f"{state.operator_id}-{state.subtask_index}.state"
        binding = {"job_id": job_id, "checkpoint_id": checkpoint_id}
        try:  # the checkpoint's directory exists from its first file on: no mkdir per file
            fh = open(d / name, "wb", buffering=0)
        except FileNotFoundError:
            d.mkdir(parents=True, exist_ok=True)
            fh = open(d / name, "wb", buffering=0)
        with fh:
            if not self.sync:
                fd = fh.fileno()
                size, crc = write_subtask_state(state, lambda data: write_all(fd, data), binding)
            else:
                with SyncingWriter(fh.fileno()) as out:
                    size, crc = write_subtask_state(
                        state, out, binding
                    )  # streamed; the device flushes as it goes
        return StateFileHandle(state.operator_id, state.subtask_index, name, size, crc)

    def shared_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / SHARED

    def write_shared_file(self, job_id: str, name: str, data: bytes) -> int:
        """Write ``<job>/shared/<name>`` atomically unless an identical file is already there (names
        are content hashes). Returns the bytes written (0 when reused)."""
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"invalid shared file name {name!r}")
        d = self.shared_dir(job_id)
        d.mkdir(parents=True, exist_ok=True)
        target = d / name
        try:
            if target.stat().st_size == len(data) and target.read_bytes() == data:
                return 0
        except FileNotFoundError:
            pass
        tmp = d / f".{name}.tmp"
        _fsync_write(tmp, data, self.sync)
        os.replace(tmp, target)
        return len(data)

    def write_subtask_file(
        self, job_id: str, checkpoint_id: int, operator_id: str, subtask_index: int, data: bytes
    ) -> StateFileHandle:
        """Write an already encoded state file (e.g. an incremental manifest) into ``chk-<n>/``."""
        d = self.checkpoint_dir(job_id, checkpoint_id)
        for sub in (d, self.shared_dir(job_id), self.job_dir(job_id) / "taskowned"):
            sub.mkdir(parents=True, exist_ok=True)
        name = f"{operator_id}-{subtask_index}.state"
        _fsync_write(d / name, data, self.sync)
        return StateFileHandle(operator_id, subtask_index, name, len(data), zlib.crc32(data) & 0xFFFFFFFF)

    def _shared_refs(self, directory: Path) -> set[Path] | None:
        """Shared files named by the state files in a checkpoint directory; None if one is unreadable
        (then nothing may be deleted on its account)."""
        out: set[Path] = set()
        for f in directory.glob("*.state"):
            try:
                with open(f, "rb") as fh:  # the header says whether it is a manifest: read only that
                    refs = referenced_shared_files(fh, str(f))
                # never delete a file outside the job's shared/ and taskowned/ on a manifest's word
                out.update(confined_path(directory, r.path, directory.parent, str(f)).resolve() for r in refs)
            except (OSError, CorruptStateFileError):
                return None
        return out

    def finalize_checkpoint(
        self,
        job_id: str,
        checkpoint_id: int,
        handles: list[StateFileHandle],
        operators: dict[str, dict[str, Any]],
        extra: dict[str, Any] | None = None,
        kind: str = "checkpoint",
        timestamp_ms: int | None = None,
    ) -> CompletedCheckpoint:
        """Write ``_metadata`` last and atomically: from this moment the checkpoint exists."""
        d = self.checkpoint_dir(job_id, checkpoint_id)
        d.mkdir(parents=True, exist_ok=True)
        content = {
            "job_id": job_id,
            "checkpoint_id": checkpoint_id,
            "timestamp_ms": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            "kind": kind,
            "operators": operators,
            "files": [f.__dict__ for f in sorted(handles, key=lambda h: (h.operator_id, h.subtask_index))],
            "extra": extra or {},
        }
        body = json.dumps(content, sort_keys=True).encode()
        # json.dumps({"version", "crc32", "content"}, sort_keys=True) without encoding the content twice,
        # and without indent (the pure-Python encoder): a source's offsets per key (100k keys: 100k
        # entries) made that most of the driver's time per checkpoint
        crc = zlib.crc32(body) & 0xFFFFFFFF
        doc = b'{"content": %s, "crc32": %d, "version": %s}' % (
            body,
            crc,
            json.dumps(METADATA_VERSION).encode(),
        )
        tmp = d / f".{METADATA}.tmp"
        _fsync_write(tmp, doc, self.sync)
        os.replace(tmp, d / METADATA)
        if self.sync:
            dfd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return load_metadata(d)

    def discard(self, job_id: str, checkpoint_id: int) -> None:
        """Remove a (pending, aborted or subsumed) checkpoint directory and its files. The directory is
        first renamed out of the ``chk-<n>`` namespace (atomic), so a process killed mid-delete never
        leaves a half-deleted checkpoint that a restore would have to skip as damaged."""
        d = self.checkpoint_dir(job_id, checkpoint_id)
        gone = d.with_name(f".discarded-{d.name}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(d, gone)
        except FileNotFoundError:
            return
        shutil.rmtree(gone, ignore_errors=True)
        if job_id not in self._swept:  # of a process killed mid-delete: only an earlier one's
            self._swept.add(job_id)
            for left in d.parent.glob(".discarded-chk-*"):
                shutil.rmtree(left, ignore_errors=True)

    def checkpoint_dirs(self, job_id: str) -> list[tuple[int, Path]]:
        """All ``chk-<n>`` directories of a job, newest first (completed or not)."""
        jd = self.job_dir(job_id)
        if not jd.is_dir():
            return []
        out = [
            (int(m.group(1)), p) for p in jd.iterdir() if p.is_dir() and (m := CHECKPOINT_DIR.match(p.name))
        ]
        return sorted(out, reverse=True)

    def list_checkpoints(self, job_id: str) -> list[int]:
        """Ids of completed checkpoints (those with ``_metadata``), oldest first."""
        return sorted(n for n, p in self.checkpoint_dirs(job_id) if (p / METADATA).is_file())

    def retain(self, job_id: str, n: int) -> list[int]:
        """Keep the newest ``n`` completed checkpoints; delete older ones, and the shared files that only
        they used (never one a remaining checkpoint, completed or pending, names). Returns the deleted
        ids."""
        completed = self.list_checkpoints(job_id)
        doomed = completed[:-n] if n > 0 else completed
        released: set[Path] = set()
        for cid in doomed:
            released |= self._shared_refs(self.checkpoint_dir(job_id, cid)) or set()
            self.discard(job_id, cid)
        if released:
            still_used: set[Path] = set()
            for _, d in self.checkpoint_dirs(job_id):
                refs = self._shared_refs(d)
                if refs is None:
                    return doomed  # cannot tell what a remaining checkpoint uses: keep every file
                still_used |= refs
            for f in released - still_used:
                f.unlink(missing_ok=True)
        return doomed

    def restore_latest(self, job_id: str) -> RestoreReport:
        """The newest intact completed checkpoint, after validating everything a restore reads;
        damaged or incomplete newer ones are skipped, each with the reason naming the file. Raises
        :class:`CheckpointError` when checkpoints were completed but none is intact (starting empty
        would silently lose their state); with none completed, the report holds no checkpoint."""
        report = RestoreReport(None)
        completed = 0
        job_dir = os.path.realpath(self.job_dir(job_id))
        for _, d in self.checkpoint_dirs(job_id):
            completed += (d / METADATA).exists()
            try:
                if os.path.dirname(os.path.realpath(d)) != job_dir:
                    raise CheckpointError(f"{d}: a symlink leading out of the job's checkpoints")
                report.checkpoint = validate_checkpoint(d, job_id)
                return report
            except CheckpointError as e:
                report.skipped.append((d, str(e)))
            except Exception as e:  # anything else a damaged checkpoint causes is still its fault
                report.skipped.append((d, f"{d}: {type(e).__name__}: {e}"))
        if completed:
            raise NoIntactCheckpointError(
                f"none of the {completed} completed checkpoints of job {job_id!r} is intact: "
                + "; ".join(f"{p.name}: {why}" for p, why in report.skipped),
                report,
            )
        return report


class NoIntactCheckpointError(CheckpointError):
    """Every completed checkpoint of a job is damaged: there is nothing to restore from."""

    def __init__(self, message: str, report: RestoreReport) -> None:
        super().__init__(message)
        self.report = report
