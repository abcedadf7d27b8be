"""Keyed state handles: they proxy a backend's table under the current key and namespace.

The plain handles store values as they are; the TTL handles (Flink's TTL decorators) store
``(value, timestamp)`` pairs (plain tuples: the cheapest thing Python builds; snapshots turn them
into :class:`~reference_impl.snapshot.TtlValue`) — one per value for Value/Reducing/Aggregating, one per element for List,
one per entry for Map — and check expiry on every access. Handles are deliberately lean: they run
once or more per record.

One module although long: every handle derives from ``_Handle``/``_MergingHandle`` and its TTL
variant differs from the plain one in a few lines; split, the expiry rules would be spread over files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from reference_impl.ttl import expiration_timestamp, is_expired

__all__ = [
    "StateTable",
    "ValueState",
    "TtlValueState",
    "ListState",
    "ReducingState",
    "AggregatingState",
    "MapState",
    "NoCurrentKeyError",
    "VOID_NAMESPACE",
]

VOID_NAMESPACE = "VoidNamespace"
_MISSING = object()


class NoCurrentKeyError(RuntimeError):
    """Keyed state was used before a current key was set."""


class StateTable:
    """One state's data: namespace -> key -> value, plus its descriptor and the TTL cleanup cursor.

    ``earliest`` serves incremental TTL cleanup of map state: (namespace, key) -> a lower bound of the
    expiration timestamps of that key's map, set when cleanup scans the map and lowered by every
    write, so cleanup skips a map whose earliest expiry is still ahead without reading its entries.

    ``encoded`` is the backend's encoding cache of large list and map values (the heap backend's, for
    ``checkpoint.format_v3``; None without one): an entry says its value only grew since it was
    packed, so whatever changes a stored list or map in place other than by appending to it calls
    :meth:`rewrote`, which drops the entry in O(1) (the next checkpoint re-packs the value whole).
    Lists need no call: every list change but ``add``/``add_all`` stores a new list."""

    __slots__ = ("descriptor", "data", "cleanup_cursor", "earliest", "encoded")

    def __init__(self, descriptor: Any, encoded: dict[int, Any] | None = None) -> None:
        self.descriptor = descriptor
        self.data: dict[Any, dict[Any, Any]] = {}
        self.cleanup_cursor: Iterator[tuple[Any, Any]] | None = None
        self.earliest: dict[tuple[Any, Any], int] | None = {}
        self.encoded = encoded

    def rewrote(self, value: Any) -> None:
        """``value`` (a stored list or map) was changed other than by appending: its cached encoding
        no longer holds."""
        cache = self.encoded
        if cache:
            cache.pop(id(value), None)


class _Handle:
    # slots: attribute loads on the per-record path are plain slot reads, not dict lookups
    __slots__ = (
        "_b", "_t", "_name", "_ns", "_m", "_ttl", "_ttl_ms", "_on_read", "_return_expired",
        "_cleanup_size", "_accesses", "_clock",
    )  # fmt: skip

    def __init__(self, backend: Any, table: StateTable, namespace: Any = VOID_NAMESPACE) -> None:
        self._b = backend
        self._t = table
        self._name = table.descriptor.name
        self.set_current_namespace(namespace)
        ttl = table.descriptor.ttl_config
        self._ttl = ttl
        self._ttl_ms = 0
        self._on_read = self._return_expired = False
        self._cleanup_size = self._accesses = 0
        self._clock = backend.time_provider.now_ms
        if ttl is not None:
            self._ttl_ms = ttl.ttl_ms
            self._on_read = ttl.update_on_read
            self._return_expired = ttl.return_expired
            inc = ttl.incremental_cleanup
            self._cleanup_size = inc.cleanup_size if inc is not None else 0

    def set_current_namespace(self, namespace: Any) -> None:
        self._ns = namespace
        m = self._t.data.get(namespace)
        if m is None:
            m = self._t.data[namespace] = {}
        self._m = m

    def _key(self) -> Any:
        k = self._b.current_key
        if k is None:
            raise NoCurrentKeyError(f"state {self._name!r} used before set_current_key()")
        return k

    def clear(self) -> None:
        self._m.pop(self._key(), None)

    # -------------------------------------------------------------- TTL helpers

    def _now(self) -> int:
        if self._cleanup_size:
            # amortised: every 32nd access cleans 32 accesses' worth of entries in one tight loop
            self._accesses += 1
            if self._accesses >= 32:
                self._accesses = 0
                self._b.incremental_cleanup(self._t, self._cleanup_size * 32)
        return self._clock()

    def _expired(self, tv: tuple[Any, int], now: int) -> bool:
        return is_expired(tv[1], self._ttl_ms, now)


class ValueState(_Handle):
    """A single value per key; ``value()`` is the descriptor's default when empty.

    The hot path of every keyed operator (a read and an update per record), so it is lean: a TTL
    state gets the :class:`TtlValueState` subclass at construction instead of a TTL test per call,
    and the no-current-key check runs only on a miss (no key is ever stored under ``None``)."""

    def __new__(cls, backend: Any, table: StateTable, namespace: Any = VOID_NAMESPACE) -> ValueState:
        if cls is ValueState and table.descriptor.ttl_config is not None:
            cls = TtlValueState
        return object.__new__(cls)

    __slots__ = ("_default",)

    def __init__(self, backend: Any, table: StateTable, namespace: Any = VOID_NAMESPACE) -> None:
        super().__init__(backend, table, namespace)
        self._default = table.descriptor.default

    def value(self) -> Any:
        v = self._m.get(self._b.current_key, _MISSING)
        if v is _MISSING:
            self._key()  # raises NoCurrentKeyError before set_current_key()
            return self._default
        return v

    def update(self, value: Any) -> None:
        k = self._b.current_key
        if k is None:
            raise NoCurrentKeyError(f"state {self._name!r} used before set_current_key()")
        if value is None:  # Flink: update(null) clears the value
            self._m.pop(k, None)
        else:
            self._m[k] = value


class TtlValueState(ValueState):
    """:class:`ValueState` with TTL: stores ``(value, timestamp)`` and checks expiry on every read.
    An empty or expired value reads as None, not the descriptor's default (as in Flink, whose TTL
    value state is built without it)."""

    __slots__ = ()

    def value(self) -> Any:
        k = self._b.current_key
        tv = self._m.get(k)
        if tv is None:
            self._key()
            return None
        now = self._now() if self._cleanup_size else self._clock()  # one call fewer without cleanup
        if tv[1] + self._ttl_ms <= now and is_expired(tv[1], self._ttl_ms, now):
            self._m.pop(k, None)
            return tv[0] if self._return_expired else None
        if self._on_read:
            self._m[k] = (tv[0], now)
        return tv[0]

    def update(self, value: Any) -> None:
        k = self._b.current_key
        if k is None:
            raise NoCurrentKeyError(f"state {self._name!r} used before set_current_key()")
        if value is None:
            self._m.pop(k, None)
        else:
            self._m[k] = (value, self._now() if self._cleanup_size else self._clock())


class _MergingHandle(_Handle):
    __slots__ = ()

    def _merge(self, a: Any, b: Any, now: int) -> Any:
        """Two stored values of one key folded into one (each kind of merging state has its own)."""
        raise NotImplementedError

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the current key's values in ``sources`` into ``target``, as Flink's heap backend
        (``AbstractHeapMergingState.mergeNamespaces``): each source is removed and folded into the
        merge of the sources before it, in order (``target`` itself may be among them), and the
        result is merged into what ``target`` holds then. With TTL the merge function is Flink's
        TTL-aware one (:meth:`_merge`); lists are concatenated with their timestamps, unchecked."""
        sources = list(sources)
        if not sources:
            return
        k = self._key()
        data = self._t.data
        now = self._b.time_provider.now_ms() if self._ttl is not None else 0
        merged = None
        for ns in sources:
            m = data.get(ns)
            v = None if m is None else m.pop(k, None)
            if merged is not None and v is not None:
                merged = self._merge(merged, v, now)
            elif merged is None:
                merged = v
        if merged is None:
            return
        m = data.get(target)
        if m is None:
            m = data.setdefault(target, {})
        cur = m.get(k)
        result = merged if cur is None else self._merge(cur, merged, now)
        if result is None:
            m.pop(k, None)
        else:
            m[k] = result
        if target == self._ns:
            self._m = data[target]

    def _ttl_fold(self, a: tuple[Any, int], b: tuple[Any, int], now: int, fold: Any) -> Any:
        """Flink's ``TtlReduceFunction.reduce`` / ``TtlAggregateFunction.merge``: a side counts unless
        it is expired and expired values are never returned; two counting sides fold with a new
        timestamp, one is re-stamped with the current time, none gives nothing."""
        keep_a = self._return_expired or not self._expired(a, now)
        keep_b = self._return_expired or not self._expired(b, now)
        if keep_a and keep_b:
            return (fold(a[0], b[0]), now)
        if keep_a:
            return (a[0], now)
        if keep_b:
            return (b[0], now)
        return None

    def _unexpired(self, stored: tuple[Any, int] | None, now: int) -> Any:
        """Flink's ``AbstractTtlDecorator.getUnexpired``: the stored value unless it is absent, or
        expired while expired values are never returned (then ``_MISSING``)."""
        if stored is None or (not self._return_expired and self._expired(stored, now)):
            return _MISSING
        return stored[0]


