"""State file format version 2: incremental checkpoints of the on-disk backend. The version-1
container (index in the header) holds two file types, told apart by the header's ``type``:

- a *manifest* (the subtask's state file in ``chk-<n>``): its header names, per key group, a chain of
  shared files in ``<job>/shared/`` (a base, then deltas) with their size and crc32, and it holds
  operator state inline;
- a *key-group file* (in ``shared/``, named ``<operator>-kg<n>-<base|delta>-<sha256 prefix>.kgs``)
  with one section of rows ``[state, namespace, key, value]``; in a delta, ``[state, namespace, key]``
  deletes the entry.

Unchanged key groups keep pointing at the files of the previous checkpoint, so a checkpoint writes
only what changed. A shared file is bound to its place by its name: operator, key group, base or
delta, and the hash of its content are all checked on read, and its path must stay inside the job's
directory (``shared/`` or ``taskowned/``), checked before it is opened.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_impl.checkpoint.container import (
    CorruptStateFileError,
    check_sections,
    crc,
    read_header,
    verify_file,
)
from reference_impl.checkpoint.format_v1 import container
from reference_impl.checkpoint.values import encode_operator, subtask_header
from reference_impl.keygroups import KeyGroupRange
from reference_impl.serializers import MSGPACK
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = [
    "VERSION",
    "MANIFEST",
    "KG_FILE",
    "SharedFileRef",
    "encode_key_group_file",
    "encode_incremental_manifest",
    "msgpack_array_header",
    "shared_refs",
    "confined_path",
    "verify_shared_file",
    "apply_key_group_file",
]

VERSION = 2
MANIFEST, KG_FILE = "incremental-manifest", "key-group"
_OWNED_DIRS = ("shared", "taskowned")
_SHARED_NAME = re.compile(r"^(?P<op>.+)-kg(?P<kg>\d+)-(?P<kind>base|delta)-(?P<digest>[0-9a-f]{32})\.kgs$")


@dataclass(frozen=True)
class SharedFileRef:
    """A shared key-group file named by a manifest: path relative to the checkpoint directory."""

    path: str
    size: int
    crc32: int


def msgpack_array_header(n: int) -> bytes:
    """The msgpack header of an ``n``-element array: rows are spliced from stored bytes after it."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def shared_file_name(operator_id: str, kg: int, data: bytes, delta: bool) -> str:
    """The name a shared file's content gives it (so identical content is written once)."""
    return f"{operator_id}-kg{kg}-{'delta' if delta else 'base'}-{hashlib.sha256(data).hexdigest()[:32]}.kgs"


def encode_key_group_file(max_parallelism: int, key_group: int, rows: bytes, delta: bool) -> bytes:
    """A shared key-group file: ``rows`` is a msgpack array of ``[state, ns, key, value]`` rows (in a
    delta also ``[state, ns, key]`` deletions), values encoded as ``encode_state_value``."""
    header = {"type": KG_FILE, "max_parallelism": max_parallelism, "key_group": key_group, "delta": delta}
    return container(VERSION, header, [(key_group, rows)])


def encode_incremental_manifest(
    s: SubtaskStateSnapshot, shared: dict[int, list[SharedFileRef]], binding: dict[str, Any] | None = None
) -> bytes:
    """A subtask's manifest: ``s`` gives the ids, keyed metadata (its ``key_groups`` are ignored) and
    operator state; ``shared`` the chain of shared files per key group, base first; ``binding`` (job
    and checkpoint id) ties it to its checkpoint."""
    sections: list[tuple[Any, bytes]] = []
    if s.operator is not None:
        sections.append(("operator", encode_operator(s.operator)))
    header = {
        "type": MANIFEST,
        **subtask_header(s, binding),
        "shared": [[kg, [[r.path, r.size, r.crc32] for r in chain]] for kg, chain in sorted(shared.items())],
    }
    return container(VERSION, header, sections)


def shared_refs(
    plain: dict[str, Any], name: str, key_groups: KeyGroupRange | None
) -> list[tuple[int, list[SharedFileRef]]]:
    """A manifest's ``(key group, chain)`` list if sound: each key group of ``key_groups`` at most
    once, each chain a non-empty list of ``[path, size, crc32]``."""
    out: list[tuple[int, list[SharedFileRef]]] = []
    seen: set[int] = set()
    entries = plain.get("shared")
    if not isinstance(entries, list):
        raise CorruptStateFileError(f"{name}: manifest without a shared-file list")
    for entry in entries:
        try:
            kg, chain = entry
            refs = [SharedFileRef(*ref) for ref in chain]
            ok = (
                type(kg) is int
                and refs
                and all(
                    isinstance(r.path, str) and type(r.size) is int and type(r.crc32) is int for r in refs
                )
            )
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise CorruptStateFileError(f"{name}: malformed shared-file entry {entry!r:.80}")
        if kg in seen:
            raise CorruptStateFileError(f"{name}: key group {kg} appears twice in the shared-file list")
        if key_groups is None or kg not in key_groups:
            raise CorruptStateFileError(
                f"{name}: key group {kg} is outside the file's key-group range {key_groups}"
            )
        seen.add(kg)
        out.append((kg, refs))
    return out


