"""The reference model of a StatefulProcessor: the user's own class, run batch by batch against a
``StatefulProcessorHandle`` whose ValueState/ListState/MapState are ``reference_impl`` keyed state
(a heap backend whose clock is the micro-batch timestamp) and whose timers are kept per key.

Spark's semantics are followed where they differ from Flink's (docs/structured-streaming.md cites the
Spark source for each):
- TTL time is the batch timestamp (``batchTimestampMs`` in the offset log), constant within a batch,
  not the wall clock at each access; expiration is ``batch timestamp of the last write + ttl`` and a
  value is expired iff ``batchTimestamp >= expiration`` (``StateTTL.isExpired``), the same inequality
  as Flink's ``ts + ttl <= now``.
- TTL is refreshed only by writes (Flink's OnCreateAndWrite) and expired values are never returned
  (NeverReturnExpired); every expired value is removed at the end of the batch (Spark's
  ``clearExpiredState`` after the batch's processing), not by incremental or compaction cleanup.
- Per batch: ``handleInputRows`` for each key with input, then ``handleExpiredTimer`` for every timer
  with ``expiry <= batchTimestamp`` (timers registered in the same batch included), each timer
  deleted after its call (pyspark ``stateful_processor_util._handle_expired_timers``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from harness.sss.spec import SssSpec
from harness.sss.state_vars import StateVar
from harness.sss.values import Type, conform_row, conform_struct, schema_fields, split_ddl
from reference_impl.keygroups import KeyGroupRange
from reference_impl.snapshot import TtlValue
from reference_impl.state.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from reference_impl.state.handles import VOID_NAMESPACE
from reference_impl.state.heap_backend import HeapKeyedStateBackend
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig, is_expired

__all__ = ["ProcessorModel", "StateImage", "NO_WATERMARK", "frame", "rows_of"]

MAX_PARALLELISM = 128
NO_WATERMARK = -1  # what TimerValues carries outside event-time mode
_PANDAS_DTYPES = {"string": "object", "long": "int64", "bigint": "int64", "int": "int32", "integer": "int32",
                  "double": "float64", "float": "float32", "boolean": "bool", "short": "int16"}  # fmt: skip

# (var name) -> canonical entries: {(grouping key, user key or None): (value, expiration ms or None)}
# (list state: user key is the element's position)
StateImage = dict[str, dict[tuple[Any, ...], tuple[Any, int | None]]]


def _ttl(ms: int | None) -> StateTtlConfig | None:
    if ms is None:
        return None
    return (
        StateTtlConfig.new_builder(int(ms))
        .update_ttl_on_create_and_write()
        .never_return_expired()
        .disable_cleanup_in_background()
        .build()
    )


def _struct_of(schema: Any) -> tuple[tuple[str, Type], ...] | None:
    """A state variable's declared fields, or None where the schema cannot be read (kept as given)."""
    try:
        return schema_fields(schema)
    except (ValueError, TypeError):
        return None


def _conformed(value: Iterable[Any], fields: tuple[tuple[str, Type], ...] | None) -> tuple[Any, ...]:
    """A state row as Spark stores it under its declared schema (harness.sss.values.conform)."""
    row = tuple(value)
    return row if fields is None else tuple(conform_struct(row, fields))


class _Var:
    """A state variable's handle; once ``deleteIfExists`` dropped the variable, every call raises what
    pyspark's state client raises when the JVM no longer knows it (``PySparkRuntimeError: Error
    checking value state exists: ...``, ``value_state_client.py``), as a processor may check."""

    _ERRORS: dict[str, str] = {}

    def __init__(self, name: str, model: ProcessorModel) -> None:
        self._name, self._m = name, model

    def _live(self, op: str) -> None:
        if self._name in self._m.deleted:
            from pyspark.errors import PySparkRuntimeError

            raise PySparkRuntimeError(f"Error {self._ERRORS.get(op, op)}: state variable {self._name!r} "
                                      "was removed by deleteIfExists")  # fmt: skip


class _ValueState(_Var):
    _ERRORS = {"exists": "checking value state exists", "get": "getting value state",
               "update": "updating value state", "clear": "clearing value state"}  # fmt: skip

    def __init__(self, h: Any, schema: Any, name: str, model: ProcessorModel) -> None:
        super().__init__(name, model)
        self._h, self._t = h, _struct_of(schema)

    def exists(self) -> bool:
        self._live("exists")
        return self._h.value() is not None

    def get(self) -> tuple[Any, ...] | None:
        self._live("get")
        return self._h.value()

    def update(self, value: Iterable[Any]) -> None:
        self._live("update")
        self._h.update(_conformed(value, self._t))

    def clear(self) -> None:
        self._live("clear")
        self._h.clear()


