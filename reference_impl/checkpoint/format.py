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

Version 3 (full snapshots, written since) is streamed: a subtask's state is written key group by key
group as it is encoded, so the index moves to a footer::

    magic "SCST" | version u16 | header length u32 | header (msgpack, no index) | header crc32 u32
    section 0 | section 1 | ...
    footer: index (msgpack) | index length u32 | index crc32 u32 | file crc32 u32 | magic "TSCS"

and a key group's section is a msgpack array of ``[state, namespace, {key: value}]``: one map per
state and namespace instead of one row per entry, which msgpack's C code packs and unpacks without
Python work per entry (values encoded as in version 1). The last 8 bytes are as in version 1, so
:func:`verify_file` checks any version.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from reference_impl.keygroups import KeyGroupRange
from reference_impl.serializers import MSGPACK, SerializerError, get_serializer
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
    "referenced_shared_files",
    "verify_file",
    "verify_shared_file",
]

MAGIC, TRAILER_MAGIC = b"SCST", b"TSCS"
ROW_FORMAT_VERSION = 1  # full snapshots, one row per entry, index in the header (read, not written)
INCREMENTAL_FORMAT_VERSION = 2  # manifests and shared key-group files of incremental checkpoints
FORMAT_VERSION = 3  # full snapshots: streamed, index in the footer, one map per state and namespace
_READABLE_VERSIONS = (ROW_FORMAT_VERSION, INCREMENTAL_FORMAT_VERSION, FORMAT_VERSION)
_PRE = struct.Struct(">4sHI")
_U32 = struct.Struct(">I")
_TAIL = struct.Struct(">II4s4s")  # v3: index length, index crc32, file crc32, trailer magic
_OPERATOR = "operator"
_MANIFEST, _KG_FILE = "incremental-manifest", "key-group"


KeyGroupSink = Callable[[KeyedStateSnapshot], Callable[[int, dict[str, Any]], None]]
"""Given a file's keyed header, the function its decoded key groups are handed to (streamed restores)."""


class CorruptStateFileError(ValueError):
    """A state file is damaged (bad magic, version, checksum or length): it is never restored."""


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


# crc32_combine (zlib's, which Python does not expose): the crc32 of A+B from crc32(A), crc32(B) and
# len(B), so a file's checksum follows from its sections' without a second pass over a large state.
_POLY = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC-32 polynomial (reflected bit order)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _powers() -> list[int]:
    out, p = [], 1 << 30  # x^1
    for _ in range(32):
        out.append(p)
        p = _multmodp(p, p)
    return out


_X2N = _powers()  # x^(2^k) modulo the polynomial


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """crc32 of the concatenation A+B, given crc32(A), crc32(B) and len(B)."""
    p, k = 1 << 31, 3  # x^0; len2 bytes = len2 * 2^3 bits
    while len2:
        if len2 & 1:
            p = _multmodp(_X2N[k & 31], p)
        len2 >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2


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


_BYTES = get_serializer("bytes")
_BYTES_DUMPS, _BYTES_LOADS = _BYTES.dumps, _BYTES.loads  # bound once, compared by identity
_JUST_BYTES = {bytes}


def _encoder(meta: StateMeta) -> Callable[[Any], Any] | None:
    """One state's value encoder, resolved once per snapshot instead of once per value; None when
    values go into the (msgpack) section as they are, the common case."""
    ser = get_serializer(meta.value_serializer)
    kind = StateKind(meta.kind)
    if kind in (StateKind.LIST, StateKind.MAP):
        return lambda v: _enc_value(meta, v)
    ttl = meta.ttl is not None
    if ser.identity == "msgpack":
        return (lambda x: [x[1], x[0]]) if ttl else None
    if ser.identity == "bytes" and not ttl:
        return _BYTES_DUMPS
    dump = ser.dumps
    return (lambda x: [x[1], dump(x[0])]) if ttl else dump


