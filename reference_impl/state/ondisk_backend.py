"""The embedded on-disk keyed state backend: the role RocksDB plays in Flink, for state that outgrows
memory. It is RocksDB (through ``rocksdict``), with Flink's key layout::

    key group (2 bytes, big-endian) | state id (2 bytes) | namespace length (2 bytes) | namespace | key

namespace and key written with msgpack, values with the state's value serializer (TTL values as
``[timestamp, value]``, list elements and map entries each with their own timestamp) — the very
encoding of a checkpoint section row, so checkpoints copy stored bytes. A key group is one
contiguous prefix scan, which is what snapshots, incremental checkpoints and rescaling need.

The handles are the heap backend's (same semantics by construction): each state's ``data`` is a
dict-like view over RocksDB. Lists and maps a handle reads are cached until the next
``set_current_key`` (or any query) and written back only if they changed, so ``add`` on a list costs
one read and one write per record, as in Flink without a merge operator. Values returned to callers
are decoded copies, as with Flink's RocksDB backend.

TTL cleanup: reads clear expired values as on the heap; incremental cleanup walks the database with a
persistent cursor; and :meth:`OnDiskKeyedStateBackend.compact_expired` is the compaction-filter sweep
(Flink's ``cleanupInRocksdbCompactFilter``), run every ``compaction_interval_records`` records when a
state has that cleanup enabled, and on demand. Full-snapshot cleanup applies to ``snapshot()``; like
Flink, incremental checkpoints do not apply it (unchanged files are reused as they are).

Incremental checkpoints (:meth:`OnDiskKeyedStateBackend.checkpoint_incremental`) write, per key
group, a base file and then delta files with only the entries changed since the previous checkpoint
into ``<job>/shared/`` (named by content hash), and a manifest into ``chk-<n>``; unchanged key groups
reuse the previous files. A chain is rewritten as a fresh base when its deltas outgrow the base.

One module although long: the namespace views, the table and the backend all work on the one
RocksDB key layout and codec defined at its top, and mean nothing apart.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rocksdict import Options, Rdict, WriteOptions

from reference_impl.checkpoint.format import (
    SharedFileRef,
    encode_incremental_manifest,
    encode_key_group_file,
    msgpack_array_header,
    shared_file_name,
)
from reference_impl.checkpoint.storage import FileSystemCheckpointStorage, StateFileHandle
from reference_impl.keygroups import KeyGroupRange, assign_to_key_group
from reference_impl.serializers import MSGPACK, Serializer, get_serializer
from reference_impl.snapshot import (
    KeyedStateSnapshot,
    OperatorStateSnapshot,
    StateKind,
    StateMeta,
    StateRestoreError,
    SubtaskStateSnapshot,
    TtlValue,
)
from reference_impl.state.descriptors import MapStateDescriptor, StateDescriptor
from reference_impl.state.handles import (
    VOID_NAMESPACE,
)
from reference_impl.state.keyed_backend import KeyedStateBackendBase
from reference_impl.time import TimeProvider
from reference_impl.ttl import StateTtlConfig, is_expired

__all__ = ["OnDiskKeyedStateBackend", "IncrementalCheckpointResult"]

_KG = [kg.to_bytes(2, "big") for kg in range(1 << 15)]
_MISSING = object()
_KEY_CACHE_LIMIT = 1 << 16
_MAX_CHAIN = 16  # deltas per key group before the chain is rewritten as one base


Codec = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]


def _codec(kind: StateKind, ttl: bool, vser: Serializer, kser: Serializer | None) -> Codec:
    """Encoder/decoder of one state's stored values, byte-identical to a checkpoint row's value
    (``format.encode_state_value``), so files are spliced from stored bytes."""
    packb, unpackb = MSGPACK.dumps, MSGPACK.loads
    single = kind not in (StateKind.LIST, StateKind.MAP)
    if vser.identity == "msgpack" and not ttl and single:
        return packb, unpackb
    dump: Callable[[Any], Any] = (lambda x: x) if vser.identity == "msgpack" else vser.dumps
    load: Callable[[Any], Any] = (lambda x: x) if vser.identity == "msgpack" else vser.loads
    one: Callable[[Any], Any]
    unone: Callable[[Any], Any]
    if ttl:

        def one(x: Any) -> Any:
            return [x[1], dump(x[0])]

        def unone(x: Any) -> Any:
            return TtlValue(load(x[1]), x[0])
    else:
        one, unone = dump, load
    if kind is StateKind.LIST:
        return (lambda v: packb([one(x) for x in v])), (lambda raw: [unone(x) for x in unpackb(raw)])
    if kind is StateKind.MAP:
        ks = kser or MSGPACK
        return (
            lambda v: packb([[ks.dumps(k), one(x)] for k, x in v.items()]),
            lambda raw: {ks.loads(k): unone(x) for k, x in unpackb(raw)},
        )
    return (lambda v: packb(one(v))), (lambda raw: unone(unpackb(raw)))


def _alive_part(kind: StateKind, v: Any, ttl_ms: int, now: int, list_prefix: bool = False) -> Any:
    """``v`` without expired elements/entries; None if nothing is left; ``v`` itself if unchanged.
    ``list_prefix``: drop a list's elements only up to its first unexpired one, as Flink's RocksDB
    compaction filter does (``ListElementFilter.nextUnexpiredOffset``: lists are taken to be in
    timestamp order)."""
    if kind is StateKind.LIST:
        if list_prefix:
            first = next((i for i, tv in enumerate(v) if not is_expired(tv[1], ttl_ms, now)), len(v))
            return v if first == 0 else (v[first:] or None)
        alive = [tv for tv in v if not is_expired(tv[1], ttl_ms, now)]
        return v if len(alive) == len(v) else (alive or None)
    if kind is StateKind.MAP:
        alive_entries = {uk: tv for uk, tv in v.items() if not is_expired(tv[1], ttl_ms, now)}
        return v if len(alive_entries) == len(v) else (alive_entries or None)
    return None if is_expired(v[1], ttl_ms, now) else v


def _split(dbkey: bytes) -> tuple[int, bytes, bytes, bytes]:
    """(key group, state id bytes, namespace bytes, key bytes) of a stored key."""
    n = int.from_bytes(dbkey[4:6], "big")
    return int.from_bytes(dbkey[:2], "big"), dbkey[2:4], dbkey[6 : 6 + n], dbkey[6 + n :]


class _StateInfo:
    """One state in the database: id, metadata, codec and TTL (registered or only restored)."""

    __slots__ = ("name", "sid", "sid_b", "name_b", "meta", "kind", "ttl", "enc", "dec")

    def __init__(
        self, name: str, sid: int, meta: StateMeta, codec: Codec, ttl: StateTtlConfig | None
    ) -> None:
        self.name = name
        self.sid = sid
        self.sid_b = sid.to_bytes(2, "big")
        self.name_b = MSGPACK.dumps(name)
        self.meta = meta
        self.kind = StateKind(meta.kind)
        self.ttl = ttl
        self.enc, self.dec = codec


class _NamespaceView:
    """A dict-like view of one state's entries in one namespace (what the handles index by key)."""

    __slots__ = ("_b", "_mid", "_enc", "_dec")

    def __init__(self, backend: OnDiskKeyedStateBackend, info: _StateInfo, namespace: Any) -> None:
        ns_b = MSGPACK.dumps(namespace)
        if len(ns_b) >= 1 << 16:
            raise ValueError(f"state {info.name!r}: namespace {namespace!r} serializes to over 64 KiB")
        self._b = backend
        self._mid = info.sid_b + len(ns_b).to_bytes(2, "big") + ns_b
        self._enc, self._dec = info.enc, info.dec

    def _dbkey(self, k: Any) -> bytes:
        b = self._b
        if k is b.current_key:
            return b._kg_b + self._mid + b._key_b
        kg, kg_b, key_b = b._key_info(k)
        return kg_b + self._mid + key_b

    def get(self, k: Any, default: Any = None) -> Any:
        b = self._b
        dbkey = b._kg_b + self._mid + b._key_b if k is b.current_key else self._dbkey(k)
        cache = b._cache
        if cache:
            c = cache.get(dbkey)
            if c is not None:
                return c[0]
        raw = b._get(dbkey)
        if raw is None:
            return default
        v = self._dec(raw)
        if type(v) is list or type(v) is dict:
            cache[dbkey] = [v, raw, self._enc]
        return v

    def __getitem__(self, k: Any) -> Any:
        v = self.get(k, _MISSING)
        if v is _MISSING:
            raise KeyError(k)
        return v

    def __contains__(self, k: Any) -> bool:
        return self.get(k, _MISSING) is not _MISSING

    def __setitem__(self, k: Any, v: Any) -> None:
        b = self._b
        dbkey = b._kg_b + self._mid + b._key_b if k is b.current_key else self._dbkey(k)
        if type(v) is list or type(v) is dict:
            b._cache[dbkey] = [v, None, self._enc]  # written (if non-empty) on the next flush
        else:
            b._put(dbkey, self._enc(v))
            if b._cache:
                b._cache.pop(dbkey, None)
            if b._track:
                b._changed.add(dbkey)

    def pop(self, k: Any, default: Any = None) -> Any:
        b = self._b
        dbkey = self._dbkey(k)
        c = b._cache.pop(dbkey, None) if b._cache else None
        if c is not None:
            v = c[0]
        else:
            raw = b._get(dbkey)
            if raw is None:
                return default
            v = self._dec(raw)
        b._delete(dbkey)
        if b._track:
            b._changed.add(dbkey)
        return v

    def setdefault(self, k: Any, default: Any) -> Any:
        v = self.get(k, _MISSING)
        if v is _MISSING:
            self[k] = default
            return default
        return v


