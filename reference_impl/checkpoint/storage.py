"""Checkpoint storage on a file system, laid out like Flink's:
``<root>/<job-id>/chk-<n>/`` with one state file per subtask, ``shared/`` and ``taskowned/`` beside
them, and ``_metadata`` written last and atomically (write, fsync, rename). A checkpoint directory
without ``_metadata`` does not exist. ``_metadata`` names every file with its size and checksum, so
damage is detected before anything is restored, and restore falls back to the newest intact retained
checkpoint, saying why.

Nothing in a checkpoint is trusted before it is checked (see ``docs/checkpoint-integrity.md``):
``_metadata`` must belong to its directory (``chk-<n>`` and, on restore, the job), list each subtask
once, and name only plain files inside its directory; each state file must match the size and crc32
``_metadata`` gives it, and its header the job, checkpoint, operator, subtask and key-group range.
:func:`validate_checkpoint` decodes everything a restore will read (streaming, in constant memory
per section) before a checkpoint is chosen; any failure skips it with a reason naming the file.

Incremental checkpoints (on-disk backend) put per-key-group files, named by content hash, into
``<job>/shared/``; a subtask's manifest in ``chk-<n>`` names the ones it uses, and files of an older
checkpoint are reused. Validation checks every shared file a manifest names; retention deletes a
shared file only when no remaining checkpoint directory (completed or pending) names it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_impl.checkpoint.format import (
    CorruptStateFileError,
    Identity,
    KeyGroupSink,
    decode_subtask_state,
    referenced_shared_files,
    verify_stream,
    write_subtask_state,
)
from reference_impl.checkpoint.format_v2 import confined_path
from reference_impl.checkpoint.syncing import SyncingWriter, write_all
from reference_impl.keygroups import KeyGroupRange
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

METADATA = "_metadata"
SHARED = "shared"
METADATA_VERSION = 2  # 2: every state file carries its job and checkpoint id (1 is still read)
_READABLE_METADATA = (1, METADATA_VERSION)
METADATA_MAX_BYTES = 64 << 20  # a _metadata larger than this is refused before it is read
_CHK = re.compile(r"^chk-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or damaged; the message names the file."""


@dataclass(frozen=True)
class StateFileHandle:
    """One subtask's state file, relative to the checkpoint directory."""

    operator_id: str
    subtask_index: int
    path: str
    size: int
    crc32: int


@dataclass
class CompletedCheckpoint:
    job_id: str
    checkpoint_id: int
    directory: Path
    timestamp_ms: int
    kind: str
    operators: dict[str, dict[str, Any]]  # operator -> {parallelism, max_parallelism}
    files: list[StateFileHandle]
    extra: dict[str, Any] = field(default_factory=dict)
    metadata_version: int = METADATA_VERSION

    def files_of(self, operator_id: str) -> list[StateFileHandle]:
        return sorted((f for f in self.files if f.operator_id == operator_id), key=lambda f: f.subtask_index)

    def identity(self, handle: StateFileHandle) -> Identity:
        """What the state file ``handle`` must be, by this ``_metadata``."""
        info = self.operators.get(handle.operator_id) or {}
        par, max_p = info.get("parallelism"), info.get("max_parallelism")
        return Identity(
            self.job_id,
            self.checkpoint_id,
            handle.operator_id,
            handle.subtask_index,
            par if isinstance(par, int) else None,
            max_p if isinstance(max_p, int) else None,
            bound=self.metadata_version >= 2,
        )

    def state_file(self, handle: StateFileHandle) -> Path:
        """The path of a state file ``_metadata`` names, refused unless it is a plain file name inside
        the checkpoint directory (symlinks leading out included), before anything is opened."""
        name, meta = handle.path, self.directory / METADATA
        if (
            not name
            or name in (".", "..")
            or name != os.path.basename(name)
            or "\\" in name
            or "\x00" in name
        ):
            raise CheckpointError(
                f"{meta}: state file path {name!r} is not a file name inside the checkpoint"
            )
        p = self.directory / name
        if os.path.dirname(os.path.realpath(p)) != os.path.realpath(self.directory):
            raise CheckpointError(f"{p}: a symlink leading out of the checkpoint (named by {meta})")
        return p


@dataclass
class RestoreReport:
    """Which checkpoint a restore used and which newer ones it skipped, with the reason for each."""

    checkpoint: CompletedCheckpoint | None
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def describe(self) -> str:
        used = (
            f"checkpoint {self.checkpoint.checkpoint_id}"
            if self.checkpoint
            else "no checkpoint (fresh start)"
        )
        skipped = "; ".join(f"skipped {p.name}: {why}" for p, why in self.skipped)
        return f"restoring from {used}" + (f" ({skipped})" if skipped else "")