class ListState(_MergingHandle):
    """A list per key. ``get()`` is None when empty; adding None raises; ``update([])`` clears."""

    __slots__ = ()

    def get(self) -> list[Any] | None:
        """The elements, or None when empty. With TTL as Flink's ``TtlListState.get``: expired
        elements are skipped (or, with ReturnExpiredIfNotCleanedUp, returned) and stay stored while
        any element is alive; the list is cleared once all are expired. OnReadAndWrite stores the
        alive elements re-stamped."""
        if self._ttl is None:
            lst = self._m.get(self._key())
            return None if lst is None else list(lst)
        now = self._now()  # Flink runs incremental cleanup first, then reads
        k = self._key()
        lst = self._m.get(k)
        if lst is None:
            return None
        out = []
        any_alive = False
        for tv in lst:
            if not self._expired(tv, now):
                any_alive = True
                out.append(tv[0])
            elif self._return_expired:
                out.append(tv[0])
        if not any_alive:
            self._m.pop(k, None)
        elif self._on_read:
            self._m[k] = [(tv[0], now) for tv in lst if not self._expired(tv, now)]
        return out or None

    def _wrap(self, values: list[Any]) -> list[Any]:
        for v in values:
            if v is None:
                raise ValueError(f"list state {self._name!r}: None elements are not allowed")
        if self._ttl is None:
            return values
        now = self._now()
        return [(v, now) for v in values]

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state {self._name!r}: cannot add None")
        k = self._key()
        item = value if self._ttl is None else (value, self._now())
        lst = self._m.get(k)
        if lst is None:
            self._m[k] = [item]
        else:
            lst.append(item)

    def add_all(self, values: Iterable[Any]) -> None:
        if values is None:
            raise ValueError(f"list state {self._name!r}: add_all(None)")
        items = self._wrap(list(values))
        if items:
            self._m.setdefault(self._key(), []).extend(items)

    def update(self, values: Iterable[Any]) -> None:
        if values is None:
            raise ValueError(f"list state {self._name!r}: update(None); use clear()")
        items = self._wrap(list(values))
        k = self._key()
        if items:
            self._m[k] = items
        else:
            self._m.pop(k, None)

    def _merge(self, a: Any, b: Any, now: int) -> Any:
        return a + b  # Flink's HeapListState.mergeState: concatenation, timestamps as they are