class _DataView:
    """``table.data`` for the shared handles: namespace -> :class:`_NamespaceView` (always present)."""

    __slots__ = ("_b", "_info", "_views")

    def __init__(self, backend: OnDiskKeyedStateBackend, info: _StateInfo) -> None:
        self._b = backend
        self._info = info
        self._views: dict[Any, _NamespaceView] = {}

    def get(self, namespace: Any, default: Any = None) -> _NamespaceView:
        v = self._views.get(namespace)
        if v is None:
            v = self._views[namespace] = _NamespaceView(self._b, self._info, namespace)
        return v

    __getitem__ = get

    def setdefault(self, namespace: Any, default: Any = None) -> _NamespaceView:
        return self.get(namespace)


class _DiskTable:
    """What a handle needs of a table (``descriptor``, ``data``), backed by the database."""

    __slots__ = ("descriptor", "data", "info", "cleanup_cursor", "earliest")

    def __init__(
        self, backend: OnDiskKeyedStateBackend, descriptor: StateDescriptor, info: _StateInfo
    ) -> None:
        self.descriptor = descriptor
        self.info = info
        self.data = _DataView(backend, info)
        self.cleanup_cursor: bytes | None = None
        self.earliest = None  # the heap's map-cleanup bounds: the compaction sweep needs none

    def rewrote(self, value: Any) -> None:
        """Nothing to drop: state files copy stored bytes, with no encoding cache (the heap's
        :meth:`~reference_impl.state.handles.StateTable.rewrote`)."""