def _fsync_write(path: Path, data: bytes) -> None:
    """Write and fsync."""
    with open(path, "wb", buffering=0) as fh:
        write_all(fh.fileno(), data)
        os.fsync(fh.fileno())


def _check_structure(chk: CompletedCheckpoint, meta: Path) -> None:
    """``_metadata``'s own consistency: each subtask and path once, and where an operator's
    parallelism is given, exactly its subtasks 0..p-1."""
    seen: set[tuple[str, int]] = set()
    paths: set[str] = set()
    for f in chk.files:
        if not (isinstance(f.operator_id, str) and isinstance(f.path, str)) or not all(
            type(x) is int for x in (f.subtask_index, f.size, f.crc32)
        ):
            raise CheckpointError(f"{meta}: malformed file entry {f!r:.120}")
        if (f.operator_id, f.subtask_index) in seen:
            raise CheckpointError(f"{meta}: subtask {f.subtask_index} of {f.operator_id!r} is listed twice")
        if f.path in paths:
            raise CheckpointError(f"{meta}: {f.path} is listed twice")
        seen.add((f.operator_id, f.subtask_index))
        paths.add(f.path)
    if not isinstance(chk.operators, dict):
        raise CheckpointError(f"{meta}: malformed operators entry")
    for op, info in chk.operators.items():
        if not isinstance(info, dict):
            raise CheckpointError(f"{meta}: malformed entry of operator {op!r}")
        par = info.get("parallelism")
        if par is None or not any(f.operator_id == op for f in chk.files):
            continue  # an operator without state files (tests, or one that holds no state)
        subtasks = sorted(i for o, i in seen if o == op)
        if type(par) is not int or subtasks != list(range(par)):
            raise CheckpointError(
                f"{meta}: operator {op!r} has parallelism {par!r} but state files for subtasks {subtasks}"
            )


