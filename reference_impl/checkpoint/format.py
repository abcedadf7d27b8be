"""The state file format: versioned, checksummed, with per-key-group offsets.

Layout (all integers big-endian)::

    magic "SCST" | version u16 | header length u32 | header (msgpack) | header crc32 u32
    section 0 | section 1 | ...                      (one per key group, then one for operator state)
    trailer: crc32 of everything before it u32 | magic "TSCS"

The header holds the snapshot's metadata and, per section, its offset, length and crc32, so a restore
seeks to the key groups it owns and reads nothing else; each section is verified on read, and
:func:`verify_file` checks the whole file, so a single flipped byte or a truncation anywhere is
detected. Values are written with the serializers named in each state's metadata (msgpack by
default); nothing is ever unpickled unless the user opted in.

Version 2 (incremental checkpoints of the on-disk backend) uses the same container for two more file
types, told apart by the header's ``type``: a *manifest* (the subtask's state file in ``chk-<n>``),
whose header names, per key group, a chain of shared files in ``<job>/shared/`` (a base, then deltas)
with their size and crc32, and holds operator state inline; and a *key-group file* (in ``shared/``,
named by content hash) with one section of rows ``[state, namespace, key, value]`` — in a delta, a
row ``[state, namespace, key]`` deletes the entry. Unchanged key groups keep pointing at the files of
the previous checkpoint, so a checkpoint writes only what changed. Version 1 files are unchanged.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from reference_impl.keygroups import KeyGroupRange
from reference_impl.serializers import MSGPACK, get_serializer
from reference_impl.snapshot import (
    KeyedStateSnapshot,
    OperatorStateEntry,
    OperatorStateMode,
    OperatorStateSnapshot,
    StateKind,
    StateMeta,
    SubtaskStateSnapshot,
    TtlValue,
)

__all__ = [
    "FORMAT_VERSION",
    "INCREMENTAL_FORMAT_VERSION",
    "CorruptStateFileError",
    "SharedFileRef",
    "encode_subtask_state",
    "decode_subtask_state",
    "encode_state_value",
    "encode_key_group_file",
    "encode_incremental_manifest",
    "msgpack_array_header",
    "referenced_shared_files",
    "verify_file",
    "verify_shared_file",
]

MAGIC, TRAILER_MAGIC = b"SCST", b"TSCS"
FORMAT_VERSION = 1
INCREMENTAL_FORMAT_VERSION = 2  # manifests and shared key-group files of incremental checkpoints
_READABLE_VERSIONS = (FORMAT_VERSION, INCREMENTAL_FORMAT_VERSION)
_PRE = struct.Struct(">4sHI")
_U32 = struct.Struct(">I")
_OPERATOR = "operator"
_MANIFEST, _KG_FILE = "incremental-manifest", "key-group"


class CorruptStateFileError(ValueError):
    """A state file is damaged (bad magic, version, checksum or length): it is never restored."""


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _enc_value(meta: StateMeta, v: Any) -> Any:
    ser = get_serializer(meta.value_serializer)
    ttl = meta.ttl is not None
    kind = StateKind(meta.kind)
    # msgpack values are embedded as they are (the section itself is msgpack); others as their bytes
    dump = (lambda x: x) if ser.identity == "msgpack" else ser.dumps

    def one(x: Any) -> Any:
        return [x[1], dump(x[0])] if ttl else dump(x)

    if kind is StateKind.LIST:
        return [one(x) for x in v]
    if kind is StateKind.MAP:
        kser = get_serializer(meta.map_key_serializer or "msgpack")
        return [[kser.dumps(k), one(x)] for k, x in v.items()]
    return one(v)


def _dec_value(meta: StateMeta, v: Any) -> Any:
    ser = get_serializer(meta.value_serializer)
    ttl = meta.ttl is not None
    kind = StateKind(meta.kind)
    load = (lambda x: x) if ser.identity == "msgpack" else ser.loads

    def one(x: Any) -> Any:
        return TtlValue(load(x[1]), x[0]) if ttl else load(x)

    if kind is StateKind.LIST:
        return [one(x) for x in v]
    if kind is StateKind.MAP:
        kser = get_serializer(meta.map_key_serializer or "msgpack")
        return {kser.loads(k): one(x) for k, x in v}
    return one(v)


def _decoder(meta: StateMeta) -> Any:
    """A fast decoder for one state's values: the common msgpack, non-TTL, single-value case is free."""
    if (
        meta.value_serializer == "msgpack"
        and meta.ttl is None
        and StateKind(meta.kind) not in (StateKind.LIST, StateKind.MAP)
    ):
        return lambda v: v
    return lambda v: _dec_value(meta, v)


