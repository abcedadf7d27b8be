"""Explicit, safe value serializers for state and checkpoints.

A checkpoint is data: it is written with a named serializer and read back only by a serializer with
the same identity, so restoring with an incompatible serializer is a clear error instead of silently
wrong state. Pickle exists only as an opt-in (``allow_pickle`` / ``STATECHAOS_ALLOW_PICKLE=1``) because
unpickling a checkpoint runs arbitrary code.
"""

from __future__ import annotations

import os
import pickle
import struct
import threading
from typing import Any, Protocol, runtime_checkable

import msgpack

from reference_impl.errors import InputError

__all__ = [
    "Serializer",
    "SerializerError",
    "IncompatibleSerializerError",
    "MsgpackSerializer",
    "IntSerializer",
    "StrSerializer",
    "BytesSerializer",
    "PickleSerializer",
    "MSGPACK",
    "INT",
    "STR",
    "BYTES",
    "get_serializer",
    "register_serializer",
    "check_compatible",
]


class SerializerError(InputError, ValueError):
    """A value cannot be written or read by its serializer."""


class IncompatibleSerializerError(SerializerError):
    """State written with one serializer is being restored with another."""


@runtime_checkable
class Serializer(Protocol):
    """Turns values into bytes and back. ``identity`` is stored in checkpoints and must match on restore."""

    @property
    def identity(self) -> str: ...

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


_TUPLE_EXT = 1
_SET_EXT = 2


_new_tuple = tuple.__new__  # builds an ExtType without its Python-level __new__ (checks the fields
# that are constant here): 40% of packing a tuple, once per namespace and map key of a checkpoint


_IMMUTABLE_ITEMS = frozenset((int, float, str, bytes, bool, type(None)))
_MEMO_MAX = 1 << 16
# a tuple's extension by the tuple's identity: a checkpoint packs the same namespace and map-key
# tuples (a session window's) once per state and again at every checkpoint while they live. Keyed
# by id() with the tuple itself kept, so a hit is the very object (never an equal one of other
# types, 1 == 1.0 == True); only tuples of immutable built-ins, whose encoding cannot change.
_PACKED: dict[int, tuple[tuple[Any, ...], msgpack.ExtType]] = {}
# a tuple decoded from its extension's bytes (the same bytes are the same tuple of immutables)
_UNPACKED: dict[bytes, tuple[Any, ...]] = {}