def _decoder(meta: StateMeta) -> Callable[[Any], Any] | None:
    """One state's value decoder, resolved once per file; None when a section's value is the value
    (msgpack, non-TTL, single value)."""
    ser = get_serializer(meta.value_serializer)
    kind = StateKind(meta.kind)
    if kind in (StateKind.LIST, StateKind.MAP):
        return lambda v: _dec_value(meta, v)
    ttl = meta.ttl is not None
    if ser.identity == "msgpack":
        return (lambda x: TtlValue(x[1], x[0])) if ttl else None
    if ser is _BYTES and not ttl:
        return _BYTES_LOADS
    load = ser.loads
    return (lambda x: TtlValue(load(x[1]), x[0])) if ttl else load


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


def _keyed_sections(k: KeyedStateSnapshot) -> Iterator[tuple[int, bytes]]:
    """One msgpack section per key group: rows ``[state, namespace, key, value]``, built per
    namespace with one comprehension and packed in one C call."""
    encoders = {name: _encoder(m) for name, m in k.states.items()}
    for kg in sorted(k.key_groups):
        rows: list[list[Any]] = []
        for name, per_ns in k.key_groups[kg].items():
            state_enc = encoders[name]
            for ns, per_key in per_ns.items():
                enc = state_enc
                if enc is _BYTES_DUMPS and set(map(type, per_key.values())) <= _JUST_BYTES:
                    enc = None  # exactly what the bytes serializer returns, checked in bulk
                if enc is None:
                    rows += [[name, ns, key, v] for key, v in per_key.items()]
                else:
                    rows += [[name, ns, key, enc(v)] for key, v in per_key.items()]
        yield kg, MSGPACK.dumps(rows)


def _keyed_header(k: KeyedStateSnapshot) -> dict[str, Any]:
    return {
        "max_parallelism": k.max_parallelism,
        "range": [k.key_group_range.start, k.key_group_range.end],
        "states": [_meta_to_plain(m) for m in k.states.values()],
        "snapshot_time_ms": k.snapshot_time_ms,
    }


def encode_row_format(s: SubtaskStateSnapshot) -> bytes:
    """The version-1 layout (index in the header, one row per entry). No longer written by storage;
    kept so that reading version-1 files stays tested."""
    sections: list[tuple[str | int, bytes]] = []
    if s.keyed is not None:
        sections.extend(_keyed_sections(s.keyed))
    if s.operator is not None:
        sections.append((_OPERATOR, _encode_operator(s.operator)))
    index, offset = [], 0
    for sid, data in sections:
        index.append([sid, offset, len(data), _crc(data)])
        offset += len(data)
    header = msgpack.packb({**_subtask_header(s), "index": index}, use_bin_type=True)
    body = (
        _PRE.pack(MAGIC, ROW_FORMAT_VERSION, len(header))
        + header
        + _U32.pack(_crc(header))
        + b"".join(d for _, d in sections)
    )
    return body + _U32.pack(_crc(body)) + TRAILER_MAGIC


def _subtask_header(s: SubtaskStateSnapshot) -> dict[str, Any]:
    """The header fields every format version writes (v2 adds its section index)."""
    return {
        "operator_id": s.operator_id,
        "subtask_index": s.subtask_index,
        "parallelism": s.parallelism,
        "max_parallelism": s.max_parallelism,
        "keyed": None if s.keyed is None else _keyed_header(s.keyed),
        "operator": True if s.operator is not None else None,
    }


def _state_groups(k: KeyedStateSnapshot, kg: int, encoders: dict[str, Any]) -> list[list[Any]]:
    """A version-3 section's content: ``[state, namespace, {key: value}]`` per state and namespace.
    The maps are the snapshot's own dicts when values go in as they are (msgpack values; bytes values
    checked in bulk), so a key group is packed by one C call with no Python work per entry."""
    groups: list[list[Any]] = []
    for name, per_ns in k.key_groups[kg].items():
        state_enc = encoders[name]
        for ns, per_key in per_ns.items():
            enc = state_enc
            if enc is _BYTES_DUMPS and set(map(type, per_key.values())) <= _JUST_BYTES:
                enc = None  # exactly what the bytes serializer returns
            groups.append([name, ns, per_key if enc is None else {key: enc(v) for key, v in per_key.items()}])
    return groups