def _meta_to_plain(m: StateMeta) -> dict[str, Any]:
    return {
        "name": m.name,
        "kind": StateKind(m.kind).value,
        "value_serializer": m.value_serializer,
        "key_serializer": m.key_serializer,
        "namespace_serializer": m.namespace_serializer,
        "map_key_serializer": m.map_key_serializer,
        "ttl": m.ttl,
    }


def _meta_from_plain(d: dict[str, Any]) -> StateMeta:
    return StateMeta(
        d["name"],
        StateKind(d["kind"]),
        d["value_serializer"],
        d["key_serializer"],
        d["namespace_serializer"],
        d["map_key_serializer"],
        d["ttl"],
    )


def _encode_operator(op: OperatorStateSnapshot) -> bytes:
    rows = []
    for e in op.states.values():
        ser = get_serializer(e.value_serializer)
        if e.mode is OperatorStateMode.BROADCAST:
            kser = get_serializer(e.key_serializer or "msgpack")
            body = [[kser.dumps(k), ser.dumps(v)] for k, v in e.value.items()]  # type: ignore[union-attr]
        else:
            body = [ser.dumps(v) for v in e.value]
        rows.append([e.name, OperatorStateMode(e.mode).value, e.value_serializer, e.key_serializer, body])
    return msgpack.packb(rows, use_bin_type=True)


def encode_subtask_state(s: SubtaskStateSnapshot) -> bytes:
    """Serialize one subtask's keyed and operator state into the file format."""
    sections: list[tuple[str | int, bytes]] = []
    keyed_header: dict[str, Any] | None = None
    if s.keyed is not None:
        k = s.keyed
        metas = k.states
        for kg in sorted(k.key_groups):
            rows = []
            for name, per_ns in k.key_groups[kg].items():
                meta = metas[name]
                for ns, per_key in per_ns.items():
                    for key, v in per_key.items():
                        rows.append([name, ns, key, _enc_value(meta, v)])
            sections.append((kg, MSGPACK.dumps(rows)))
        keyed_header = {
            "max_parallelism": k.max_parallelism,
            "range": [k.key_group_range.start, k.key_group_range.end],
            "states": [_meta_to_plain(m) for m in metas.values()],
            "snapshot_time_ms": k.snapshot_time_ms,
        }
    op_header = None
    if s.operator is not None:
        sections.append((_OPERATOR, _encode_operator(s.operator)))
        op_header = True
    index = []
    offset = 0
    for sid, data in sections:
        index.append([sid, offset, len(data), _crc(data)])
        offset += len(data)
    header = msgpack.packb(
        {
            "operator_id": s.operator_id,
            "subtask_index": s.subtask_index,
            "parallelism": s.parallelism,
            "max_parallelism": s.max_parallelism,
            "keyed": keyed_header,
            "operator": op_header,
            "index": index,
        },
        use_bin_type=True,
    )
    head = _PRE.pack(MAGIC, FORMAT_VERSION, len(header)) + header + _U32.pack(_crc(header))
    body = head + b"".join(d for _, d in sections)
    return body + _U32.pack(_crc(body)) + TRAILER_MAGIC


@dataclass
class _Header:
    plain: dict[str, Any]
    body_start: int


def _read_header(fh: BinaryIO, name: str) -> _Header:
    pre = fh.read(_PRE.size)
    if len(pre) != _PRE.size:
        raise CorruptStateFileError(f"{name}: truncated before the header")
    magic, version, hlen = _PRE.unpack(pre)
    if magic != MAGIC:
        raise CorruptStateFileError(f"{name}: not a statechaos state file (magic {magic!r})")
    if version not in _READABLE_VERSIONS:
        raise CorruptStateFileError(
            f"{name}: format version {version}, this statechaos reads "
            + " and ".join(str(v) for v in _READABLE_VERSIONS)
        )
    header = fh.read(hlen)
    crc = fh.read(4)
    if len(header) != hlen or len(crc) != 4:
        raise CorruptStateFileError(f"{name}: truncated header")
    if _U32.unpack(crc)[0] != _crc(header):
        raise CorruptStateFileError(f"{name}: header checksum mismatch")
    try:
        plain = msgpack.unpackb(header, raw=False, strict_map_key=False)
    except Exception as e:
        raise CorruptStateFileError(f"{name}: unreadable header: {e}") from None
    ftype = plain.get("type") if isinstance(plain, dict) else None
    if not isinstance(plain, dict) or (version == FORMAT_VERSION) != (ftype is None):
        raise CorruptStateFileError(f"{name}: header does not match format version {version}")
    if ftype is not None and ftype not in (_MANIFEST, _KG_FILE):
        raise CorruptStateFileError(f"{name}: unknown file type {ftype!r}")
    return _Header(plain, _PRE.size + hlen + 4)