class ReducingState(_MergingHandle):
    """One value per key, folded with the descriptor's reduce function; TTL shares one timestamp."""

    __slots__ = ("_fn",)

    def __init__(self, backend: Any, table: StateTable, namespace: Any = VOID_NAMESPACE) -> None:
        super().__init__(backend, table, namespace)
        self._fn = table.descriptor.reduce_function

    def get(self) -> Any:
        k = self._key()
        v = self._m.get(k)
        if v is None or self._ttl is None:
            return v
        now = self._now()
        if self._expired(v, now):
            self._m.pop(k, None)
            return v[0] if self._return_expired else None
        if self._on_read:
            self._m[k] = (v[0], now)
        return v[0]

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"reducing state {self._name!r}: cannot add None")
        k = self._key()
        cur = self._m.get(k)
        if self._ttl is None:
            self._m[k] = value if cur is None else self._fn(cur, value)
            return
        now = self._now()
        # Flink's TtlReduceFunction.reduce(stored, new): the stored value counts unless it is
        # expired and expired values are never returned (ReturnExpiredIfNotCleanedUp folds it in)
        prev = self._unexpired(cur, now)
        self._m[k] = (value, now) if prev is _MISSING else (self._fn(prev, value), now)

    def _merge(self, a: Any, b: Any, now: int) -> Any:
        if self._ttl is None:
            return self._fn(a, b)
        return self._ttl_fold(a, b, now, self._fn)


