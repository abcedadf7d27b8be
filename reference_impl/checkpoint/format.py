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
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
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
    "CorruptStateFileError",
    "encode_subtask_state",
    "decode_subtask_state",
    "verify_file",
]

MAGIC, TRAILER_MAGIC = b"SCST", b"TSCS"
FORMAT_VERSION = 1
_PRE = struct.Struct(">4sHI")
_U32 = struct.Struct(">I")
_OPERATOR = "operator"


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
        rows = []
        for e in s.operator.states.values():
            ser = get_serializer(e.value_serializer)
            if e.mode is OperatorStateMode.BROADCAST:
                kser = get_serializer(e.key_serializer or "msgpack")
                body = [[kser.dumps(k), ser.dumps(v)] for k, v in e.value.items()]  # type: ignore[union-attr]
            else:
                body = [ser.dumps(v) for v in e.value]
            rows.append([e.name, OperatorStateMode(e.mode).value, e.value_serializer, e.key_serializer, body])
        sections.append((_OPERATOR, msgpack.packb(rows, use_bin_type=True)))
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
    if version != FORMAT_VERSION:
        raise CorruptStateFileError(
            f"{name}: format version {version}, this statechaos reads {FORMAT_VERSION}"
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
    return _Header(plain, _PRE.size + hlen + 4)


def verify_file(data: bytes, name: str) -> None:
    """Check magic, trailer and whole-file checksum: any flipped byte or truncation is an error."""
    if len(data) < _PRE.size + 12 or data[-4:] != TRAILER_MAGIC:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({len(data)} bytes)")
    if _U32.unpack(data[-8:-4])[0] != _crc(data[:-8]):
        raise CorruptStateFileError(f"{name}: file checksum mismatch (the file is damaged)")


def decode_subtask_state(
    fh: BinaryIO, name: str, key_group_range: KeyGroupRange | None = None
) -> tuple[SubtaskStateSnapshot, int]:
    """Read a state file, only the key groups in ``key_group_range`` (all if None); every section read
    is checksummed. Returns the snapshot and the number of bytes read."""
    h = _read_header(fh, name)
    p = h.plain
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
    snap = SubtaskStateSnapshot(
        p["operator_id"], p["subtask_index"], p["parallelism"], p["max_parallelism"], keyed, operator
    )
    return snap, read