class _ListState(_Var):
    _ERRORS = {"exists": "checking value state exists", "get": "getting list state",
               "put": "updating value state", "appendValue": "updating value state",
               "appendList": "updating value state", "clear": "clearing value state"}  # fmt: skip

    def __init__(self, h: Any, schema: Any, name: str, model: ProcessorModel) -> None:
        super().__init__(name, model)
        self._h, self._t = h, _struct_of(schema)

    def exists(self) -> bool:
        self._live("exists")
        return bool(self._h.get())

    def get(self) -> Iterator[tuple[Any, ...]]:
        self._live("get")
        return iter(self._h.get() or [])

    def put(self, values: Iterable[Iterable[Any]]) -> None:
        self._live("put")
        self._h.update([_conformed(v, self._t) for v in values])

    def appendValue(self, value: Iterable[Any]) -> None:  # noqa: N802
        self._live("appendValue")
        self._h.add(_conformed(value, self._t))

    def appendList(self, values: Iterable[Iterable[Any]]) -> None:  # noqa: N802
        self._live("appendList")
        self._h.add_all([_conformed(v, self._t) for v in values])

    def clear(self) -> None:
        self._live("clear")
        self._h.clear()


class _MapState(_Var):
    _ERRORS = {"exists": "checking map state exists", "getValue": "getting value",
               "containsKey": "checking map state contains key", "updateValue": "updating map state value",
               "iterator": "getting map state iterator", "keys": "getting map state keys",
               "values": "getting map state values", "removeKey": "removing key from map state",
               "clear": "clearing map state"}  # fmt: skip

    def __init__(self, h: Any, key_schema: Any, schema: Any, name: str, model: ProcessorModel) -> None:
        super().__init__(name, model)
        self._h, self._k, self._t = h, _struct_of(key_schema), _struct_of(schema)

    def exists(self) -> bool:
        self._live("exists")
        return bool(self._h.items())

    def getValue(self, key: Iterable[Any]) -> tuple[Any, ...] | None:  # noqa: N802
        self._live("getValue")
        return self._h.get(_conformed(key, self._k))

    def containsKey(self, key: Iterable[Any]) -> bool:  # noqa: N802
        self._live("containsKey")
        return self._h.contains(_conformed(key, self._k))

    def updateValue(self, key: Iterable[Any], value: Iterable[Any]) -> None:  # noqa: N802
        self._live("updateValue")
        self._h.put(_conformed(key, self._k), _conformed(value, self._t))

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        self._live("iterator")
        return iter(self._h.items())

    def keys(self) -> Iterator[tuple[Any, ...]]:
        self._live("keys")
        return iter(self._h.keys())

    def values(self) -> Iterator[tuple[Any, ...]]:
        self._live("values")
        return iter(self._h.values())

    def removeKey(self, key: Iterable[Any]) -> None:  # noqa: N802
        self._live("removeKey")
        self._h.remove(_conformed(key, self._k))

    def clear(self) -> None:
        self._live("clear")
        self._h.clear()


