"""The container every state file version shares: magic, version, checksummed header, sections,
trailer. Reads here never trust a length beyond the file's real size, and checks stream the file in
fixed-size chunks, so a damaged or oversized file costs no more memory than an intact one.

Layout (all integers big-endian)::

    magic "SCST" | version u16 | header length u32 | header (msgpack) | header crc32 u32
    section 0 | section 1 | ...
    ... | file crc32 u32 | magic "TSCS"      (crc32 of everything before it)

Where the section index lives and how a section decodes is each version's business (``format_v1``,
``format_v2``, ``format_v3``); :func:`check_sections` holds the structure rules they all obey.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgpack

from reference_impl.keygroups import KeyGroupRange

__all__ = [
    "MAGIC",
    "TRAILER_MAGIC",
    "OPERATOR",
    "CorruptStateFileError",
    "Header",
    "file_size",
    "read_header",
    "check_sections",
    "verify_stream",
    "verify_file",
    "prefetched",
    "crc",
    "crc32_combine",
]

MAGIC, TRAILER_MAGIC = b"SCST", b"TSCS"
OPERATOR = "operator"  # the section id of operator state (key groups are ints)
PRE = struct.Struct(">4sHI")  # magic, version, header length
U32 = struct.Struct(">I")
CHUNK = 64 << 10  # bytes per read when a check streams a file: the whole memory a check needs
# below this many bytes a state file is written and read in the caller's thread: starting a helper
# thread costs more than the overlap of I/O and (de)coding saves on a small file
THREAD_FROM_BYTES = 1 << 20


class Done:
    """A result already computed, in the place of a ``Future`` (work done in the caller's thread)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class CorruptStateFileError(ValueError):
    """A state file is damaged (bad magic, version, checksum, length, structure or identity): it is
    never restored. The message starts with the file's path."""


def crc(data: Any) -> int:
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


def file_size(fh: BinaryIO) -> int:
    """The file's real size: the bound for every length read from it."""
    try:
        return os.fstat(fh.fileno()).st_size
    except (AttributeError, io.UnsupportedOperation, OSError):
        here = fh.tell()
        size = fh.seek(0, io.SEEK_END)
        fh.seek(here)
        return size


@dataclass
class Header:
    plain: dict[str, Any]
    body_start: int
    version: int
    size: int  # the file's real size


def read_header(fh: BinaryIO, name: str, readable: tuple[int, ...]) -> Header:
    """The verified header at the start of ``fh``; its length is checked against the file's size
    before anything is read."""
    size = file_size(fh)
    fh.seek(0)
    pre = fh.read(PRE.size)
    if len(pre) != PRE.size:
        raise CorruptStateFileError(f"{name}: truncated before the header")
    magic, version, hlen = PRE.unpack(pre)
    if magic != MAGIC:
        raise CorruptStateFileError(f"{name}: not a statechaos state file (magic {magic!r})")
    if version not in readable:
        raise CorruptStateFileError(
            f"{name}: format version {version}, this statechaos reads " + " and ".join(map(str, readable))
        )
    if PRE.size + hlen + 4 + 8 > size:
        raise CorruptStateFileError(
            f"{name}: header length {hlen} reaches past the file's end ({size} bytes)"
        )
    header = fh.read(hlen)
    hcrc = fh.read(4)
    if len(header) != hlen or len(hcrc) != 4:
        raise CorruptStateFileError(f"{name}: truncated header")
    if U32.unpack(hcrc)[0] != crc(header):
        raise CorruptStateFileError(f"{name}: header checksum mismatch")
    try:
        plain = msgpack.unpackb(header, raw=False, strict_map_key=False)
    except Exception as e:
        raise CorruptStateFileError(f"{name}: unreadable header: {e}") from None
    if not isinstance(plain, dict):
        raise CorruptStateFileError(f"{name}: header is a {type(plain).__name__}, not a map")
    return Header(plain, PRE.size + hlen + 4, version, size)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_sections(
    index: Any, name: str, body_end: int, key_groups: KeyGroupRange | None, has_operator: bool
) -> list[tuple[Any, int, int, int]]:
    """The index ``[[section id, offset, length, crc32], ...]`` (offsets relative to the body, which
    ends ``body_end`` bytes in) if its structure is sound: every section a key group of
    ``key_groups`` or the operator section, none twice, sections in order, back to back, neither
    overlapping nor leaving a gap, covering the body exactly; the operator section present exactly
    when the header says so."""
    if not isinstance(index, list):
        raise CorruptStateFileError(f"{name}: section index is a {type(index).__name__}, not a list")
    out: list[tuple[Any, int, int, int]] = []
    seen: set[Any] = set()
    at = 0
    for entry in index:
        if not (isinstance(entry, list) and len(entry) == 4 and all(_is_int(x) for x in entry[1:])):
            raise CorruptStateFileError(f"{name}: malformed section index entry {entry!r:.80}")
        sid, offset, length, section_crc = entry
        if sid != OPERATOR and not _is_int(sid):
            raise CorruptStateFileError(f"{name}: unknown section id {sid!r:.40}")
        if sid in seen:
            raise CorruptStateFileError(f"{name}: section {sid} appears twice")
        seen.add(sid)
        if _is_int(sid) and (key_groups is None or sid not in key_groups):
            raise CorruptStateFileError(
                f"{name}: key group {sid} is outside the file's key-group range {key_groups}"
            )
        if offset != at or length < 0:
            raise CorruptStateFileError(
                f"{name}: section {sid} at offset {offset} (+{length}) overlaps another or leaves a gap "
                f"(expected offset {at})"
            )
        at = offset + length
        out.append((sid, offset, length, section_crc))
    if at != body_end:
        raise CorruptStateFileError(
            f"{name}: sections cover {at} bytes, the file's body has {body_end} (sections outside the file)"
        )
    if has_operator != (OPERATOR in seen):
        raise CorruptStateFileError(f"{name}: the operator section does not match the header")
    return out


def verify_stream(fh: BinaryIO, name: str, size: int, expected_crc: int | None = None) -> None:
    """Check trailer magic and whole-file checksum (and, if given, the crc32 ``_metadata`` recorded)
    reading ``CHUNK`` bytes at a time: constant memory whatever the file's size."""
    if size < PRE.size + 12:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({size} bytes)")
    buf = memoryview(bytearray(min(CHUNK, size)))  # one buffer, reused: no allocation per chunk
    running, offset, left = 0, 0, size - 8
    while left:
        n = _read_into(fh, buf[: min(CHUNK, left)], offset)
        if not n:
            raise CorruptStateFileError(f"{name}: truncated while reading ({offset} of {size} bytes)")
        running = zlib.crc32(buf[:n], running)
        offset += n
        left -= n
    fh.seek(offset)
    tail = fh.read(8)
    if len(tail) != 8 or tail[4:] != TRAILER_MAGIC:
        raise CorruptStateFileError(f"{name}: truncated or missing trailer ({size} bytes)")
    if U32.unpack(tail[:4])[0] != running & 0xFFFFFFFF:
        raise CorruptStateFileError(f"{name}: file checksum mismatch (the file is damaged)")
    if expected_crc is not None and zlib.crc32(tail, running) & 0xFFFFFFFF != expected_crc:
        raise CorruptStateFileError(f"{name}: checksum mismatch (the file is damaged)")


def _read_into(fh: BinaryIO, view: memoryview, offset: int) -> int:
    try:
        return os.preadv(fh.fileno(), [view], offset)
    except (AttributeError, io.UnsupportedOperation):
        fh.seek(offset)
        return fh.readinto(view)  # type: ignore[attr-defined]  # BinaryIO lacks it; our files are buffered readers


def verify_file(data: bytes, name: str) -> None:
    """:func:`verify_stream` for bytes in memory."""
    verify_stream(io.BytesIO(data), name, len(data))


def prefetched(
    fh: BinaryIO, sections: list[tuple[Any, int, int, int]]
) -> Iterator[tuple[Any, int, int, memoryview, int]]:
    """``(sid, length, crc, data, crc of data)`` per section (absolute offsets), in order. With a real
    file, one reader thread reads and checksums section i+1 (both release the GIL) into the other of
    two buffers while the caller decodes section i (for a file of ``THREAD_FROM_BYTES`` or more);
    ``data`` is valid until the next item."""
    readers = (_SectionReader(fh), _SectionReader(fh))
    if readers[0].fd < 0 or len(sections) < 2 or sum(s[2] for s in sections) < THREAD_FROM_BYTES:
        for sid, offset, length, section_crc in sections:
            data, data_crc = readers[0].read_and_crc(offset, length)
            yield sid, length, section_crc, data, data_crc
        return

    def fetch(i: int) -> tuple[memoryview, int]:
        return readers[i % 2].read_and_crc(sections[i][1], sections[i][2])

    with ThreadPoolExecutor(1, thread_name_prefix="state-reader") as pool:
        nxt = pool.submit(fetch, 0)
        for i, (sid, _, length, section_crc) in enumerate(sections):
            data, data_crc = nxt.result()
            if i + 1 < len(sections):
                nxt = pool.submit(fetch, i + 1)  # into the other buffer: this one is being decoded
            yield sid, length, section_crc, data, data_crc
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
        from a GIL-releasing call waits for the decoding thread to let go of the GIL. Callers bound
        ``length`` by the file's size (:func:`check_sections`)."""
        if len(self.buf) < length:
            self.buf = bytearray(length)  # a new one: views of the old one may still be alive
        view = memoryview(self.buf)[:length]
        got = 0
        if self.fd < 0:
            self.fh.seek(offset)
        while got < length:
            rest = view[got:]
            n = os.preadv(self.fd, [rest], offset + got) if self.fd >= 0 else self.fh.readinto(rest)  # type: ignore[attr-defined]  # as above
            if not n:
                break
            got += n
        data = view[:got]
        return data, zlib.crc32(data) & 0xFFFFFFFF
