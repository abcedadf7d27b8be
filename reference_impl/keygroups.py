"""Key groups, bit-exact with Flink's ``KeyGroupRangeAssignment`` and ``MathUtils.murmurHash``.

A key's key group is ``murmur_hash(java_hash(key)) % max_parallelism``; a subtask owns a contiguous,
inclusive range of key groups. Keyed state is partitioned, snapshotted and rescaled by key group, so
these functions must agree with Flink to the bit: ``java_hash`` reproduces Java's ``hashCode`` of the
key as Flink sees it (``String``, ``Integer``/``Long``, ``Boolean``, ``Double``, ``TupleN``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mmh3
import numpy as np

__all__ = [
    "UPPER_BOUND_MAX_PARALLELISM",
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "UnsupportedKeyError",
    "java_hash",
    "murmur_hash",
    "assign_to_key_group",
    "compute_key_group_for_key_hash",
    "assign_key_to_parallel_operator",
    "compute_operator_index_for_key_group",
    "compute_key_group_range_for_operator_index",
    "compute_default_max_parallelism",
    "check_parallelism",
    "assign_to_key_groups",
    "java_hashes",
    "murmur_hashes",
]

UPPER_BOUND_MAX_PARALLELISM = 1 << 15
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7

_INT_MIN = -(2**31)
_INT_MAX = 2**31 - 1
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_M32 = 0xFFFFFFFF


class UnsupportedKeyError(TypeError):
    """A key whose Java hash code statechaos cannot reproduce (None, or an unsupported type)."""


def _int32(v: int) -> int:
    v &= _M32
    return v - (1 << 32) if v & 0x80000000 else v


def _long_hash(v: int) -> int:
    """Java ``Long.hashCode``: ``(int)(v ^ (v >>> 32))`` of a signed 64-bit value."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return _int32(u ^ (u >> 32))


def _big_integer_hash(v: int) -> int:
    """Java ``BigInteger.hashCode``: fold the big-endian 32-bit magnitude words, times the signum."""
    mag = abs(v)
    h = 0
    words = []
    while mag:
        words.append(mag & _M32)
        mag >>= 32
    for w in reversed(words):
        h = (31 * h + w) & _M32
    return _int32(h * (1 if v > 0 else -1))