class _Handle:
    """What ``StatefulProcessor.init`` gets: state on the reference backend, timers per key."""

    def __init__(self, model: ProcessorModel) -> None:
        self._m = model

    def _declare(self, var: StateVar, descriptor: Any) -> Any:
        if var.name in self._m.vars:
            raise ValueError(f"state variable {var.name!r} declared twice")
        self._m.vars[var.name] = var
        self._m.declared[var.name] = var
        self._m.deleted.discard(var.name)
        return self._m.backend.get_state(
            descriptor.enable_time_to_live(t) if (t := _ttl(var.ttl_ms)) else descriptor
        )

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> _ValueState:  # noqa: N802, N803
        return _ValueState(
            self._declare(StateVar(stateName, "value", ttlDurationMs), ValueStateDescriptor(stateName)), schema,
            stateName, self._m,
        )

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> _ListState:  # noqa: N802, N803
        return _ListState(
            self._declare(StateVar(stateName, "list", ttlDurationMs), ListStateDescriptor(stateName)), schema,
            stateName, self._m,
        )

    def getMapState(
        self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None
    ) -> _MapState:  # noqa: N802, N803
        return _MapState(
            self._declare(StateVar(stateName, "map", ttlDurationMs), MapStateDescriptor(stateName)),
            userKeySchema, valueSchema, stateName, self._m,
        )

    def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802, N803
        self._m.timers[self._m.backend.get_current_key()].add(int(expiryTimestampMs))

    def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802, N803
        self._m.timers[self._m.backend.get_current_key()].discard(int(expiryTimestampMs))

    def listTimers(self) -> Iterator[int]:  # noqa: N802
        return iter(sorted(self._m.timers[self._m.backend.get_current_key()]))

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N802, N803
        """Drop the variable and every key's value of it (Spark removes its column family); a name
        never declared is a no-op."""
        var = self._m.vars.pop(stateName, None)
        if var is None:
            return
        self._m.deleted.add(stateName)
        backend = self._m.backend
        for key in list(backend.get_keys(stateName)):
            backend.set_current_key(key)
            backend.get_state(_descriptor(var)).clear()