def verify_file(data: bytes, name: str) -> None:
    """Check magic, trailer and whole-file checksum: any flipped byte or truncation is an error."""
    if len(data) < _PRE.size + 12 or data[-4:] != TRAILER_MAGIC:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({len(data)} bytes)")
    if _U32.unpack(data[-8:-4])[0] != _crc(data[:-8]):
        raise CorruptStateFileError(f"{name}: file checksum mismatch (the file is damaged)")


def decode_subtask_state(
    fh: BinaryIO,
    name: str,
    key_group_range: KeyGroupRange | None = None,
    base_dir: str | Path | None = None,
) -> tuple[SubtaskStateSnapshot, int]:
    """Read a state file, only the key groups in ``key_group_range`` (all if None); every section read
    is checksummed. Returns the snapshot and the number of bytes read. A version-2 manifest's key
    groups are read from the shared files it names, relative to ``base_dir`` (default: the directory
    of ``name``), each checked against the size and crc32 the manifest recorded."""
    h = _read_header(fh, name)
    p = h.plain
    if p.get("type") == _KG_FILE:
        raise CorruptStateFileError(f"{name}: a shared key-group file, not a subtask state file")
    read = h.body_start
    keyed = None
    operator = None
    metas: dict[str, StateMeta] = {}
    if p["keyed"] is not None:
        kh = p["keyed"]
        metas = {m["name"]: _meta_from_plain(m) for m in kh["states"]}
        keyed = KeyedStateSnapshot(
            kh["max_parallelism"], KeyGroupRange(*kh["range"]), metas, {}, kh["snapshot_time_ms"]
        )
    for sid, offset, length, crc in p["index"]:
        wanted = sid == _OPERATOR or key_group_range is None or sid in key_group_range
        if not wanted:
            continue
        fh.seek(h.body_start + offset)
        data = fh.read(length)
        read += len(data)
        if len(data) != length:
            raise CorruptStateFileError(f"{name}: truncated in section {sid}")
        if _crc(data) != crc:
            raise CorruptStateFileError(f"{name}: checksum mismatch in section {sid}")
        try:
            rows = (
                MSGPACK.loads(data)
                if sid != _OPERATOR
                else msgpack.unpackb(data, raw=False, strict_map_key=False)
            )
        except Exception as e:
            raise CorruptStateFileError(f"{name}: undecodable section {sid}: {e}") from None
        if sid == _OPERATOR:
            operator = OperatorStateSnapshot()
            for op_name, mode, vser, kser, body in rows:
                ser = get_serializer(vser)
                m = OperatorStateMode(mode)
                if m is OperatorStateMode.BROADCAST:
                    ks = get_serializer(kser or "msgpack")
                    value: Any = {ks.loads(k): ser.loads(v) for k, v in body}
                else:
                    value = [ser.loads(v) for v in body]
                operator.states[op_name] = OperatorStateEntry(op_name, m, vser, kser, value)
        else:
            assert keyed is not None
            per_state = keyed.key_groups.setdefault(sid, {})
            decoders = {n: _decoder(m) for n, m in metas.items()}
            for st_name, ns, key, v in rows:
                per_state.setdefault(st_name, {}).setdefault(ns, {})[key] = decoders[st_name](v)
    if p.get("type") == _MANIFEST and keyed is not None:
        base = Path(name).parent if base_dir is None else Path(base_dir)
        decoders = {n: _decoder(m) for n, m in metas.items()}
        for kg, chain in p["shared"]:
            if key_group_range is not None and kg not in key_group_range:
                continue
            per_state = keyed.key_groups.setdefault(kg, {})
            for ref in chain:
                read += _apply_key_group_file(base, SharedFileRef(*ref), name, kg, decoders, per_state)
            for st_name in [n for n, per_ns in per_state.items() if not any(per_ns.values())]:
                del per_state[st_name]
            if not per_state:
                del keyed.key_groups[kg]
    snap = SubtaskStateSnapshot(
        p["operator_id"], p["subtask_index"], p["parallelism"], p["max_parallelism"], keyed, operator
    )
    return snap, read


# ---------------------------------------------------------------------- version 2: incremental


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


def encode_state_value(meta: StateMeta, v: Any) -> bytes:
    """One stored value (snapshot form: TtlValue / lists / dicts) as the bytes of a section row's value."""
    return MSGPACK.dumps(_enc_value(meta, v))