@dataclass
class _Link:
    ref: SharedFileRef
    name: str
    delta: bool


@dataclass
class IncrementalCheckpointResult:
    """What one incremental checkpoint of a subtask wrote: the manifest's handle (for
    ``finalize_checkpoint``) and the bytes and files written or reused."""

    handle: StateFileHandle
    bytes_written: int
    files_written: int
    files_reused: int
    key_groups_written: int


LOCAL_DIR_ENV = "STATECHAOS_ROCKSDB_LOCALDIR"
"""The environment variable naming where default temp dirs of :class:`OnDiskKeyedStateBackend` go."""


def _link(operator_id: str, kg: int, data: bytes, delta: bool) -> _Link:
    """A shared file named by its content hash (so identical content is written once)."""
    name = shared_file_name(operator_id, kg, data, delta)
    return _Link(SharedFileRef(f"../shared/{name}", len(data), zlib.crc32(data) & 0xFFFFFFFF), name, delta)


def _release(db: Rdict, path: Path, remove: bool) -> None:
    try:
        db.close()
    except Exception:  # already closed, or the interpreter is shutting down
        pass
    if remove:
        shutil.rmtree(path, ignore_errors=True)


class OnDiskKeyedStateBackend(KeyedStateBackendBase):
    """Keyed state of one subtask in an embedded RocksDB under ``directory`` (a temp dir by default,
    removed on :meth:`close`, on exit of a ``with`` block, or when the backend is garbage collected).
    Same API and semantics as :class:`~reference_impl.state.HeapKeyedStateBackend`.

    The default temp dirs are made in :data:`LOCAL_DIR_ENV` when it is set (else the system's temp
    dir), like Flink's ``state.backend.rocksdb.localdir``: the database is a working copy, never
    recovered from (state comes back from checkpoints), so a RAM-backed folder loses nothing; it saves
    the ~15 metadata syncs RocksDB makes per open and close (the test suites use one)."""

    def __init__(
        self,
        max_parallelism: int,
        key_group_range: KeyGroupRange,
        time_provider: TimeProvider | None = None,
        directory: str | Path | None = None,
        *,
        compaction_interval_records: int | None = 100_000,
        remove_on_close: bool | None = None,
    ) -> None:
        super().__init__(max_parallelism, key_group_range, time_provider)
        self._kg_b = b""
        self._key_b = b""
        own = directory is None
        if directory is None:
            local = os.environ.get(LOCAL_DIR_ENV) or None
            if local is not None:
                os.makedirs(local, exist_ok=True)
            directory = tempfile.mkdtemp(prefix="statechaos-rocksdb-", dir=local)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_max_background_jobs(2)
        self._db = Rdict(str(self.directory / "db"), opts)
        wo = WriteOptions()
        # rocksdict's stub declares disable_wal a method; it is a property (getset_descriptor)
        wo.disable_wal = True  # type: ignore[method-assign, assignment]  # like Flink: state is recovered from checkpoints, never from the WAL
        self._db.set_write_options(wo)
        self._get, self._put, self._delete = self._db.get, self._db.put, self._db.delete
        self._finalizer = weakref.finalize(
            self, _release, self._db, self.directory, own if remove_on_close is None else remove_on_close
        )
        self._keys: dict[Any, tuple[int, bytes, bytes]] = {}
        self._infos: dict[str, _StateInfo] = {}
        self._by_sid: dict[bytes, _StateInfo] = {}
        self._tables: dict[str, _DiskTable] = {}
        self._cache: dict[bytes, list[Any]] = {}
        self._per_record_cleanup: list[tuple[_DiskTable, int]] = []
        self._compaction_interval = compaction_interval_records
        self._sweep_states = False
        self._records = 0
        # incremental checkpoints: keys changed since the last one, and the file chain per key group
        self._track = False
        self._changed: set[bytes] = set()
        self._chains: dict[int, list[_Link]] = {}
        self._chain_target: tuple[str, str] | None = None

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release the database (and remove its directory if the backend created it)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> OnDiskKeyedStateBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ keys

    def _key_info(self, key: Any) -> tuple[int, bytes, bytes]:
        info = self._keys.get(key)
        if info is None:
            kg = self._owned_key_group(key)
            if len(self._keys) >= _KEY_CACHE_LIMIT:
                self._keys.clear()  # bounded: state may outgrow memory, the key cache must not
            info = self._keys[key] = (kg, _KG[kg], MSGPACK.dumps(key))
        return info

    def set_current_key(self, key: Any) -> None:
        if self._cache:
            self._flush()
        _, self._kg_b, self._key_b = self._key_info(key)
        self.current_key = key
        if self._per_record_cleanup:
            for table, n in self._per_record_cleanup:
                self.incremental_cleanup(table, n)
        if self._sweep_states:
            self._records += 1
            if self._compaction_interval and self._records >= self._compaction_interval:
                self.compact_expired()

    def key_group_of(self, key: Any) -> int:
        info = self._keys.get(key)
        return assign_to_key_group(key, self.max_parallelism) if info is None else info[0]

    def _flush(self) -> None:
        """Write back the lists and maps handles read or built since the last flush, if changed."""
        cache, self._cache = self._cache, {}
        for dbkey, (obj, raw, enc) in cache.items():
            if not obj:
                if raw is not None or self._get(dbkey) is not None:
                    self._delete(dbkey)
                    if self._track:
                        self._changed.add(dbkey)
                continue
            new = enc(obj)
            if new != raw:
                self._put(dbkey, new)
                if self._track:
                    self._changed.add(dbkey)

    # ------------------------------------------------------------------ state

    def _register(self, name: str, meta: StateMeta, codec: Codec, ttl: StateTtlConfig | None) -> _StateInfo:
        old = self._infos.get(name)
        sid = old.sid if old is not None else len(self._infos)
        if sid >= 1 << 16:
            raise ValueError("the on-disk backend holds at most 65536 states")
        info = _StateInfo(name, sid, meta, codec, ttl)
        self._infos[name] = info
        self._by_sid[info.sid_b] = info
        if ttl is not None and ttl.compaction_filter_cleanup is not None:
            self._sweep_states = True
        return info

    def _table(self, descriptor: StateDescriptor) -> _DiskTable:
        table = self._tables.get(descriptor.name)
        if table is not None:
            self._check_same(table.descriptor, descriptor)
            return table
        restored = self._infos.get(descriptor.name)
        if restored is not None:  # restored, not yet requested: check before taking it
            self._check_compatible(restored.meta, descriptor)
        kser = descriptor.key_serializer if isinstance(descriptor, MapStateDescriptor) else None
        ttl = descriptor.ttl_config
        codec = _codec(descriptor.kind, ttl is not None, descriptor.serializer, kser)
        info = self._register(descriptor.name, descriptor.meta(), codec, ttl)
        table = _DiskTable(self, descriptor, info)
        self._tables[descriptor.name] = table
        if (
            ttl is not None
            and ttl.incremental_cleanup
            and ttl.incremental_cleanup.run_cleanup_for_every_record
        ):
            self._per_record_cleanup.append((table, ttl.incremental_cleanup.cleanup_size))
        return table

    # ------------------------------------------------------------------ TTL cleanup

    def incremental_cleanup(self, table: _DiskTable, n: int) -> None:
        """Visit ``n`` stored entries from a persistent cursor, dropping expired values of ``table``'s
        state (Flink's incremental cleanup): work proportional to access, no full scans. Entries the
        handles are using right now are left to them."""
        info = table.info
        ttl = info.ttl
        if ttl is None or n <= 0:
            return
        now = self.time_provider.now_ms()
        it = self._db.iter()
        if table.cleanup_cursor is None:
            it.seek_to_first()
        else:
            it.seek(table.cleanup_cursor)
        sid_b, cache = info.sid_b, self._cache
        while n > 0 and it.valid():
            k = it.key()
            if k[2:4] == sid_b and k not in cache:
                self._sweep_one(info, k, it.value(), ttl.ttl_ms, now)
            n -= 1
            it.next()
        table.cleanup_cursor = it.key() if it.valid() else None
        del it

    def _sweep_one(
        self, info: _StateInfo, k: bytes, raw: bytes, ttl_ms: int, now: int, list_prefix: bool = False
    ) -> bool:
        v = info.dec(raw)
        alive = _alive_part(info.kind, v, ttl_ms, now, list_prefix)
        if alive is v:
            return False
        if alive is None:
            self._delete(k)
        else:
            self._put(k, info.enc(alive))
        if self._track:
            self._changed.add(k)
        return True

    def compact_expired(self) -> int:
        """The compaction-filter sweep: scan the database once and drop every expired value (map
        entries one by one; list elements up to the first unexpired one, as Flink's filter) of the
        states with compaction-filter cleanup, re-reading the clock every
        ``query_time_after_num_entries`` entries. Returns the entries changed or removed. Runs every
        ``compaction_interval_records`` records, or when called."""
        self._records = 0
        if self._cache:
            self._flush()
        sweep = {
            sid_b: info
            for sid_b, info in self._by_sid.items()
            if info.ttl is not None and info.ttl.compaction_filter_cleanup is not None
        }
        if not sweep:
            return 0
        changed = seen = 0
        now = self.time_provider.now_ms()
        for k, raw in self._raw_items():
            info = sweep.get(k[2:4])
            if info is None:
                continue
            assert info.ttl is not None and info.ttl.compaction_filter_cleanup is not None
            seen += 1
            if seen % max(1, info.ttl.compaction_filter_cleanup.query_time_after_num_entries) == 0:
                now = self.time_provider.now_ms()
            changed += self._sweep_one(info, k, raw, info.ttl.ttl_ms, now, list_prefix=True)
        if changed:
            self._db.compact_range(None, None)  # reclaim the space of the tombstones now
        return changed

    # ------------------------------------------------------------------ queries

    def registered_state_names(self) -> list[str]:
        return sorted(self._infos)

    def _info(self, state_name: str) -> _StateInfo:
        info = self._infos.get(state_name)
        if info is None:
            raise KeyError(
                f"no state named {state_name!r} (known: {', '.join(self.registered_state_names())})"
            )
        return info

    def _raw_items(self, from_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The store's entries from ``from_key`` on: bytes, as the database is opened in raw mode."""
        items = self._db.items() if from_key is None else self._db.items(from_key=from_key)
        return cast(Iterator[tuple[bytes, bytes]], items)

    def _scan(self, start: int | None = None, end: int | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Stored entries of key groups ``start..end`` (inclusive; all if None), in key order."""
        if self._cache:
            self._flush()
        if start is None:
            yield from self._raw_items()
            return
        stop = _KG[end + 1] if end is not None and end + 1 < len(_KG) else None
        for k, v in self._raw_items(_KG[start]):
            if stop is not None and k >= stop:
                return
            yield k, v

    def get_keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        """Keys with an entry in ``state_name`` under ``namespace``."""
        sid_b = self._info(state_name).sid_b
        ns_b = MSGPACK.dumps(namespace)
        out = []
        for k, _ in self._scan():
            _, s, n, key_b = _split(k)
            if s == sid_b and n == ns_b:
                out.append(MSGPACK.loads(key_b))
        return iter(out)

    def num_entries(self, state_name: str | None = None) -> int:
        """Entries (one per key and namespace) in one state, or in all states."""
        sid_b = self._info(state_name).sid_b if state_name else None
        return sum(1 for k, _ in self._scan() if sid_b is None or k[2:4] == sid_b)

    # ------------------------------------------------------------------ snapshot / restore

    def _metas(self) -> dict[str, StateMeta]:
        return {name: info.meta for name, info in self._infos.items()}

    def snapshot(self, snapshot_time_ms: int | None = None, *, shared: bool = False) -> KeyedStateSnapshot:
        """All state grouped by key group, as plain decoded values (isolated from later writes). TTL
        states with full-snapshot cleanup leave out entries expired at snapshot time."""
        now = self.time_provider.now_ms() if snapshot_time_ms is None else snapshot_time_ms
        kgs: dict[int, dict[str, dict[Any, dict[Any, Any]]]] = {}
        ns_cache: dict[bytes, Any] = {}
        for k, raw in self._scan():
            kg, sid_b, ns_b, key_b = _split(k)
            info = self._by_sid[sid_b]
            v = info.dec(raw)
            ttl = info.ttl
            if ttl is not None and ttl.full_snapshot_cleanup:
                v = _alive_part(info.kind, v, ttl.ttl_ms, now)
                if v is None:
                    continue
            ns = ns_cache.get(ns_b, _MISSING)
            if ns is _MISSING:
                ns = ns_cache[ns_b] = MSGPACK.loads(ns_b)
            kgs.setdefault(kg, {}).setdefault(info.name, {}).setdefault(ns, {})[MSGPACK.loads(key_b)] = v
        return KeyedStateSnapshot(self.max_parallelism, self.key_group_range, self._metas(), kgs, now)

    def restore(self, snapshots: list[KeyedStateSnapshot]) -> None:
        """Load the key groups of this backend's range from ``snapshots`` (any old parallelism)."""
        if self._infos:
            raise StateRestoreError("restore() must run on a fresh backend, before any state is used")
        metas = self._restored_metas(snapshots)
        for name, meta in metas.items():
            kser = get_serializer(meta.map_key_serializer) if meta.map_key_serializer else None
            codec = _codec(
                StateKind(meta.kind), meta.ttl is not None, get_serializer(meta.value_serializer), kser
            )
            ttl = None if meta.ttl is None else StateTtlConfig.from_dict(meta.ttl)
            self._register(name, meta, codec, ttl)
        put = self._put
        for snap in snapshots:
            for kg, per_state in snap.key_groups.items():
                if kg not in self.key_group_range:
                    continue
                for name, per_ns in per_state.items():
                    info = self._infos[name]
                    for ns, m in per_ns.items():
                        prefix = _KG[kg] + _NamespaceView(self, info, ns)._mid
                        for key, v in m.items():
                            put(prefix + MSGPACK.dumps(key), info.enc(v))

    # ------------------------------------------------------------------ incremental checkpoints

    def checkpoint_incremental(
        self,
        storage: FileSystemCheckpointStorage,
        job_id: str,
        checkpoint_id: int,
        operator_id: str,
        subtask_index: int,
        parallelism: int,
        operator_state: OperatorStateSnapshot | None = None,
    ) -> IncrementalCheckpointResult:
        """Write this subtask's state for checkpoint ``checkpoint_id`` reusing the previous
        checkpoint's shared files: only key groups changed since then get a new (delta or base) file.
        The first checkpoint (or one into another job or operator) writes a base per key group."""
        if self._cache:
            self._flush()
        shared = storage.shared_dir(job_id)
        target = (str(shared.resolve()), operator_id)
        if target != self._chain_target:
            self._chains, self._chain_target, self._track = {}, target, False
        baseline = self._track
        changed_by_kg: dict[int, list[bytes]] = {}
        for k in self._changed:
            changed_by_kg.setdefault(int.from_bytes(k[:2], "big"), []).append(k)
        self._changed, self._track = set(), True
        written = files_written = files_reused = kgs_written = 0
        refs: dict[int, list[SharedFileRef]] = {}
        for kg in self.key_group_range:
            chain = self._chains.get(kg)
            if chain is not None and not all((shared / link.name).is_file() for link in chain):
                chain = None  # a file was deleted under us (retention of everything): start over
            changed = changed_by_kg.get(kg)
            if chain is not None and changed is None:
                files_reused += len(chain)
                refs[kg] = [link.ref for link in chain]
                continue
            if chain is None and baseline and changed is None and kg not in self._chains:
                continue  # empty at the last checkpoint and untouched since
            data: bytes | None = None
            if chain is not None and changed is not None:
                rows = self._delta_rows(sorted(changed))
                delta = encode_key_group_file(self.max_parallelism, kg, rows, delta=True)
                delta_total = sum(link.ref.size for link in chain[1:]) + len(delta)
                if len(chain) <= _MAX_CHAIN and delta_total <= chain[0].ref.size:
                    data = delta
                    files_reused += len(chain)
                    chain = [*chain, _link(operator_id, kg, data, True)]
            if data is None:  # first time, or the deltas outgrew the base: a fresh base
                base_rows = self._base_rows(kg)
                if not base_rows:
                    self._chains.pop(kg, None)
                    continue
                rows = msgpack_array_header(len(base_rows)) + b"".join(base_rows)
                data = encode_key_group_file(self.max_parallelism, kg, rows, delta=False)
                chain = [_link(operator_id, kg, data, False)]
            assert chain is not None  # reused above, or a fresh base
            n = storage.write_shared_file(job_id, chain[-1].name, data)
            written += n
            files_written += n > 0
            files_reused += n == 0
            kgs_written += 1
            self._chains[kg] = chain
            refs[kg] = [link.ref for link in chain]
        now = self.time_provider.now_ms()
        keyed = KeyedStateSnapshot(self.max_parallelism, self.key_group_range, self._metas(), {}, now)
        manifest = encode_incremental_manifest(
            SubtaskStateSnapshot(
                operator_id, subtask_index, parallelism, self.max_parallelism, keyed, operator_state
            ),
            refs,
            {"job_id": job_id, "checkpoint_id": checkpoint_id},
        )
        handle = storage.write_subtask_file(job_id, checkpoint_id, operator_id, subtask_index, manifest)
        return IncrementalCheckpointResult(
            handle, written + handle.size, files_written, files_reused, kgs_written
        )

    def _row(self, dbkey: bytes, raw: bytes | None) -> bytes:
        _, sid_b, ns_b, key_b = _split(dbkey)
        head = self._by_sid[sid_b].name_b + ns_b + key_b
        return b"\x94" + head + raw if raw is not None else b"\x93" + head

    def _base_rows(self, kg: int) -> list[bytes]:
        return [self._row(k, raw) for k, raw in self._scan(kg, kg)]

    def _delta_rows(self, keys: list[bytes]) -> bytes:
        rows = [self._row(k, self._get(k)) for k in keys]
        return msgpack_array_header(len(rows)) + b"".join(rows)