def write_subtask_state(s: SubtaskStateSnapshot, write: Callable[[Any], object]) -> tuple[int, int]:
    """Serialize one subtask's state in the current format (version 3), handing each part to ``write``
    as soon as it is encoded: key groups are packed one at a time into one reused buffer (passed as a
    memoryview valid only during the call), so a 1 GB state is neither held whole nor copied in
    memory. The file's crc32 follows from the sections' (:func:`crc32_combine`), not from another
    pass. Returns (file size, file crc32)."""
    header = msgpack.packb(_subtask_header(s), use_bin_type=True)
    head = _PRE.pack(MAGIC, FORMAT_VERSION, len(header)) + header + _U32.pack(_crc(header))
    write(head)
    crc, size = _crc(head), len(head)
    index: list[list[Any]] = []
    offset = 0

    def crc_and_write(view: Any) -> int:
        # in the writer thread: one call each for the whole section, as both release the GIL and every
        # return waits for the packing thread to let go of it
        c = zlib.crc32(view)
        write(view)
        return c & 0xFFFFFFFF

    def finish(sid: str | int, done: Future[int], view: memoryview, packer: Any) -> None:
        nonlocal crc, offset
        section_crc, n = done.result(), len(view)
        index.append([sid, offset, n, section_crc])
        crc = crc32_combine(crc, section_crc, n)
        offset += n
        view.release()
        if packer is not None:
            packer.reset()

    # two packers: key group i+1 is packed (holding the GIL) while key group i is checksummed and
    # written by one writer thread, in order
    with ThreadPoolExecutor(1, thread_name_prefix="state-writer") as writer:
        pending: tuple[str | int, Future[int], memoryview, Any] | None = None
        if s.keyed is not None:
            k = s.keyed
            encoders = {name: _encoder(m) for name, m in k.states.items()}
            packers = (MSGPACK.packer(), MSGPACK.packer())
            for i, kg in enumerate(sorted(k.key_groups)):
                packer = packers[i % 2]
                try:
                    packer.pack(_state_groups(k, kg, encoders))
                except (TypeError, OverflowError, ValueError) as e:
                    raise SerializerError(f"msgpack serializer: key group {kg}: {e}") from e
                view = packer.getbuffer()
                done = writer.submit(crc_and_write, view)
                if pending is not None:
                    finish(*pending)
                pending = (kg, done, view, packer)
        if s.operator is not None:
            view = memoryview(_encode_operator(s.operator))
            done = writer.submit(crc_and_write, view)
            if pending is not None:
                finish(*pending)
            pending = (_OPERATOR, done, view, None)
        if pending is not None:
            finish(*pending)
    footer = msgpack.packb(index, use_bin_type=True)
    tail = footer + _U32.pack(len(footer)) + _U32.pack(_crc(footer))
    crc = zlib.crc32(tail, crc)
    trailer = _U32.pack(crc) + TRAILER_MAGIC
    write(tail + trailer)
    size += offset + len(tail) + len(trailer)
    return size, zlib.crc32(trailer, crc) & 0xFFFFFFFF


def encode_subtask_state(s: SubtaskStateSnapshot) -> bytes:
    """Serialize one subtask's keyed and operator state into the file format, in memory."""
    out = io.BytesIO()
    write_subtask_state(s, out.write)
    return out.getvalue()


def _load_rows(rows: list[Any], per_state: dict[str, dict[Any, dict[Any, Any]]], decoders: dict) -> None:
    """Rows ``[state, namespace, key, value]`` of one key group into ``per_state``. Rows come grouped
    by state and namespace, so the target dict and decoder are looked up once per group."""
    last_name: Any = _NO_ROW
    last_ns: Any = _NO_ROW
    target: dict[Any, Any] = {}
    dec = None
    for st_name, ns, key, v in rows:
        if st_name != last_name or ns != last_ns:
            target = per_state.setdefault(st_name, {}).setdefault(ns, {})
            dec = decoders[st_name]
            last_name, last_ns = st_name, ns
        target[key] = v if dec is None else dec(v)


