"""The state file format: a registry of versions and the one reader that checks every file it reads.

Each version lives in its own module (as Flink's ``MetadataSerializers`` maps a version number to a
serializer): ``format_v1`` (full snapshots, index in the header, row per entry), ``format_v2``
(incremental manifests and shared key-group files) and ``format_v3`` (full snapshots streamed with
the index in a footer, written since). ``container`` holds what they share. Writing produces the
newest version (:data:`FORMAT_VERSION`); every registered version stays readable.

A read trusts nothing it has not checked: lengths against the file's real size, the header's and
every section's checksum, the structure of the section index (no key group twice or outside the
file's range, sections back to back inside the file), the shapes inside sections, and, given the
:class:`Identity` ``_metadata`` expects, that the file is the one of that job, checkpoint, operator
and subtask with that subtask's key-group range. Any failure is a :class:`CorruptStateFileError`
naming the file, never another exception.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from reference_impl.checkpoint import format_v1, format_v2, format_v3
from reference_impl.checkpoint.container import (
    OPERATOR,
    CorruptStateFileError,
    Header,
    check_sections,
    crc32_combine,
    prefetched,
    read_header,
    verify_file,
    verify_stream,
)
from reference_impl.checkpoint.format_v1 import encode_row_format
from reference_impl.checkpoint.format_v2 import (
    SharedFileRef,
    encode_incremental_manifest,
    encode_key_group_file,
    msgpack_array_header,
    shared_file_name,
    verify_shared_file,
)
from reference_impl.checkpoint.format_v3 import write_subtask_state
from reference_impl.checkpoint.values import decode_operator, decoder, encode_state_value, keyed_from_header
from reference_impl.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    assign_to_key_groups,
    compute_key_group_range_for_operator_index,
)
from reference_impl.serializers import MSGPACK
from reference_impl.snapshot import KeyedStateSnapshot, SubtaskStateSnapshot

__all__ = [
    "FORMAT_VERSION",
    "INCREMENTAL_FORMAT_VERSION",
    "VERSIONS",
    "FormatVersion",
    "Identity",
    "CorruptStateFileError",
    "KeyGroupSink",
    "SharedFileRef",
    "encode_subtask_state",
    "encode_row_format",
    "write_subtask_state",
    "decode_subtask_state",
    "encode_state_value",
    "encode_key_group_file",
    "encode_incremental_manifest",
    "msgpack_array_header",
    "crc32_combine",
    "shared_file_name",
    "referenced_shared_files",
    "verify_file",
    "verify_stream",
    "verify_shared_file",
]

KeyGroupSink = Callable[[KeyedStateSnapshot], Callable[[int, dict[str, Any]], None]]
"""Given a file's keyed header, the function its decoded key groups are handed to (streamed restores)."""


@dataclass(frozen=True)
class FormatVersion:
    """How one version finds its section index and decodes a key group's section."""

    version: int
    file_types: tuple[str | None, ...]  # the header's ``type`` values it allows (None: no type)
    section_index: Callable[[BinaryIO, str, Header], tuple[Any, int, int]]  # index, body length, bytes read
    load_key_group: Callable[[Any, dict, dict], None]


VERSIONS: dict[int, FormatVersion] = {
    format_v1.VERSION: FormatVersion(format_v1.VERSION, (None,), format_v1.header_index, format_v1.load_rows),
    format_v2.VERSION: FormatVersion(
        format_v2.VERSION,
        (format_v2.MANIFEST, format_v2.KG_FILE),
        format_v1.header_index,
        format_v1.load_rows,
    ),
    format_v3.VERSION: FormatVersion(
        format_v3.VERSION, (None,), format_v3.footer_index, format_v3.load_groups
    ),
}
FORMAT_VERSION = format_v3.VERSION  # what full snapshots are written in
INCREMENTAL_FORMAT_VERSION = format_v2.VERSION
_READABLE = tuple(VERSIONS)


@dataclass(frozen=True)
class Identity:
    """What ``_metadata`` says a state file is. ``parallelism`` and ``max_parallelism`` are checked
    when known; ``bound`` requires the file to carry ``job_id`` and ``checkpoint_id`` (every file
    written since they were added does; older checkpoints' files are read by the other checks)."""

    job_id: str
    checkpoint_id: int
    operator_id: str
    subtask_index: int
    parallelism: int | None = None
    max_parallelism: int | None = None
    bound: bool = True

    def binding(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "checkpoint_id": self.checkpoint_id}


def encode_subtask_state(s: SubtaskStateSnapshot, binding: dict[str, Any] | None = None) -> bytes:
    """Serialize one subtask's keyed and operator state into the current format, in memory."""
    out = io.BytesIO()
    write_subtask_state(s, out.write, binding)
    return out.getvalue()