def _container(version: int, header: dict[str, Any], sections: list[tuple[Any, bytes]]) -> bytes:
    index, offset = [], 0
    for sid, data in sections:
        index.append([sid, offset, len(data), _crc(data)])
        offset += len(data)
    hb = msgpack.packb({**header, "index": index}, use_bin_type=True)
    body = _PRE.pack(MAGIC, version, len(hb)) + hb + _U32.pack(_crc(hb)) + b"".join(d for _, d in sections)
    return body + _U32.pack(_crc(body)) + TRAILER_MAGIC


def encode_key_group_file(max_parallelism: int, key_group: int, rows: bytes, delta: bool) -> bytes:
    """A shared key-group file: ``rows`` is a msgpack array of ``[state, ns, key, value]`` rows (in a
    delta also ``[state, ns, key]`` deletions), values encoded as :func:`encode_state_value`."""
    header = {"type": _KG_FILE, "max_parallelism": max_parallelism, "key_group": key_group, "delta": delta}
    return _container(INCREMENTAL_FORMAT_VERSION, header, [(key_group, rows)])


def encode_incremental_manifest(s: SubtaskStateSnapshot, shared: dict[int, list[SharedFileRef]]) -> bytes:
    """A subtask's manifest: ``s`` gives the ids, keyed metadata (its ``key_groups`` are ignored) and
    operator state; ``shared`` the chain of shared files per key group, base first."""
    keyed_header = None
    if s.keyed is not None:
        k = s.keyed
        keyed_header = {
            "max_parallelism": k.max_parallelism,
            "range": [k.key_group_range.start, k.key_group_range.end],
            "states": [_meta_to_plain(m) for m in k.states.values()],
            "snapshot_time_ms": k.snapshot_time_ms,
        }
    sections: list[tuple[Any, bytes]] = []
    if s.operator is not None:
        sections.append((_OPERATOR, _encode_operator(s.operator)))
    header = {
        "type": _MANIFEST,
        "operator_id": s.operator_id,
        "subtask_index": s.subtask_index,
        "parallelism": s.parallelism,
        "max_parallelism": s.max_parallelism,
        "keyed": keyed_header,
        "operator": True if s.operator is not None else None,
        "shared": [[kg, [[r.path, r.size, r.crc32] for r in chain]] for kg, chain in sorted(shared.items())],
    }
    return _container(INCREMENTAL_FORMAT_VERSION, header, sections)


def referenced_shared_files(data: bytes, name: str) -> list[SharedFileRef]:
    """The shared files a state file names (none for a version-1 file), from its verified header."""
    h = _read_header(io.BytesIO(data), name)
    if h.plain.get("type") != _MANIFEST:
        return []
    try:
        return [SharedFileRef(*ref) for _, chain in h.plain["shared"] for ref in chain]
    except Exception as e:
        raise CorruptStateFileError(f"{name}: unreadable shared-file list: {e}") from None


def verify_shared_file(path: Path, ref: SharedFileRef, referrer: str) -> bytes:
    """Read a shared file and check it against the manifest's size and crc32 and its own checksums;
    errors name the shared file and the manifest that references it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorruptStateFileError(f"{path}: missing (shared file referenced by {referrer})") from None
    if len(data) != ref.size:
        raise CorruptStateFileError(
            f"{path}: size {len(data)} bytes, {referrer} says {ref.size} (truncated or damaged)"
        )
    if _crc(data) != ref.crc32:
        raise CorruptStateFileError(f"{path}: checksum mismatch (the shared file is damaged)")
    verify_file(data, str(path))
    return data


def _apply_key_group_file(
    base: Path, ref: SharedFileRef, referrer: str, kg: int, decoders: dict[str, Any], per_state: dict
) -> int:
    path = base / ref.path
    data = verify_shared_file(path, ref, referrer)
    h = _read_header(io.BytesIO(data), str(path))
    p = h.plain
    if p.get("type") != _KG_FILE or p.get("key_group") != kg or len(p["index"]) != 1:
        raise CorruptStateFileError(f"{path}: not the shared file of key group {kg} ({referrer})")
    _, offset, length, crc = p["index"][0]
    section = data[h.body_start + offset : h.body_start + offset + length]
    if len(section) != length or _crc(section) != crc:
        raise CorruptStateFileError(f"{path}: checksum mismatch in section {kg}")
    try:
        rows = MSGPACK.loads(section)
        for row in rows:
            st_name, ns, key = row[0], row[1], row[2]
            if len(row) == 4:
                per_state.setdefault(st_name, {}).setdefault(ns, {})[key] = decoders[st_name](row[3])
            else:
                per_state.get(st_name, {}).get(ns, {}).pop(key, None)
    except CorruptStateFileError:
        raise
    except Exception as e:
        raise CorruptStateFileError(f"{path}: undecodable key group {kg}: {type(e).__name__}: {e}") from None
    return len(data)