def _default(obj: Any) -> Any:
    if type(obj) is tuple:
        hit = _PACKED.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        ext = _new_tuple(msgpack.ExtType, (_TUPLE_EXT, _packb(list(obj))))
        if set(map(type, obj)) <= _IMMUTABLE_ITEMS:
            if len(_PACKED) >= _MEMO_MAX:
                _PACKED.clear()
            _PACKED[id(obj)] = (obj, ext)
        return ext
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE_EXT, _packb(list(obj)))
    if isinstance(obj, frozenset | set):
        return msgpack.ExtType(_SET_EXT, _packb(sorted(obj, key=repr)))
    raise TypeError(f"msgpack serializer cannot write a {type(obj).__name__}: {obj!r}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE_EXT:
        hit = _UNPACKED.get(data)
        if hit is not None:
            return hit
        t = tuple(_unpackb(data))
        if set(map(type, t)) <= _IMMUTABLE_ITEMS:
            if len(_UNPACKED) >= _MEMO_MAX:
                _UNPACKED.clear()
            _UNPACKED[data] = t
        return t
    if code == _SET_EXT:
        return frozenset(_unpackb(data))
    return msgpack.ExtType(code, data)


def _new_packer() -> msgpack.Packer:
    return msgpack.Packer(default=_default, use_bin_type=True, strict_types=True)


_local = threading.local()  # one reused packer per thread: building one per value was a tenth of a
# checkpoint's encoding; a packer resets itself after every pack() (also when it raises)


def _packb(value: Any) -> bytes:
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = _new_packer()
    _local.packer = None  # taken: a nested call (a tuple's or set's items, from _default) builds its own
    try:
        return packer.pack(value)
    finally:
        _local.packer = packer


def _list_hook(items: list) -> list:
    return items


def _unpackb(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False, use_list=True)


class MsgpackSerializer:
    """General-purpose serializer: None, bool, int (64-bit), float, str, bytes, list, dict, tuple, set.

    Tuples and sets round-trip as themselves (msgpack extension types), so tuple keys stay hashable.
    """

    identity = "msgpack"

    def dumps(self, value: Any) -> bytes:
        try:
            return _packb(value)
        except (TypeError, OverflowError, ValueError) as e:
            raise SerializerError(f"msgpack serializer: {e}") from e

    def loads(self, data: bytes | memoryview) -> Any:
        try:
            return _unpackb(data)
        except Exception as e:  # msgpack raises several unrelated types on damaged input
            raise SerializerError(f"msgpack serializer: cannot decode {len(data)} bytes: {e}") from e

    def packer_of_values(self) -> msgpack.Packer:
        """A packer whose ``pack(value)`` returns exactly the bytes :meth:`dumps` returns, for a caller
        that packs many values in one thread (no per-value lookup of the thread's packer); errors are
        msgpack's own (TypeError, OverflowError, ValueError), not wrapped."""
        return _new_packer()

    def packer(self) -> msgpack.Packer:
        """A reusable packer writing exactly what :meth:`dumps` writes, without resetting between
        ``pack`` calls: large outputs are read with ``getbuffer()`` (no copy) and its buffer is reused."""
        return msgpack.Packer(default=_default, use_bin_type=True, strict_types=True, autoreset=False)

    def __repr__(self) -> str:
        return "MsgpackSerializer()"


class IntSerializer:
    """Signed 64-bit integers, 8 bytes big-endian (like Flink's LongSerializer)."""

    identity = "int64"
    _fmt = struct.Struct(">q")

    def dumps(self, value: Any) -> bytes:
        if not isinstance(value, int) or isinstance(value, bool):
            raise SerializerError(f"int64 serializer: expected int, got {type(value).__name__}")
        try:
            return self._fmt.pack(value)
        except struct.error as e:
            raise SerializerError(f"int64 serializer: {value} does not fit 64 bits") from e

    def loads(self, data: bytes) -> Any:
        if len(data) != 8:
            raise SerializerError(f"int64 serializer: expected 8 bytes, got {len(data)}")
        return self._fmt.unpack(data)[0]


class StrSerializer:
    """UTF-8 strings."""

    identity = "str"

    def dumps(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise SerializerError(f"str serializer: expected str, got {type(value).__name__}")
        return value.encode("utf-8", "surrogatepass")

    def loads(self, data: bytes) -> Any:
        return bytes(data).decode("utf-8", "surrogatepass")


class BytesSerializer:
    """Raw bytes, unchanged."""

    identity = "bytes"

    def dumps(self, value: Any) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SerializerError(f"bytes serializer: expected bytes, got {type(value).__name__}")
        return bytes(value)

    def loads(self, data: bytes) -> Any:
        return bytes(data)


def pickle_allowed() -> bool:
    return os.environ.get("STATECHAOS_ALLOW_PICKLE", "") in ("1", "true", "yes")


class PickleSerializer:
    """Arbitrary Python objects. Reading is refused unless the user opted in, because unpickling a
    checkpoint executes code from it."""

    identity = "pickle"

    def __init__(self, allow_pickle: bool = False) -> None:
        self.allow_pickle = allow_pickle

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=5)

    def loads(self, data: bytes) -> Any:
        if not (self.allow_pickle or pickle_allowed()):
            raise SerializerError(
                "refusing to unpickle checkpoint data: pickle runs code from the file. Opt in with "
                "PickleSerializer(allow_pickle=True) or STATECHAOS_ALLOW_PICKLE=1 if you trust it"
            )
        return pickle.loads(data)


MSGPACK = MsgpackSerializer()
INT = IntSerializer()
STR = StrSerializer()
BYTES = BytesSerializer()

_REGISTRY: dict[str, Serializer] = {s.identity: s for s in (MSGPACK, INT, STR, BYTES, PickleSerializer())}


def register_serializer(serializer: Serializer) -> None:
    """Make a user serializer resolvable by its identity when checkpoints are read back."""
    _REGISTRY[serializer.identity] = serializer


def get_serializer(identity: str) -> Serializer:
    """The serializer registered under ``identity``; a clear error when none is."""
    try:
        return _REGISTRY[identity]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise SerializerError(f"unknown serializer {identity!r} (known: {known})") from None


def check_compatible(state_name: str, what: str, written: str, restoring: str) -> None:
    """Raise :class:`IncompatibleSerializerError` naming the state if two serializer identities differ."""
    if written != restoring:
        raise IncompatibleSerializerError(
            f"state {state_name!r}: {what} was written with serializer {written!r} "
            f"but is restored with {restoring!r}"
        )