def _read_checked_header(fh: BinaryIO, name: str) -> tuple[Header, FormatVersion]:
    h = read_header(fh, name, _READABLE)
    fmt = VERSIONS[h.version]
    ftype = h.plain.get("type")
    if ftype not in fmt.file_types:
        raise CorruptStateFileError(
            f"{name}: file type {ftype!r} does not exist in format version {h.version}"
        )
    return h, fmt


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_identity(
    p: dict[str, Any], name: str, keyed: KeyedStateSnapshot | None, expect: Identity | None
) -> None:
    """The header's ids against themselves and against what ``_metadata`` expects."""
    ids: tuple[Any, ...] = (p.get("subtask_index"), p.get("parallelism"), p.get("max_parallelism"))
    if not (isinstance(p.get("operator_id"), str) and all(_is_int(x) for x in ids)):
        raise CorruptStateFileError(f"{name}: header lacks its operator, subtask or parallelism")
    i, par, max_p = ids
    if not 0 <= i < par <= max_p:
        raise CorruptStateFileError(f"{name}: subtask {i} of parallelism {par} (max {max_p}) is impossible")
    if keyed is not None:
        want = compute_key_group_range_for_operator_index(max_p, par, i)
        if keyed.max_parallelism != max_p or keyed.key_group_range != want:
            raise CorruptStateFileError(
                f"{name}: key-group range {keyed.key_group_range} (max parallelism {keyed.max_parallelism}) "
                f"is not subtask {i}'s {want} at parallelism {par}"
            )
    if expect is None:
        return
    found = {"operator": p["operator_id"], "subtask": i}
    wanted: dict[str, Any] = {"operator": expect.operator_id, "subtask": expect.subtask_index}
    if expect.parallelism is not None:
        found["parallelism"], wanted["parallelism"] = par, expect.parallelism
    if expect.max_parallelism is not None:
        found["max parallelism"], wanted["max parallelism"] = max_p, expect.max_parallelism
    if expect.bound or "job_id" in p or "checkpoint_id" in p:
        found["job"], wanted["job"] = p.get("job_id"), expect.job_id
        found["checkpoint"], wanted["checkpoint"] = p.get("checkpoint_id"), expect.checkpoint_id
    wrong = [f"{k} {found[k]!r} (expected {wanted[k]!r})" for k in wanted if found[k] != wanted[k]]
    if wrong:
        raise CorruptStateFileError(
            f"{name}: not the state file _metadata names: " + ", ".join(wrong) + " (moved, swapped or copied)"
        )


def _check_key_groups(per_state: dict[str, Any], kg: int, max_parallelism: int, name: str) -> None:
    # every key of the section hashed in one vectorised call (a namespace mostly holds one key: a call
    # per namespace cost more than the hashing); only a section that fails is searched for its key
    keys = [k for per_ns in per_state.values() for per_key in per_ns.values() for k in per_key]
    if not keys or not (assign_to_key_groups(keys, max_parallelism) != kg).any():
        return
    for st_name, per_ns in per_state.items():
        for per_key in per_ns.values():
            keys = list(per_key)
            if keys and (assign_to_key_groups(keys, max_parallelism) != kg).any():
                bad = next(k for k in keys if assign_to_key_group(k, max_parallelism) != kg)
                raise CorruptStateFileError(
                    f"{name}: key {bad!r:.40} of state {st_name!r} is in the section of key group {kg}, "
                    f"it belongs to key group {assign_to_key_group(bad, max_parallelism)}"
                )