class ProcessorModel:
    """One fault-free run of the processor over micro-batches, on reference_impl state."""

    def __init__(self, spec: SssSpec) -> None:
        self.spec = spec
        self.clock = ManualClock(0)
        self.backend = HeapKeyedStateBackend(
            MAX_PARALLELISM, KeyGroupRange(0, MAX_PARALLELISM - 1), self.clock
        )
        self.vars: dict[str, StateVar] = {}
        self.deleted: set[str] = set()  # variables deleteIfExists dropped: their handles raise
        # every variable init declared, deleted ones too: Spark's state-metadata lists them all
        self.declared: dict[str, StateVar] = {}
        self._first = True  # the next batch is the query's first: Spark hands it the initial state
        self.timers: dict[tuple[Any, ...], set[int]] = defaultdict(set)
        self.processor = spec.new_processor()
        self.processor.init(_Handle(self))

    def run_batch(self, timestamp_ms: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Process one micro-batch at ``timestamp_ms``; its output rows."""
        from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

        self.clock.set(timestamp_ms)
        # in time mode None pyspark hands the processor no clock (``get_timestamps``: -1, -1)
        tv = TimerValues(NO_WATERMARK if self.spec.time_mode == "None" else timestamp_ms, NO_WATERMARK)
        by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by_key[(r[self.spec.key],)].append(r)
        initial: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        if self._first:  # Spark runs handleInitialState in the first batch only, before that key's input
            for r in initial_rows(self.spec):
                initial[(r[self.spec.key],)].append(r)
        self._first = False
        out: list[dict[str, Any]] = []
        for key in sorted(set(by_key) | set(initial)):
            self.backend.set_current_key(key)
            if key in initial:
                self.processor.handleInitialState(key, initial_frame(self.spec, initial[key]), tv)
            if key in by_key:
                out += rows_of(self.processor.handleInputRows(key, iter([frame(self.spec, by_key[key])]), tv))
        if self.spec.time_mode == "ProcessingTime":
            due = sorted((t, k) for k, ts in self.timers.items() for t in ts if t <= timestamp_ms)
            for t, key in due:
                self.backend.set_current_key(key)
                out += rows_of(self.processor.handleExpiredTimer(key, tv, ExpiredTimerInfo(t)))
                self.timers[key].discard(t)
        self._clear_expired(timestamp_ms)
        return [conform_row(r, self.spec.output_schema) for r in out]  # what Spark makes of them

    def _tables(self) -> Iterator[tuple[StateVar, dict[Any, Any]]]:
        snap = self.backend.snapshot()
        for name, var in self.vars.items():
            merged: dict[Any, Any] = {}
            for per_state in snap.key_groups.values():
                merged.update(per_state.get(name, {}).get(VOID_NAMESPACE, {}))
            yield var, merged

    def _clear_expired(self, now: int) -> None:
        for var, table in self._tables():
            if var.ttl_ms is None:
                continue
            for key in table:
                self.backend.set_current_key(key)
                # a read through the handle drops what is expired at ``now``, as Spark's cleanup does
                h = self.backend.get_state(_descriptor(var))
                h.get() if var.kind == "list" else (h.items() if var.kind == "map" else h.value())
        self.timers = defaultdict(set, {k: v for k, v in self.timers.items() if v})

    def state(self) -> StateImage:
        """The state as Spark's state data source would show it: expiration = write time + ttl."""
        image: StateImage = {}
        for var, table in self._tables():
            entries: dict[tuple[Any, ...], tuple[Any, int | None]] = {}
            for key, stored in table.items():
                if var.kind == "map":
                    for uk, v in stored.items():
                        entries[(key, uk)] = _with_expiry(v, var.ttl_ms)
                elif var.kind == "list":
                    for i, v in enumerate(stored):
                        entries[(key, i)] = _with_expiry(v, var.ttl_ms)
                else:
                    entries[(key, None)] = _with_expiry(stored, var.ttl_ms)
            image[var.name] = entries
        return image

    def timer_image(self) -> set[tuple[tuple[Any, ...], int]]:
        return {(k, t) for k, ts in self.timers.items() for t in ts}


def _descriptor(var: StateVar) -> Any:
    cls = {"value": ValueStateDescriptor, "list": ListStateDescriptor, "map": MapStateDescriptor}[var.kind]
    d = cls(var.name)
    t = _ttl(var.ttl_ms)
    return d.enable_time_to_live(t) if t else d


def _with_expiry(v: Any, ttl_ms: int | None) -> tuple[Any, int | None]:
    if ttl_ms is None:
        return (tuple(v), None)
    value, ts = (v.value, v.timestamp) if isinstance(v, TtlValue) else v
    return (tuple(value), int(ts) + int(ttl_ms))


def initial_rows(spec: SssSpec) -> list[dict[str, Any]]:
    """The scenario's initial-state rows with values of their declared types (integers, floats,
    booleans; strings as given), as Spark's ``createDataFrame`` of them holds them."""
    types = dict(p.strip().split(None, 1) for p in split_ddl(spec.initial_state_schema) if p.strip())
    return [{c: _typed(v, types[c]) for c, v in r.items()} for r in spec.initial_state]


def _typed(v: Any, ddl: str) -> Any:
    t = ddl.strip().lower()
    if v is None:
        return None
    if t in ("long", "bigint", "int", "integer", "short", "smallint", "tinyint", "byte"):
        return int(v)
    if t in ("double", "float"):
        return float(v)
    if t == "boolean":
        return v if isinstance(v, bool) else str(v).strip().lower() in ("true", "t", "yes", "y", "1")
    return v if t != "string" else str(v)


def initial_frame(spec: SssSpec, rows: list[dict[str, Any]]) -> Any:
    """One key's initial-state rows as the pandas DataFrame pyspark hands ``handleInitialState``."""
    return frame(spec, rows, spec.initial_state_schema, "initial_state.schema")


def frame(spec: SssSpec, rows: list[dict[str, Any]], schema: str | None = None, field: str = "input_schema") -> Any:
    """``rows`` as the pandas DataFrame Spark hands the user's code (its input schema's dtypes; no
    rows: an empty frame with the input's columns, as pyspark passes a timed-out key)."""
    import pandas as pd

    columns = [p.strip().split(None, 1) for p in split_ddl(schema or spec.input_schema)]
    df = pd.DataFrame(rows, columns=[c for c, _ in columns])
    if not rows:
        return df
    for col, ddl in columns:
        t = ddl.strip().lower()
        if t in ("timestamp", "timestamp_ntz", "date"):  # Arrow hands both as datetime64[ns] (UTC session)
            df[col] = pd.to_datetime(df[col])
            if t == "date":  # a date column arrives as datetime.date objects
                df[col] = df[col].dt.date
            continue
        if t.startswith("decimal"):
            from decimal import Decimal

            df[col] = [None if v is None else Decimal(str(v)) for v in df[col]]
            continue
        dtype = _PANDAS_DTYPES.get(t)
        if dtype is None:
            raise ValueError(
                f"{field}: column {col!r} has type {ddl!r}; the model supports "
                f"{sorted([*_PANDAS_DTYPES, 'timestamp', 'date', 'decimal'])}"
            )
        df[col] = df[col].astype(dtype)
    return df


def rows_of(frames: Iterable[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in frames or ():
        if hasattr(f, "to_dict"):
            out += [{k: _py(v) for k, v in r.items()} for r in f.to_dict("records")]
        else:  # a Row
            out.append({k: _py(v) for k, v in f.asDict().items()})
    return out


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def is_live(expiration: int | None, now: int) -> bool:
    return expiration is None or not is_expired(expiration, 0, now)