def _string_hash(s: str) -> int:
    """Java ``String.hashCode`` over UTF-16 code units (a non-BMP character counts as two units)."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _M32
    else:
        data = s.encode("utf-16-le", "surrogatepass")
        for (unit,) in struct.iter_unpack("<H", data):
            h = (31 * h + unit) & _M32
    return _int32(h)


def _double_hash(f: float) -> int:
    """Java ``Double.hashCode``: ``doubleToLongBits`` (one canonical NaN), high word xor low word."""
    if math.isnan(f):
        bits = 0x7FF8000000000000
    else:
        (bits,) = struct.unpack("<Q", struct.pack("<d", f))
    return _int32(bits ^ (bits >> 32))


def java_hash(key: Any) -> int:
    """Java ``hashCode()`` of ``key`` as Flink would see it, as a signed int32.

    ``str`` -> ``String``; ``bool`` -> ``Boolean`` (1231/1237); ``int`` -> ``Integer`` when it fits
    int32, else ``Long``, else ``BigInteger``; ``float`` -> ``Double``; ``tuple`` -> Flink's ``TupleN``
    (``31 * h + h(field)`` folded left, ``None`` fields count 0); ``bytes`` -> ``Arrays.hashCode(byte[])``
    (signed bytes; Flink refuses arrays as keys, this is statechaos's documented stable rule).
    ``None`` and any other type raise :class:`UnsupportedKeyError`; Python's salted ``hash()`` is never used.
    """
    if isinstance(key, str):
        return _string_hash(key)
    if isinstance(key, bool):
        return 1231 if key else 1237
    if isinstance(key, int):
        if _INT_MIN <= key <= _INT_MAX:
            return int(key)
        if _LONG_MIN <= key <= _LONG_MAX:
            return _long_hash(key)
        return _big_integer_hash(key)
    if isinstance(key, float):
        return _double_hash(key)
    if isinstance(key, tuple):
        h = 0
        for field in key:
            h = (31 * h + (0 if field is None else java_hash(field))) & _M32
        return _int32(h)
    if isinstance(key, bytes | bytearray):
        h = 1
        for b in key:
            h = (31 * h + (b - 256 if b > 127 else b)) & _M32
        return _int32(h)
    if key is None:
        raise UnsupportedKeyError("key is None: Flink keys must not be null (KeyGroupRangeAssignment)")
    if isinstance(key, np.integer):
        return java_hash(int(key))
    if isinstance(key, np.floating):
        return java_hash(float(key))
    raise UnsupportedKeyError(
        f"unsupported key type {type(key).__name__!r} ({key!r}): use str, int, bool, float, bytes or a tuple of them"
    )


def murmur_hash(code: int) -> int:
    """Flink ``MathUtils.murmurHash``: MurmurHash3_x86_32 of the int's 4 little-endian bytes, seed 0,
    made non-negative (``Integer.MIN_VALUE`` maps to 0, not to itself as ``abs`` would)."""
    h = mmh3.hash(struct.pack("<i", _int32(code)), 0, signed=True)
    if h >= 0:
        return h
    return -h if h != _INT_MIN else 0


def check_parallelism(max_parallelism: int, parallelism: int | None = None) -> None:
    """Raise ``ValueError`` unless ``0 < parallelism <= max_parallelism <= 32768``."""
    if not isinstance(max_parallelism, int) or isinstance(max_parallelism, bool):
        raise ValueError(f"max_parallelism must be an int, got {max_parallelism!r}")
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max_parallelism={max_parallelism} is out of range: it must be in [1, {UPPER_BOUND_MAX_PARALLELISM}]"
        )
    if parallelism is None:
        return
    if not isinstance(parallelism, int) or isinstance(parallelism, bool):
        raise ValueError(f"parallelism must be an int, got {parallelism!r}")
    if parallelism <= 0:
        raise ValueError(f"parallelism={parallelism} must be positive")
    if parallelism > max_parallelism:
        raise ValueError(
            f"parallelism={parallelism} exceeds max_parallelism={max_parallelism}: a key group cannot be split"
        )


def compute_key_group_for_key_hash(key_hash: int, max_parallelism: int) -> int:
    """Key group of an already computed Java hash code: ``murmur_hash(key_hash) % max_parallelism``."""
    check_parallelism(max_parallelism)
    return murmur_hash(key_hash) % max_parallelism


def assign_to_key_group(key: Any, max_parallelism: int) -> int:
    """Key group of ``key`` for ``max_parallelism`` (Flink's ``assignToKeyGroup``)."""
    return compute_key_group_for_key_hash(java_hash(key), max_parallelism)


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Index of the subtask that owns ``key_group``: ``key_group * parallelism // max_parallelism``."""
    check_parallelism(max_parallelism, parallelism)
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key_group={key_group} is outside [0, {max_parallelism})")
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(key: Any, max_parallelism: int, parallelism: int) -> int:
    """Index of the subtask that owns ``key``."""
    check_parallelism(max_parallelism, parallelism)
    return compute_operator_index_for_key_group(
        max_parallelism, parallelism, assign_to_key_group(key, max_parallelism)
    )


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """An inclusive range ``[start, end]`` of key groups; empty when ``end < start`` (Flink's EMPTY is 0..-1)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"KeyGroupRange start={self.start} must be >= 0")
        if self.end < self.start - 1:
            raise ValueError(f"KeyGroupRange end={self.end} is below start-1={self.start - 1}")

    @classmethod
    def empty(cls) -> KeyGroupRange:
        return cls(0, -1)

    @classmethod
    def of(cls, start: int, end: int) -> KeyGroupRange:
        return cls(start, end) if end >= start else cls.empty()

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __bool__(self) -> bool:
        return self.end >= self.start

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        """The key groups in both ranges (possibly empty)."""
        return KeyGroupRange.of(max(self.start, other.start), min(self.end, other.end))

    def __repr__(self) -> str:
        return f"KeyGroupRange({self.start}..{self.end})" if self else "KeyGroupRange(empty)"


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The key groups owned by subtask ``operator_index``:
    ``[(i*max_p + p - 1) // p, ((i+1)*max_p - 1) // p]``."""
    check_parallelism(max_parallelism, parallelism)
    if not 0 <= operator_index < parallelism:
        raise ValueError(f"operator_index={operator_index} is outside [0, {parallelism})")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def _round_up_to_power_of_two(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def compute_default_max_parallelism(parallelism: int) -> int:
    """Flink's default max parallelism: ``min(max(next_pow2(p + p // 2), 128), 32768)``."""
    if not isinstance(parallelism, int) or parallelism <= 0:
        raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
    if parallelism > UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"parallelism={parallelism} exceeds the upper bound {UPPER_BOUND_MAX_PARALLELISM}")
    return min(
        max(_round_up_to_power_of_two(parallelism + parallelism // 2), DEFAULT_LOWER_BOUND_MAX_PARALLELISM),
        UPPER_BOUND_MAX_PARALLELISM,
    )


# ---------------------------------------------------------------- vectorised (bulk) path


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur_hashes(codes: np.ndarray) -> np.ndarray:
    """:func:`murmur_hash` over an array of int32 hash codes, as int64 non-negative values."""
    with np.errstate(over="ignore"):
        k = np.asarray(codes).astype(np.int64).astype(np.uint32)
        k = k * np.uint32(0xCC9E2D51)
        k = _rotl32(k, 15)
        k = k * np.uint32(0x1B873593)
        h = _rotl32(k, 13)  # seed 0: h = 0 ^ k
        h = h * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(4)
        h ^= h >> np.uint32(16)
        h = h * np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h = h * np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    signed = h.view(np.int32).astype(np.int64)
    out = np.abs(signed)
    out[signed == _INT_MIN] = 0
    return out


def java_hashes(keys: np.ndarray | Sequence[Any] | Iterable[Any]) -> np.ndarray:
    """Java hash codes of many keys as an int32 array. Integer arrays take a vectorised path
    (Integer within int32, Long beyond); anything else goes key by key through :func:`java_hash`."""
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        if keys.dtype.kind == "u" and keys.dtype.itemsize >= 8 and keys.size and int(keys.max()) > _LONG_MAX:
            return np.fromiter((java_hash(int(k)) for k in keys), dtype=np.int32, count=keys.size)
        v = keys.astype(np.int64)
        u = v.view(np.uint64)
        with np.errstate(over="ignore"):
            long_hash = (u ^ (u >> np.uint64(32))).astype(np.uint32).view(np.int32)
        fits = (v >= _INT_MIN) & (v <= _INT_MAX)
        return np.where(fits, v.astype(np.int32), long_hash).astype(np.int32)
    if isinstance(keys, np.ndarray) and keys.dtype.kind == "b":
        return np.where(keys, 1231, 1237).astype(np.int32)
    seq = keys if isinstance(keys, Sequence | np.ndarray) else list(keys)
    return np.fromiter((java_hash(k) for k in seq), dtype=np.int32, count=len(seq))


def assign_to_key_groups(
    keys: np.ndarray | Sequence[Any] | Iterable[Any], max_parallelism: int
) -> np.ndarray:
    """Bulk :func:`assign_to_key_group`: key groups of many keys (numpy int arrays or lists of str,
    or any keys) as an int64 array, equal element by element to the scalar function."""
    check_parallelism(max_parallelism)
    return murmur_hashes(java_hashes(keys)) % max_parallelism