class AggregatingState(_MergingHandle):
    """An accumulator per key; ``get()`` returns ``get_result(accumulator)``."""

    __slots__ = ("_agg",)

    def __init__(self, backend: Any, table: StateTable, namespace: Any = VOID_NAMESPACE) -> None:
        super().__init__(backend, table, namespace)
        self._agg = table.descriptor.aggregate_function

    def get(self) -> Any:
        k = self._key()
        acc = self._m.get(k)
        if acc is None:
            return None
        if self._ttl is None:
            return self._agg.get_result(acc)
        now = self._now()
        if self._expired(acc, now):
            self._m.pop(k, None)
            return self._agg.get_result(acc[0]) if self._return_expired else None
        if self._on_read:
            self._m[k] = (acc[0], now)
        return self._agg.get_result(acc[0])

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"aggregating state {self._name!r}: cannot add None")
        k = self._key()
        cur = self._m.get(k)
        if self._ttl is None:
            acc = self._agg.create_accumulator() if cur is None else cur
            self._m[k] = self._agg.add(value, acc)
            return
        now = self._now()
        acc = self._unexpired(cur, now)  # Flink's TtlAggregateFunction.add
        if acc is _MISSING:
            acc = self._agg.create_accumulator()
        self._m[k] = (self._agg.add(value, acc), now)

    def _merge(self, a: Any, b: Any, now: int) -> Any:
        if self._ttl is None:
            return self._agg.merge(a, b)
        return self._ttl_fold(a, b, now, self._agg.merge)


class MapState(_Handle):
    """A map per key. Putting None as a value is allowed (Flink allows null map values)."""

    __slots__ = ()

    def _map(self, create: bool = False) -> dict[Any, Any] | None:
        k = self._key()
        d = self._m.get(k)
        if d is None and create:
            d = self._m[k] = {}
        return d

    def _live(self, d: dict[Any, Any], uk: Any, now: int) -> tuple[bool, Any]:
        tv = d.get(uk, _MISSING)
        if tv is _MISSING:
            return False, None
        if self._ttl is None:
            return True, tv
        if self._expired(tv, now):
            del d[uk]
            self._t.rewrote(d)
            if not d:
                self._m.pop(self._b.current_key, None)
            return (True, tv[0]) if self._return_expired else (False, None)
        if self._on_read:
            d[uk] = (tv[0], now)
            self._t.rewrote(d)
            self._lower_earliest(now)
        return True, tv[0]

    def _lower_earliest(self, ts: int) -> None:
        """An entry of the current key's map was written at ``ts``: keep cleanup's bound below it."""
        bounds = self._t.earliest
        if bounds:
            at = (self._ns, self._b.current_key)
            bound = bounds.get(at)
            if bound is not None:
                exp = expiration_timestamp(ts, self._ttl_ms)
                if exp < bound:
                    bounds[at] = exp

    def get(self, user_key: Any) -> Any:
        d = self._map()
        if d is None:
            return None
        return self._live(d, user_key, self._now() if self._ttl is not None else 0)[1]

    def contains(self, user_key: Any) -> bool:
        d = self._map()
        if d is None:
            return False
        return self._live(d, user_key, self._now() if self._ttl is not None else 0)[0]

    def put(self, user_key: Any, value: Any) -> None:
        if self._ttl is None:
            item = value
        else:
            item = (value, self._now())  # cleanup runs before the write
            self._lower_earliest(item[1])
        d = self._map(create=True)
        assert d is not None
        n = len(d)
        d[user_key] = item
        if len(d) == n:  # an overwrite, not an append
            self._t.rewrote(d)

    def put_all(self, entries: dict[Any, Any]) -> None:
        if not entries:
            return
        if self._ttl is not None:
            now = self._now()
            entries = {k: (v, now) for k, v in entries.items()}
            self._lower_earliest(now)
        d = self._map(create=True)
        assert d is not None
        n = len(d) + len(entries)
        d.update(entries)
        if len(d) != n:  # some key was there already: not only appended
            self._t.rewrote(d)

    def remove(self, user_key: Any) -> None:
        d = self._map()
        if d is not None and d.pop(user_key, _MISSING) is not _MISSING:
            self._t.rewrote(d)
            if not d:
                self._m.pop(self._b.current_key, None)

    def items(self) -> list[tuple[Any, Any]]:
        d = self._map()
        if d is None:
            return []
        if self._ttl is None:
            return list(d.items())
        now = self._now()
        out = []
        for uk in list(d):
            present, v = self._live(d, uk, now)
            if present:
                out.append((uk, v))
        return out

    def keys(self) -> list[Any]:
        if self._ttl is None:  # what items() gives, without building its pairs
            d = self._map()
            return [] if d is None else list(d)
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        if self._ttl is None:
            d = self._map()
            return [] if d is None else list(d.values())
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        """Whether nothing is stored. As Flink's ``TtlMapState.isEmpty`` (which asks the stored map),
        expired entries not yet cleaned up count: they are not checked here."""
        if self._ttl is not None:
            self._now()  # the access callback (incremental cleanup) runs first
        d = self._map()
        return not d

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(self.items())
