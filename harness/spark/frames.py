"""Wire frames of every link: a 4-byte big-endian length, a msgpack body and, once a link is
authenticated, a 32-byte HMAC-SHA256 tag over (sequence number, body).

Frames are decoded from a byte stream (any split, any coalescing), so a byte-stream proxy such as
Toxiproxy (slicer, latency, bandwidth toxics) may sit between sender and receiver. The sequence
number is implicit (each side counts the frames of one direction), so a frame replayed, dropped,
reordered or copied from another connection fails its tag. After decoding, the top-level message is a
tuple again; nested sequences (records) come back as lists.
"""

from __future__ import annotations

import hmac
import struct
from typing import Any

import msgpack

__all__ = [
    "TransportError",
    "TransportClosed",
    "FrameDecoder",
    "FrameSealer",
    "encode_frame",
    "MAX_FRAME_BYTES",
    "TAG_BYTES",
]

_HEADER = struct.Struct(">I")
_SEQ = struct.Struct(">Q")
MAX_FRAME_BYTES = 256 * 1024 * 1024
TAG_BYTES = 32


class TransportError(RuntimeError):
    """A protocol violation (bad frame, failed authentication) or a connection that cannot be made."""


class TransportClosed(ConnectionError):
    """The peer closed the connection and every message it sent has been delivered."""


def _pack(msg: Any) -> bytes:
    return msgpack.packb(msg, use_bin_type=True)


def _tag(key: bytes, seq: int, body: bytes) -> bytes:
    return hmac.digest(key, _SEQ.pack(seq) + body, "sha256")


def encode_frame(msg: Any) -> bytes:
    """One unauthenticated frame: length header + msgpack body (only the handshake sends these)."""
    body = _pack(msg)
    if len(body) > MAX_FRAME_BYTES:
        raise TransportError(f"frame of {len(body)} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


class FrameSealer:
    """Encodes the frames of one direction of an authenticated connection: each carries the tag of
    its sequence number and body under the direction's session key (``None``: untagged frames, for
    measuring what the tags cost). Not thread-safe."""

    def __init__(self, key: bytes | None) -> None:
        self._key = key
        self.seq = 0

    def seal(self, msg: Any) -> bytes:
        body = _pack(msg)
        if len(body) + TAG_BYTES > MAX_FRAME_BYTES:
            raise TransportError(f"frame of {len(body)} bytes exceeds the limit of {MAX_FRAME_BYTES}")
        if self._key is None:
            return _HEADER.pack(len(body)) + body
        tag = _tag(self._key, self.seq, body)
        self.seq += 1
        return _HEADER.pack(len(body) + TAG_BYTES) + body + tag


def _as_message(obj: Any) -> Any:
    return tuple(obj) if isinstance(obj, list) else obj


def _unpack(body: bytes) -> Any:
    return _as_message(msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=False))


class FrameDecoder:
    """Incremental frame decoder: feed it bytes in any split, get whole messages back in order.

    ``max_frame`` bounds what a peer may announce (small before authentication, so an unknown client
    cannot make a listener buffer megabytes). With ``open_with(key)`` every later frame must carry a
    valid tag of the next sequence number; one that does not raises :class:`TransportError`.
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame
        self._key: bytes | None = None
        self.seq = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means a truncated frame)."""
        return len(self._buf)

    @property
    def authenticated(self) -> bool:
        return self._key is not None

    def open_with(self, key: bytes, max_frame: int = MAX_FRAME_BYTES) -> None:
        """From now on, verify every frame's tag under ``key`` (the peer's direction key)."""
        self._key, self.max_frame, self.seq = key, max_frame, 0

    def feed(self, data: bytes, max_messages: int | None = None) -> list[Any]:
        """Whole messages decoded so far; ``max_messages`` leaves later frames buffered (the
        handshake reads one frame, then switches to authenticated frames)."""
        self._buf += data
        out: list[Any] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= 4 and (max_messages is None or len(out) < max_messages):
            (n,) = _HEADER.unpack_from(buf, pos)
            if n > self.max_frame:
                raise TransportError(f"incoming frame announces {n} bytes (limit {self.max_frame})")
            if len(buf) - pos - 4 < n:
                break
            if self._key is None:
                out.append(_unpack(bytes(buf[pos + 4 : pos + 4 + n])))
            else:
                if n < TAG_BYTES:
                    raise TransportError(f"frame of {n} bytes has no room for its authentication tag")
                body = bytes(buf[pos + 4 : pos + 4 + n - TAG_BYTES])
                tag = bytes(buf[pos + 4 + n - TAG_BYTES : pos + 4 + n])
                if not hmac.compare_digest(tag, _tag(self._key, self.seq, body)):
                    raise TransportError(
                        f"frame {self.seq} failed authentication (replayed, reordered or forged)"
                    )
                self.seq += 1
                out.append(_unpack(body))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out
