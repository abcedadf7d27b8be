"""A completed checkpoint: its ``_metadata`` and everything reading it checks.

Nothing in a checkpoint is trusted before it is checked (see ``docs/checkpoint-integrity.md``):
``_metadata`` must belong to its directory (``chk-<n>`` and, on restore, the job), list each subtask
once, and name only plain files inside its directory; each state file must match the size and crc32
``_metadata`` gives it, and its header the job, checkpoint, operator, subtask and key-group range.
:func:`validate_checkpoint` decodes everything a restore will read (streaming, in constant memory
per section) before a checkpoint is chosen.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_impl.checkpoint.format import (
    CorruptStateFileError,
    Identity,
    KeyGroupSink,
    decode_subtask_state,
    verify_stream,
)
from reference_impl.errors import InputError
from reference_impl.keygroups import KeyGroupRange
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = [
    "METADATA",
    "METADATA_VERSION",
    "CheckpointError",
    "StateFileHandle",
    "CompletedCheckpoint",
    "RestoreReport",
    "load_metadata",
    "validate_checkpoint",
    "read_subtask_state",
]

METADATA = "_metadata"
METADATA_VERSION = 2  # 2: every state file carries its job and checkpoint id (1 is still read)
_READABLE_METADATA = (1, METADATA_VERSION)
METADATA_MAX_BYTES = 64 << 20  # a _metadata larger than this is refused before it is read
CHECKPOINT_DIR = re.compile(r"^chk-(\d+)$")


class CheckpointError(InputError, ValueError):
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
        # a file that is not a symlink lies in the directory: its real path is the directory's
        # (one lstat instead of resolving every component of the path twice)
        if os.path.islink(p) and os.path.dirname(os.path.realpath(p)) != os.path.realpath(self.directory):
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
    if os.path.dirname(os.path.realpath(meta)) != os.path.realpath(directory):
        raise CheckpointError(f"{meta}: a symlink leading out of the checkpoint")
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
    if not (isinstance(chk.extra, dict) and isinstance(chk.kind, str) and type(chk.timestamp_ms) is int):
        raise CheckpointError(f"{meta}: malformed kind, timestamp or extra")
    m = CHECKPOINT_DIR.match(directory.name)
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


def _check_like_siblings(
    op: str,
    snap: SubtaskStateSnapshot,
    keyed: dict[str, set[bool]],
    metas: dict[str, dict[str, Any]],
    p: Path,
) -> None:
    """Subtasks of one operator agree on whether they hold keyed state and on each state they share
    (kind, serializers, TTL): a re-sealed header that strips or re-declares one subtask's state is
    refused."""
    keyed.setdefault(op, set()).add(snap.keyed is not None)
    if len(keyed[op]) > 1:
        raise CheckpointError(
            f"{p}: {'has' if snap.keyed is not None else 'lacks'} keyed state, unlike the other "
            f"subtasks of operator {op!r}"
        )
    known = metas.setdefault(op, {})
    for name, meta in (snap.keyed.states if snap.keyed is not None else {}).items():
        if known.setdefault(name, meta) != meta:
            raise CheckpointError(
                f"{p}: state {name!r} is declared {meta}, the other subtasks of {op!r} declare {known[name]}"
            )


def validate_checkpoint(directory: Path, job_id: str | None = None) -> CompletedCheckpoint:
    """Everything a restore would read, checked and decoded: ``_metadata`` (see :func:`load_metadata`),
    each state file's confinement, size, crc32, trailer and identity, and every section and shared
    file decoded, one at a time and dropped (memory: one section, not the checkpoint). Any failure is
    a :class:`CheckpointError` naming the file."""
    chk = load_metadata(directory, job_id)
    keyed_by_operator: dict[str, set[bool]] = {}
    metas_by_operator: dict[str, dict[str, Any]] = {}
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
                snap, _ = decode_subtask_state(
                    fh, str(p), load_into=_discard_key_groups, expect=chk.identity(f), check_keys=True
                )
            _check_like_siblings(f.operator_id, snap, keyed_by_operator, metas_by_operator, p)
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
    states: Callable[[str], bool] | None = None,
) -> tuple[SubtaskStateSnapshot, int]:
    """Read one state file (only the key groups in ``key_group_range``, only the keyed ``states``
    accepted); returns (snapshot, bytes read). ``load_into`` streams the key groups into a backend as
    they are decoded (see :func:`~reference_impl.checkpoint.format.decode_subtask_state`)."""
    p = chk.state_file(handle)
    try:
        with open(p, "rb") as fh:
            return decode_subtask_state(
                fh, str(p), key_group_range, load_into=load_into, expect=chk.identity(handle), states=states
            )
    except FileNotFoundError:
        raise CheckpointError(f"{p}: missing (named by {chk.directory / METADATA})") from None
    except OSError as e:
        raise CheckpointError(f"{p}: unreadable ({e.strerror or e})") from None
    except CorruptStateFileError as e:
        raise CheckpointError(str(e)) from None