_NO_ROW = object()


def _load_groups(groups: list[Any], per_state: dict[str, dict[Any, dict[Any, Any]]], decoders: dict) -> None:
    """A version-3 section (``[state, namespace, {key: value}]`` groups) into ``per_state``: the
    decoded maps are taken as they are unless the state's values need decoding."""
    for st_name, ns, m in groups:
        dec = decoders[st_name]
        if not isinstance(m, dict):
            raise ValueError(f"state {st_name!r}: entries are a {type(m).__name__}, not a map")
        if dec is _BYTES_LOADS and set(map(type, m.values())) <= _JUST_BYTES:
            dec = None  # msgpack decoded them as bytes already: checked in bulk
        per_state.setdefault(st_name, {})[ns] = m if dec is None else {k: dec(v) for k, v in m.items()}


@dataclass
class _Header:
    plain: dict[str, Any]
    body_start: int
    version: int


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
    if not isinstance(plain, dict) or (version == INCREMENTAL_FORMAT_VERSION) != (ftype is not None):
        raise CorruptStateFileError(f"{name}: header does not match format version {version}")
    if ftype is not None and ftype not in (_MANIFEST, _KG_FILE):
        raise CorruptStateFileError(f"{name}: unknown file type {ftype!r}")
    return _Header(plain, _PRE.size + hlen + 4, version)


def _footer_index(fh: BinaryIO, name: str, h: _Header) -> tuple[list[Any], int]:
    """A version-3 file's section index (from its checksummed footer) and the footer's size."""
    size = fh.seek(0, io.SEEK_END)
    if size < h.body_start + _TAIL.size:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({size} bytes)")
    fh.seek(size - _TAIL.size)
    flen, fcrc, _, magic = _TAIL.unpack(fh.read(_TAIL.size))
    start = size - _TAIL.size - flen
    if magic != TRAILER_MAGIC or start < h.body_start:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({size} bytes)")
    fh.seek(start)
    footer = fh.read(flen)
    if _crc(footer) != fcrc:
        raise CorruptStateFileError(f"{name}: index checksum mismatch (the file is damaged)")
    try:
        index = msgpack.unpackb(footer, raw=False, strict_map_key=False)
        if any(o < 0 or n < 0 or h.body_start + o + n > start for _, o, n, _ in index):
            raise ValueError("a section lies outside the file's body")
    except Exception as e:
        raise CorruptStateFileError(f"{name}: unreadable index: {e}") from None
    return index, size - start


def _prefetched(
    fh: BinaryIO, sections: list[tuple[Any, int, int, int]]
) -> Iterator[tuple[Any, int, int, memoryview, int]]:
    """``(sid, length, crc, data, crc of data)`` per section, in order. With a real file, one reader
    thread reads and checksums section i+1 (both release the GIL) into the other of two buffers while
    the caller decodes section i; ``data`` is valid until the next item."""
    readers = (_SectionReader(fh), _SectionReader(fh))
    if readers[0].fd < 0 or len(sections) < 2:
        for sid, offset, length, crc in sections:
            data, data_crc = readers[0].read_and_crc(offset, length)
            yield sid, length, crc, data, data_crc
        return

    def fetch(i: int) -> tuple[memoryview, int]:
        return readers[i % 2].read_and_crc(sections[i][1], sections[i][2])

    with ThreadPoolExecutor(1, thread_name_prefix="state-reader") as pool:
        nxt = pool.submit(fetch, 0)
        for i, (sid, _, length, crc) in enumerate(sections):
            data, data_crc = nxt.result()
            if i + 1 < len(sections):
                nxt = pool.submit(fetch, i + 1)  # into the other buffer: this one is being decoded
            yield sid, length, crc, data, data_crc
            data.release()