class _SinkError(Exception):
    """An exception of the ``load_into`` receiver, carried through the file checks unchanged."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def decode_subtask_state(
    fh: BinaryIO,
    name: str,
    key_group_range: KeyGroupRange | None = None,
    base_dir: str | Path | None = None,
    load_into: KeyGroupSink | None = None,
    expect: Identity | None = None,
    check_keys: bool = False,
    states: Callable[[str], bool] | None = None,
) -> tuple[SubtaskStateSnapshot, int]:
    """Read a state file, only the key groups in ``key_group_range`` (all if None); every section read
    is checked. Returns the snapshot and the number of bytes read. A version-2 manifest's key groups
    are read from the shared files it names, relative to ``base_dir`` (default: the directory of
    ``name``) and confined to its parent's ``shared/`` and ``taskowned/``, each checked against the
    size and crc32 the manifest recorded and the hash in its name. ``expect`` is the identity
    ``_metadata`` gives the file.

    ``load_into`` streams keyed state instead of collecting it: it is called with the keyed header
    (a snapshot without key groups) and returns the function each key group is handed to as soon as
    it is verified and decoded, while the next one is read (e.g.
    :meth:`~reference_impl.state.HeapKeyedStateBackend.key_group_restorer`); the returned snapshot
    then holds no key groups. A damaged section still raises, after the key groups before it were
    handed over. ``check_keys`` (validation) also checks that every key lies in the key group whose
    section holds it, which catches sections swapped with their checksums recomputed. ``states``
    keeps only the keyed states it accepts (the others' values are never decoded: an offline reader
    that needs a few states of a large file pays for those)."""
    try:
        return _decode(fh, name, key_group_range, base_dir, load_into, expect, check_keys, states)
    except CorruptStateFileError:
        raise
    except _SinkError as e:  # the receiving backend's own refusal: not the file's fault
        raise e.error from None
    except Exception as e:  # a serializer refusing, a malformed field: damage, named by file
        raise CorruptStateFileError(f"{name}: {type(e).__name__}: {e}") from None


def _decode(
    fh: BinaryIO,
    name: str,
    key_group_range: KeyGroupRange | None,
    base_dir: str | Path | None,
    load_into: KeyGroupSink | None,
    expect: Identity | None,
    check_keys: bool,
    states: Callable[[str], bool] | None = None,
) -> tuple[SubtaskStateSnapshot, int]:
    h, fmt = _read_checked_header(fh, name)
    p = h.plain
    if p.get("type") == format_v2.KG_FILE:
        raise CorruptStateFileError(f"{name}: a shared key-group file, not a subtask state file")
    manifest = p.get("type") == format_v2.MANIFEST
    try:
        keyed = None if p.get("keyed") is None else keyed_from_header(p["keyed"])
        decoders = (
            {}
            if keyed is None
            else {n: decoder(m) if states is None or states(n) else None for n, m in keyed.states.items()}
        )
    except CorruptStateFileError:
        raise
    except Exception as e:
        raise CorruptStateFileError(
            f"{name}: unreadable keyed-state header: {type(e).__name__}: {e}"
        ) from None
    _check_identity(p, name, keyed, expect)
    own = None if keyed is None else keyed.key_group_range
    raw_index, body_len, index_read = fmt.section_index(fh, name, h)
    index = check_sections(raw_index, name, body_len, None if manifest else own, p.get("operator") is True)
    chains = format_v2.shared_refs(p, name, own) if manifest else []
    read = h.body_start + index_read
    try:
        sink = None if load_into is None or keyed is None else load_into(keyed)
    except Exception as e:
        raise _SinkError(e) from None

    def done(kg: int, per_state: dict[str, Any]) -> None:
        assert keyed is not None
        if check_keys:
            _check_key_groups(per_state, kg, keyed.max_parallelism, name)
        if states is not None:  # the others were loaded undecoded (msgpack's own maps, no work per entry)
            per_state = {n: v for n, v in per_state.items() if states(n)}
            if not per_state:
                return
        if sink is None:
            keyed.key_groups[kg] = per_state
            return
        try:
            sink(kg, per_state)
        except Exception as e:
            raise _SinkError(e) from None

    wanted = [
        (sid, h.body_start + offset, length, section_crc)
        for sid, offset, length, section_crc in index
        if sid == OPERATOR or key_group_range is None or sid in key_group_range
    ]
    operator = None
    for sid, length, section_crc, data, data_crc in prefetched(fh, wanted):
        read += len(data)
        if len(data) != length:
            raise CorruptStateFileError(f"{name}: truncated in section {sid}")
        if data_crc != section_crc:
            raise CorruptStateFileError(f"{name}: checksum mismatch in section {sid}")
        try:
            if sid == OPERATOR:
                operator = decode_operator(data)
                continue
            per_state: dict[str, Any] = {}
            fmt.load_key_group(MSGPACK.loads(data), per_state, decoders)
        except Exception as e:
            raise CorruptStateFileError(
                f"{name}: undecodable section {sid}: {type(e).__name__}: {e}"
            ) from None
        done(sid, per_state)
    if keyed is not None and chains:
        base = Path(name).parent if base_dir is None else Path(base_dir)
        for kg, chain in chains:
            if key_group_range is not None and kg not in key_group_range:
                continue
            per_state = {}
            for pos, ref in enumerate(chain):
                path = format_v2.confined_path(base, ref.path, base.parent, name)
                read += format_v2.apply_key_group_file(
                    path,
                    ref,
                    name,
                    kg,
                    pos == 0,
                    p["operator_id"],
                    keyed.max_parallelism,
                    decoders,
                    per_state,
                )
            for st_name, per_ns in list(per_state.items()):  # deltas' deletions leave empty entries
                for ns in [ns for ns, keys in per_ns.items() if not keys]:
                    del per_ns[ns]
                if not per_ns:
                    del per_state[st_name]
            if per_state:
                done(kg, per_state)
    snap = SubtaskStateSnapshot(
        p["operator_id"], p["subtask_index"], p["parallelism"], p["max_parallelism"], keyed, operator
    )
    return snap, read


def referenced_shared_files(data: bytes | BinaryIO, name: str) -> list[SharedFileRef]:
    """The shared files a state file names (none unless it is a manifest), from its verified header.
    ``data``: the file's bytes, or the file opened for reading (only its header is read)."""
    h, _ = _read_checked_header(io.BytesIO(data) if isinstance(data, bytes) else data, name)
    if h.plain.get("type") != format_v2.MANIFEST:
        return []
    try:
        keyed = h.plain.get("keyed")
        own = None if keyed is None else keyed_from_header(keyed).key_group_range
    except Exception as e:
        raise CorruptStateFileError(
            f"{name}: unreadable keyed-state header: {type(e).__name__}: {e}"
        ) from None
    return [ref for _, chain in format_v2.shared_refs(h.plain, name, own) for ref in chain]
