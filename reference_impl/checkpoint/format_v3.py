"""State file format version 3, the one written: full snapshots streamed key group by key group as
they are encoded, so the section index moves to a checksummed footer::

    magic "SCST" | version u16 | header length u32 | header (msgpack, no index) | header crc32 u32
    section 0 | section 1 | ...
    footer: index (msgpack) | index length u32 | index crc32 u32 | file crc32 u32 | magic "TSCS"

A key group's section is a msgpack array of ``[state, namespace, {key: value}]``: one map per state
and namespace, which msgpack's C code packs and unpacks without Python work per entry (values encoded
as in version 1). The last 8 bytes are as in every version, so one whole-file check fits all."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any, BinaryIO

import msgpack

from reference_impl.checkpoint.container import (
    MAGIC,
    OPERATOR,
    PRE,
    THREAD_FROM_BYTES,
    TRAILER_MAGIC,
    U32,
    CorruptStateFileError,
    Done,
    Header,
    crc,
    crc32_combine,
)
from reference_impl.checkpoint.values import (
    BYTES_DUMPS,
    BYTES_LOADS,
    JUST_BYTES,
    encode_operator,
    encoder,
    subtask_header,
)
from reference_impl.serializers import MSGPACK, SerializerError
from reference_impl.snapshot import KeyedStateSnapshot, StateKind, SubtaskStateSnapshot, TtlValue

__all__ = ["VERSION", "write_subtask_state", "footer_index", "load_groups"]

VERSION = 3
_TAIL = struct.Struct(">II4s4s")  # index length, index crc32, file crc32, trailer magic


class _Large:
    """A ``[state, namespace, {key: value}]`` group holding a large list or map value: packed piece by
    piece, each large value from the encoding cache (:func:`_append_collection`)."""

    __slots__ = ("name", "ns", "per_key", "enc")

    def __init__(self, name: str, ns: Any, per_key: dict[Any, Any], enc: Callable[[Any], Any]) -> None:
        self.name, self.ns, self.per_key, self.enc = name, ns, per_key, enc


_CACHE_MIN = 32  # a list or map value of at least this many elements is packed once, then extended
_IMMUTABLE = frozenset((int, float, str, bytes, bool, type(None)))
_PAIRS = frozenset((tuple, TtlValue))


def _frozen(x: Any) -> bool:
    """Whether ``x`` can never change: an immutable built-in, or a tuple (a TTL pair, a tuple key) of
    such. Only such elements are cached: their encoding is a function of their identity."""
    t = type(x)
    return t in _IMMUTABLE or (t in _PAIRS and all(map(_frozen, x)))


def _state_groups(
    k: KeyedStateSnapshot, kg: int, encoders: dict[str, Any], large: frozenset[str] = frozenset()
) -> list[Any]:
    """A section's content: ``[state, namespace, {key: value}]`` per state and namespace. The maps are
    the snapshot's own dicts when values go in as they are (msgpack values; bytes values checked in
    bulk), so a key group is packed by one C call with no Python work per entry. A group of a state
    in ``large`` (list and map states, when the snapshot has an encoding cache) that holds a value of
    ``_CACHE_MIN`` elements or more is a :class:`_Large` instead."""
    groups: list[Any] = []
    for name, per_ns in k.key_groups[kg].items():
        state_enc = encoders[name]
        cached = name in large
        for ns, per_key in per_ns.items():
            enc = state_enc
            if cached and any(len(v) >= _CACHE_MIN for v in per_key.values()):
                groups.append(_Large(name, ns, per_key, enc))
                continue
            if enc is BYTES_DUMPS and set(map(type, per_key.values())) <= JUST_BYTES:
                enc = None  # exactly what the bytes serializer returns
            groups.append([name, ns, per_key if enc is None else {key: enc(v) for key, v in per_key.items()}])
    return groups


def _append_collection(
    buf: bytearray, v: Any, enc: Callable[[Any], Any], cache: dict[int, Any], used: set[int], pk: Any
) -> bool:
    """Append the packed encoding of the list or map ``v`` (``enc(v)``, a msgpack array of one row per
    element) to ``buf``, packing only the elements added since the cache last saw ``v``: the bytes
    are those of packing ``enc(v)`` in one call, as msgpack packs an array as its header followed by
    each element's own packing. The cache holds ``v`` itself (so its ``id`` is not reused), how many
    of its elements it packed, and their packed rows. An entry stands for "``v`` only grew since":
    every other change (an overwrite, a removal, expiry) drops it where it is made
    (:meth:`~reference_impl.state.handles.StateTable.rewrote`), so ``v`` is re-packed whole, and no
    element is compared here (O(what was appended), not O(``v``)). False when ``v`` holds an
    element that is not :func:`_frozen` (a mutable value may change without its state knowing)."""
    n = len(v)
    is_map = type(v) is dict
    e: list[Any] | None = cache.get(id(v))
    start = 0
    if e is not None and e[0] is v and n >= e[1]:
        start = e[1]
    else:
        e = None
    if start < n:
        if is_map:
            if start:  # the last n - start entries, read from the end: O(what was appended)
                tail = list(islice(reversed(v.items()), n - start))
                tail.reverse()
                part: Any = dict(tail)
            else:
                part = v
            ok = all(map(_frozen, part)) and all(map(_frozen, part.values()))
        else:
            part = v[start:] if start else list(v)
            ok = all(map(_frozen, part))
        rows = enc(part) if ok else None
        if rows is None:
            cache.pop(id(v), None)
            return False
        packed = pk.pack(rows)
        tail_bytes = memoryview(packed)[len(pk.pack_array_header(n - start)) :]
        if e is None:
            e = cache[id(v)] = [v, n, bytearray(tail_bytes)]
        else:
            e[1] = n
            e[2] += tail_bytes
    used.add(id(v))
    buf += pk.pack_array_header(n)
    buf += e[2]  # type: ignore[index]  # set above whenever start < n; start == n needs a hit
    return True


def _pack_pieces(groups: list[Any], cache: dict[int, Any], used: set[int], pk: Any) -> bytearray:
    """A section holding :class:`_Large` groups, packed piece by piece into the bytes one
    ``pack(groups)`` call would give (a large value's from the cache)."""
    buf = bytearray(pk.pack_array_header(len(groups)))
    for g in groups:
        if type(g) is not _Large:
            buf += pk.pack(g)
            continue
        per_key, enc = g.per_key, g.enc
        buf += pk.pack_array_header(3)
        buf += pk.pack(g.name)
        buf += pk.pack(g.ns)
        buf += pk.pack_map_header(len(per_key))
        for key, v in per_key.items():
            buf += pk.pack(key)
            if len(v) < _CACHE_MIN or not _append_collection(buf, v, enc, cache, used, pk):
                buf += pk.pack(enc(v))
    return buf


def write_subtask_state(
    s: SubtaskStateSnapshot, write: Callable[[Any], object], binding: dict[str, Any] | None = None
) -> tuple[int, int]:
    """Serialize one subtask's state, handing each part to ``write`` as soon as it is encoded: key
    groups are packed one at a time into one reused buffer (passed as a memoryview valid only during
    the call), so a 1 GB state is neither held whole nor copied in memory. The file's crc32 follows
    from the sections' (:func:`crc32_combine`), not from another pass, once sections go to the writer
    thread (before that, small sections are checksummed once more in C, which costs less). ``binding`` (job and checkpoint
    id) goes into the header. Returns (file size, file crc32)."""
    header = msgpack.packb(subtask_header(s, binding), use_bin_type=True)
    head = PRE.pack(MAGIC, VERSION, len(header)) + header + U32.pack(crc(header))
    write(head)
    file_crc, size = crc(head), len(head)
    index: list[list[Any]] = []
    offset = 0

    def crc_and_write(view: Any) -> int:
        # in the writer thread: one call each for the whole section, as both release the GIL and every
        # return waits for the packing thread to let go of it
        c = zlib.crc32(view)
        write(view)
        return c & 0xFFFFFFFF

    def finish(sid: str | int, done: Future[int] | Done, view: memoryview, packer: Any) -> None:
        nonlocal file_crc, offset
        section_crc, n = done.result(), len(view)
        index.append([sid, offset, n, section_crc])
        if type(done) is Done:  # small, written in this thread: one more C pass beats the combine's
            file_crc = zlib.crc32(view, file_crc)  # Python arithmetic (a tenth of encoding small files)
        else:
            file_crc = crc32_combine(file_crc, section_crc, n)
        offset += n
        view.release()
        if packer is not None:
            packer.reset()

    # two packers: key group i+1 is packed (holding the GIL) while key group i is checksummed and
    # written by one writer thread, in order; the thread starts only once THREAD_FROM_BYTES were
    # written in the caller's thread (a small file is done sooner without one)
    writer: ThreadPoolExecutor | None = None
    inline = 0

    def submit(view: memoryview) -> Future[int] | Done:
        nonlocal writer, inline
        if writer is None and inline < THREAD_FROM_BYTES:
            inline += len(view)
            return Done(crc_and_write(view))
        if writer is None:
            writer = ThreadPoolExecutor(1, thread_name_prefix="state-writer")
        return writer.submit(crc_and_write, view)

    try:
        pending: tuple[str | int, Future[int] | Done, memoryview, Any] | None = None
        if s.keyed is not None:
            k = s.keyed
            encoders = {name: encoder(m) for name, m in k.states.items()}
            packers = (MSGPACK.packer(), MSGPACK.packer())
            cache = k.encoded
            large: frozenset[str] = frozenset()
            used: set[int] = set()
            pieces = None
            if cache is not None:
                large = frozenset(
                    n for n, m in k.states.items() if StateKind(m.kind) in (StateKind.LIST, StateKind.MAP)
                )
                pieces = MSGPACK.packer_of_values()
            for i, kg in enumerate(sorted(k.key_groups)):
                packer: Any = packers[i % 2]
                try:
                    groups = _state_groups(k, kg, encoders, large)
                    if large and any(type(g) is _Large for g in groups):
                        view = memoryview(_pack_pieces(groups, cache, used, pieces))  # type: ignore[arg-type]  # large: a cache
                        packer = None
                    else:
                        packer.pack(groups)
                        view = packer.getbuffer()
                except (TypeError, OverflowError, ValueError) as e:
                    raise SerializerError(f"msgpack serializer: key group {kg}: {e}") from e
                done = submit(view)
                if pending is not None:
                    finish(*pending)
                pending = (kg, done, view, packer)
            if cache:  # forget values this snapshot no longer holds
                for gone in [i for i in cache if i not in used]:
                    del cache[gone]
        if s.operator is not None:
            view = memoryview(encode_operator(s.operator))
            done = submit(view)
            if pending is not None:
                finish(*pending)
            pending = (OPERATOR, done, view, None)
        if pending is not None:
            finish(*pending)
    finally:
        if writer is not None:
            writer.shutdown()
    footer = msgpack.packb(index, use_bin_type=True)
    tail = footer + U32.pack(len(footer)) + U32.pack(crc(footer))
    file_crc = zlib.crc32(tail, file_crc)
    trailer = U32.pack(file_crc) + TRAILER_MAGIC
    write(tail + trailer)
    size += offset + len(tail) + len(trailer)
    return size, zlib.crc32(trailer, file_crc) & 0xFFFFFFFF


def footer_index(fh: BinaryIO, name: str, h: Header) -> tuple[Any, int, int]:
    """(index, body length, footer size): the index from the checksummed footer, whose length is
    checked against the file's size before it is read."""
    if "index" in h.plain:
        raise CorruptStateFileError(f"{name}: header does not match format version {VERSION}")
    size = h.size
    if size < h.body_start + _TAIL.size:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({size} bytes)")
    fh.seek(size - _TAIL.size)
    flen, fcrc, _, magic = _TAIL.unpack(fh.read(_TAIL.size))
    start = size - _TAIL.size - flen
    if magic != TRAILER_MAGIC or start < h.body_start:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({size} bytes)")
    fh.seek(start)
    footer = fh.read(flen)
    if crc(footer) != fcrc:
        raise CorruptStateFileError(f"{name}: index checksum mismatch (the file is damaged)")
    try:
        index = msgpack.unpackb(footer, raw=False, strict_map_key=False)
    except Exception as e:
        raise CorruptStateFileError(f"{name}: unreadable index: {e}") from None
    return index, start - h.body_start, size - start


def load_groups(groups: Any, per_state: dict[str, dict[Any, dict[Any, Any]]], decoders: dict) -> None:
    """A section (``[state, namespace, {key: value}]`` groups) into ``per_state``: the decoded maps
    are taken as they are unless the state's values need decoding."""
    if not isinstance(groups, list):
        raise ValueError(f"section is a {type(groups).__name__}, not a list")
    for st_name, ns, m in groups:
        dec = decoders[st_name]
        if not isinstance(m, dict):
            raise ValueError(f"state {st_name!r}: entries are a {type(m).__name__}, not a map")
        per_ns = per_state.setdefault(st_name, {})
        if ns in per_ns:
            raise ValueError(f"state {st_name!r} namespace {ns!r:.40} appears twice in one key group")
        if dec is BYTES_LOADS and set(map(type, m.values())) <= JUST_BYTES:
            dec = None  # msgpack decoded them as bytes already: checked in bulk
        per_ns[ns] = m if dec is None else {k: dec(v) for k, v in m.items()}