class _SectionReader:
    """Reads sections into one reused buffer: one ``pread`` straight into it when the file is a real
    file, so a section is neither allocated afresh nor copied again on its way to the decoder."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.buf = bytearray()
        try:
            self.fd = fh.fileno()
        except (AttributeError, io.UnsupportedOperation):
            self.fd = -1

    def read_and_crc(self, offset: int, length: int) -> tuple[memoryview, int]:
        """``length`` bytes at ``offset`` (fewer at the end of the file), valid until the next read,
        and their crc32: one ``pread`` and one checksum call for the whole section, since each return
        from a GIL-releasing call waits for the decoding thread to let go of the GIL."""
        if len(self.buf) < length:
            self.buf = bytearray(length)  # a new one: views of the old one may still be alive
        view = memoryview(self.buf)[:length]
        got = 0
        if self.fd < 0:
            self.fh.seek(offset)
        while got < length:
            rest = view[got:]
            n = os.preadv(self.fd, [rest], offset + got) if self.fd >= 0 else self.fh.readinto(rest)  # type: ignore[attr-defined]
            if not n:
                break
            got += n
        data = view[:got]
        return data, zlib.crc32(data) & 0xFFFFFFFF


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
    load_into: KeyGroupSink | None = None,
) -> tuple[SubtaskStateSnapshot, int]:
    """Read a state file, only the key groups in ``key_group_range`` (all if None); every section read
    is checksummed. Returns the snapshot and the number of bytes read. A version-2 manifest's key
    groups are read from the shared files it names, relative to ``base_dir`` (default: the directory
    of ``name``), each checked against the size and crc32 the manifest recorded.

    ``load_into`` streams keyed state instead of collecting it: it is called with the keyed header
    (a snapshot without key groups) and returns the function each key group is handed to as soon as
    it is verified and decoded, while the next one is read (e.g.
    :meth:`~reference_impl.state.HeapKeyedStateBackend.key_group_restorer`); the returned snapshot
    then holds no key groups. A damaged section still raises, after the key groups before it were
    handed over."""
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
    decoders = {n: _decoder(m) for n, m in metas.items()}
    sink = None if load_into is None or keyed is None else load_into(keyed)

    def done(kg: int, per_state: dict[str, Any]) -> None:
        assert keyed is not None
        if sink is None:
            keyed.key_groups[kg] = per_state
        else:
            sink(kg, per_state)

    if h.version == FORMAT_VERSION:
        index, footer_size = _footer_index(fh, name, h)
        read += footer_size
    else:
        index = p["index"]
    wanted = [
        (sid, h.body_start + offset, length, crc)
        for sid, offset, length, crc in index
        if sid == _OPERATOR or key_group_range is None or sid in key_group_range
    ]
    for sid, length, crc, data, data_crc in _prefetched(fh, wanted):
        read += len(data)
        if len(data) != length:
            raise CorruptStateFileError(f"{name}: truncated in section {sid}")
        if data_crc != crc:
            raise CorruptStateFileError(f"{name}: checksum mismatch in section {sid}")
        try:
            rows = (
                MSGPACK.loads(data)
                if sid != _OPERATOR
                else msgpack.unpackb(data, raw=False, strict_map_key=False)
            )
            if sid != _OPERATOR:
                per_state: dict[str, Any] = {}
                (_load_groups if h.version == FORMAT_VERSION else _load_rows)(rows, per_state, decoders)
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
            done(sid, per_state)
    if p.get("type") == _MANIFEST and keyed is not None:
        base = Path(name).parent if base_dir is None else Path(base_dir)
        for kg, chain in p["shared"]:
            if key_group_range is not None and kg not in key_group_range:
                continue
            per_state = {}
            for ref in chain:
                read += _apply_key_group_file(base, SharedFileRef(*ref), name, kg, decoders, per_state)
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
                dec = decoders[st_name]
                per_state.setdefault(st_name, {}).setdefault(ns, {})[key] = (
                    row[3] if dec is None else dec(row[3])
                )
            else:
                per_state.get(st_name, {}).get(ns, {}).pop(key, None)
    except CorruptStateFileError:
        raise
    except Exception as e:
        raise CorruptStateFileError(f"{path}: undecodable key group {kg}: {type(e).__name__}: {e}") from None
    return len(data)