def load_metadata(directory: Path, job_id: str | None = None) -> CompletedCheckpoint:
    """Parse ``<directory>/_metadata``; a missing, unreadable or inconsistent one is a
    :class:`CheckpointError`. Its checkpoint id must match a ``chk-<n>`` directory's name and, if
    ``job_id`` is given, its job id that one (a ``_metadata`` copied from another checkpoint is
    refused)."""
    directory = Path(directory)
    meta = directory / METADATA
    if not meta.is_file():
        raise CheckpointError(f"{directory}: no {METADATA}: not a completed checkpoint")
    try:
        with open(meta, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > METADATA_MAX_BYTES:
                raise CheckpointError(f"{meta}: {size} bytes, more than any _metadata ({METADATA_MAX_BYTES})")
            d = json.loads(fh.read(size))
        if not isinstance(d, dict) or d.get("version") not in _READABLE_METADATA:
            version = d.get("version") if isinstance(d, dict) else None
            raise CheckpointError(
                f"{meta}: metadata version {version!r}, expected one of {list(_READABLE_METADATA)}"
            )
        body = json.dumps(d["content"], sort_keys=True).encode()
        if zlib.crc32(body) & 0xFFFFFFFF != d["crc32"]:
            raise CheckpointError(f"{meta}: metadata checksum mismatch (the file is damaged)")
        c = d["content"]
        files = [StateFileHandle(**f) for f in c["files"]]
        chk = CompletedCheckpoint(
            c["job_id"],
            c["checkpoint_id"],
            directory,
            c["timestamp_ms"],
            c["kind"],
            c["operators"],
            files,
            c.get("extra", {}),
            d["version"],
        )
    except CheckpointError:
        raise
    except OSError as e:
        raise CheckpointError(f"{meta}: unreadable ({e.strerror or e})") from None
    except Exception as e:  # JSON errors, missing fields, wrong types: all mean damage
        raise CheckpointError(f"{meta}: unreadable metadata ({type(e).__name__}: {e})") from None
    if type(chk.checkpoint_id) is not int or not isinstance(chk.job_id, str):
        raise CheckpointError(f"{meta}: malformed job or checkpoint id")
    m = _CHK.match(directory.name)
    if m and int(m.group(1)) != chk.checkpoint_id:
        raise CheckpointError(
            f"{meta}: belongs to checkpoint {chk.checkpoint_id}, found in {directory.name} (copied from another)"
        )
    if job_id is not None and chk.job_id != job_id:
        raise CheckpointError(f"{meta}: belongs to job {chk.job_id!r}, found in job {job_id!r}'s checkpoints")
    _check_structure(chk, meta)
    return chk


def _discard_key_groups(_: Any) -> Any:
    return lambda kg, per_state: None


def validate_checkpoint(directory: Path, job_id: str | None = None) -> CompletedCheckpoint:
    """Everything a restore would read, checked and decoded: ``_metadata`` (see :func:`load_metadata`),
    each state file's confinement, size, crc32, trailer and identity, and every section and shared
    file decoded, one at a time and dropped (memory: one section, not the checkpoint). Any failure is
    a :class:`CheckpointError` naming the file."""
    chk = load_metadata(directory, job_id)
    for f in chk.files:
        p = chk.state_file(f)
        try:
            with open(p, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size != f.size:
                    raise CheckpointError(
                        f"{p}: size {size} bytes, _metadata says {f.size} (truncated or damaged)"
                    )
                verify_stream(fh, str(p), size, f.crc32)
                decode_subtask_state(
                    fh, str(p), load_into=_discard_key_groups, expect=chk.identity(f), check_keys=True
                )
        except FileNotFoundError:
            raise CheckpointError(f"{p}: missing (named by {chk.directory / METADATA})") from None
        except IsADirectoryError:
            raise CheckpointError(f"{p}: a directory, not a state file") from None
        except OSError as e:
            raise CheckpointError(f"{p}: unreadable ({e.strerror or e})") from None
        except CorruptStateFileError as e:
            raise CheckpointError(str(e)) from None
    return chk


def read_subtask_state(
    chk: CompletedCheckpoint,
    handle: StateFileHandle,
    key_group_range: KeyGroupRange | None = None,
    load_into: KeyGroupSink | None = None,
) -> tuple[SubtaskStateSnapshot, int]:
    """Read one state file (only the key groups in ``key_group_range``); returns (snapshot, bytes read).
    ``load_into`` streams the key groups into a backend as they are decoded (see
    :func:`~reference_impl.checkpoint.format.decode_subtask_state`)."""
    p = chk.state_file(handle)
    try:
        with open(p, "rb") as fh:
            return decode_subtask_state(
                fh, str(p), key_group_range, load_into=load_into, expect=chk.identity(handle)
            )
    except FileNotFoundError:
        raise CheckpointError(f"{p}: missing (named by {chk.directory / METADATA})") from None
    except OSError as e:
        raise CheckpointError(f"{p}: unreadable ({e.strerror or e})") from None
    except CorruptStateFileError as e:
        raise CheckpointError(str(e)) from None


class FileSystemCheckpointStorage:
    """Checkpoints of many jobs under one root directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

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
        for sub in (d, self.job_dir(job_id) / "shared", self.job_dir(job_id) / "taskowned"):
            sub.mkdir(parents=True, exist_ok=True)
        name = f"{state.operator_id}-{state.subtask_index}.state"
        with open(d / name, "wb", buffering=0) as fh, SyncingWriter(fh.fileno()) as out:
            binding = {"job_id": job_id, "checkpoint_id": checkpoint_id}
            size, crc = write_subtask_state(state, out, binding)  # streamed; the device flushes as it goes
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
        _fsync_write(tmp, data)
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
        _fsync_write(d / name, data)
        return StateFileHandle(operator_id, subtask_index, name, len(data), zlib.crc32(data) & 0xFFFFFFFF)

    def _shared_refs(self, directory: Path) -> set[Path] | None:
        """Shared files named by the state files in a checkpoint directory; None if one is unreadable
        (then nothing may be deleted on its account)."""
        out: set[Path] = set()
        for f in directory.glob("*.state"):
            try:
                refs = referenced_shared_files(f.read_bytes(), str(f))
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
        doc = json.dumps(
            {"version": METADATA_VERSION, "crc32": zlib.crc32(body) & 0xFFFFFFFF, "content": content},
            sort_keys=True,
            indent=1,
        ).encode()
        tmp = d / f".{METADATA}.tmp"
        _fsync_write(tmp, doc)
        os.replace(tmp, d / METADATA)
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
        for left in d.parent.glob(".discarded-chk-*"):  # of a process killed mid-delete
            shutil.rmtree(left, ignore_errors=True)

    def checkpoint_dirs(self, job_id: str) -> list[tuple[int, Path]]:
        """All ``chk-<n>`` directories of a job, newest first (completed or not)."""
        jd = self.job_dir(job_id)
        if not jd.is_dir():
            return []
        out = [(int(m.group(1)), p) for p in jd.iterdir() if p.is_dir() and (m := _CHK.match(p.name))]
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
        for _, d in self.checkpoint_dirs(job_id):
            completed += (d / METADATA).exists()
            try:
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