def confined_path(base: Path, rel: str, root: Path, referrer: str) -> Path:
    """``base / rel`` if it stays inside ``root``'s ``shared/`` or ``taskowned/``, lexically and after
    following symlinks; refused (naming ``referrer``) before anything is opened."""
    if not rel or posixpath.isabs(rel) or os.path.isabs(rel) or "\\" in rel or "\x00" in rel:
        raise CorruptStateFileError(f"{referrer}: shared file path {rel!r} is not a relative path")
    target = Path(posixpath.normpath(posixpath.join(str(base), rel)))
    root_abs = Path(posixpath.normpath(str(root)))
    inside = target.parent.parent == root_abs and target.parent.name in _OWNED_DIRS
    if not inside:
        raise CorruptStateFileError(
            f"{referrer}: shared file path {rel!r} leaves the checkpoint's shared/ and taskowned/ folders"
        )
    real, real_root = os.path.realpath(target), os.path.realpath(root_abs)
    if os.path.dirname(os.path.dirname(real)) != real_root:
        raise CorruptStateFileError(
            f"{referrer}: shared file {rel!r} is a symlink leading out of the checkpoint"
        )
    return target


def verify_shared_file(path: Path, ref: SharedFileRef, referrer: str) -> bytes:
    """Read a shared file and check it against the manifest's size and crc32 and its own checksums;
    the size is checked before reading, so no more than the manifest's size is ever read. Errors name
    the shared file and the manifest that references it."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size != ref.size:
                raise CorruptStateFileError(
                    f"{path}: size {size} bytes, {referrer} says {ref.size} (truncated or damaged)"
                )
            data = fh.read(ref.size + 1)
    except FileNotFoundError:
        raise CorruptStateFileError(f"{path}: missing (shared file referenced by {referrer})") from None
    except OSError as e:
        raise CorruptStateFileError(
            f"{path}: unreadable ({e.strerror or e}) (referenced by {referrer})"
        ) from None
    if len(data) != ref.size or crc(data) != ref.crc32:
        raise CorruptStateFileError(f"{path}: checksum mismatch (the shared file is damaged)")
    verify_file(data, str(path))
    return data


def apply_key_group_file(
    path: Path,
    ref: SharedFileRef,
    referrer: str,
    kg: int,
    first: bool,
    operator_id: str,
    max_parallelism: int,
    decoders: dict[str, Any],
    per_state: dict,
) -> int:
    """Verify one file of key group ``kg``'s chain (the base when ``first``, else a delta) and apply
    its rows to ``per_state``. Returns the bytes read."""
    data = verify_shared_file(path, ref, referrer)
    h = read_header(io.BytesIO(data), str(path), (VERSION,))
    p = h.plain
    m = _SHARED_NAME.match(path.name)
    if (
        p.get("type") != KG_FILE
        or p.get("key_group") != kg
        or p.get("max_parallelism") != max_parallelism
        or p.get("delta") is not (not first)
        or m is None
        or m["op"] != operator_id
        or int(m["kg"]) != kg
        or (m["kind"] == "delta") is first
    ):
        raise CorruptStateFileError(
            f"{path}: not the {'base' if first else 'delta'} file of key group {kg} of operator "
            f"{operator_id!r} ({referrer})"
        )
    if hashlib.sha256(data).hexdigest()[:32] != m["digest"]:
        raise CorruptStateFileError(
            f"{path}: content does not match the hash in its name (the file was altered)"
        )
    sections = check_sections(
        p.get("index"), str(path), h.size - 8 - h.body_start, KeyGroupRange(kg, kg), False
    )
    if len(sections) != 1:
        raise CorruptStateFileError(f"{path}: {len(sections)} sections, a key-group file has one")
    _, offset, length, section_crc = sections[0]
    section = data[h.body_start + offset : h.body_start + offset + length]
    if len(section) != length or crc(section) != section_crc:
        raise CorruptStateFileError(f"{path}: checksum mismatch in section {kg}")
    try:
        _apply_rows(MSGPACK.loads(section), first, decoders, per_state)
    except Exception as e:
        raise CorruptStateFileError(
            f"{path}: undecodable key group {kg} (named by {referrer}): {type(e).__name__}: {e}"
        ) from None
    return len(data)


def _apply_rows(rows: Any, base: bool, decoders: dict[str, Any], per_state: dict) -> None:
    """A key-group file's rows onto ``per_state``: puts, and (in a delta) deletions. An entry named
    twice in one file, a state the manifest does not declare, or a deletion in a base is damage."""
    if not isinstance(rows, list):
        raise ValueError(f"section is a {type(rows).__name__}, not a list of rows")
    seen: set[tuple[Any, Any, Any]] = set()
    for row in rows:
        if not isinstance(row, list) or len(row) not in (3, 4) or (base and len(row) == 3):
            raise ValueError(f"malformed row {row!r:.80}")
        st_name, ns, key = row[0], row[1], row[2]
        dec = decoders[st_name]
        if (st_name, ns, key) in seen:
            raise ValueError(f"state {st_name!r} namespace {ns!r:.40}: key {key!r:.40} appears twice")
        seen.add((st_name, ns, key))
        if len(row) == 4:
            per_state.setdefault(st_name, {}).setdefault(ns, {})[key] = row[3] if dec is None else dec(row[3])
        else:
            per_state.get(st_name, {}).get(ns, {}).pop(key, None)
