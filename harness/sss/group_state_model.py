"""The reference model of an ``applyInPandasWithState`` function: the user's own function, run batch
by batch with a ``GroupState`` whose value and timeout live in ``reference_impl`` keyed state (one
ValueState per grouping key holding ``(value, timeoutTimestamp)``, as Spark's state row holds
``groupState`` and ``timeoutTimestamp``).

Spark's semantics, from ``FlatMapGroupsInPandasWithStateExec`` and ``GroupStateImpl`` (cited in
docs/structured-streaming.md):
- Per batch, first every key with input (``hasTimedOut`` false), then every key whose stored timeout
  is set and ``timeoutTimestamp < batchTimestampMs`` (strictly less; Flink fires a timer at
  ``timestamp <= now``), with no input and ``hasTimedOut`` true. The timeout pass runs after the
  input pass has written its state, so a key that got input this batch does not time out in it.
- Each call starts with no timeout (``GroupStateImpl.createForStreaming``); a call that does not
  call ``setTimeoutDuration`` clears the key's timeout. ``setTimeoutDuration(d)`` sets
  ``batchTimestampMs + d`` (``d > 0``).
- After a call: ``remove()`` with no timeout set deletes the key's state row; otherwise the row is
  written (a removed value with a timeout keeps a row with a null value) when the value was updated,
  removed, or the timeout changed, and left as it was otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from harness.sss.model import MAX_PARALLELISM, StateImage, frame, rows_of
from harness.sss.spec import SssSpec, load_function
from harness.sss.values import conform_row, conform_struct, freeze, schema_fields
from reference_impl.keygroups import KeyGroupRange
from reference_impl.state.descriptors import ValueStateDescriptor
from reference_impl.state.handles import VOID_NAMESPACE
from reference_impl.state.heap_backend import HeapKeyedStateBackend
from reference_impl.time import ManualClock

__all__ = ["GroupStateModel", "GROUP_STATE", "NO_TIMESTAMP"]


def _struct(d: Any) -> tuple[Any, ...]:
    """A struct of a state dump (canonical: a list; a dict in older dumps), hashable."""
    return tuple(freeze(x) for x in (d.values() if isinstance(d, dict) else d))

NO_TIMESTAMP = -1  # GroupStateImpl.NO_TIMESTAMP
GROUP_STATE = "group_state"  # the name the model's image (and the oracle's report) uses


class GroupStateModel:
    """One fault-free run of the function over micro-batches, on reference_impl state."""

    def __init__(self, spec: SssSpec) -> None:
        self.spec = spec
        self.clock = ManualClock(0)
        self.backend = HeapKeyedStateBackend(
            MAX_PARALLELISM, KeyGroupRange(0, MAX_PARALLELISM - 1), self.clock
        )
        self.func = load_function(spec.processor)
        self.vars: dict[str, Any] = {}  # no declared state variables (state-metadata lists none)
        self._state = self.backend.get_state(ValueStateDescriptor(GROUP_STATE))
        self._fields = schema_fields(spec.state_schema)

    def _call(
        self, key: tuple[Any, ...], rows: list[dict[str, Any]], ts: int, timed_out: bool
    ) -> list[dict[str, Any]]:
        from pyspark.sql import Row
        from pyspark.sql.streaming.state import GroupState

        self.backend.set_current_key(key)
        stored = self._state.value()
        value, old_timeout = stored if stored is not None else (None, NO_TIMESTAMP)
        # GroupState holds an absent state as None and only stores the schema (unused here); its hints
        # say Row and StructType
        state = GroupState(
            Row(*value) if value is not None else None, ts, NO_TIMESTAMP, self.spec.timeout, timed_out,  # type: ignore[arg-type]
            False, value is not None, False, False, NO_TIMESTAMP, b"", None,  # type: ignore[arg-type]
        )  # fmt: skip
        pdfs = iter([frame(self.spec, rows)])
        out = rows_of(self.func(key, pdfs, state))  # consumed in full before the state is written
        out = [conform_row(r, self.spec.output_schema) for r in out]  # what Spark makes of them
        timeout = state._timeout_timestamp  # pyspark keeps what setTimeoutDuration set here
        if state._removed and timeout == NO_TIMESTAMP:
            self._state.clear()
        elif state._updated or state._removed or timeout != old_timeout:
            value = conform_struct(tuple(state._value), self._fields) if state.exists else None
            self._state.update((value, int(timeout)))  # as Spark stores it under state_schema
        return out

    def run_batch(self, timestamp_ms: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Process one micro-batch at ``timestamp_ms``; its output rows."""
        self.clock.set(timestamp_ms)
        by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by_key[(r[self.spec.key],)].append(r)
        out: list[dict[str, Any]] = []
        for key in sorted(by_key):
            out += self._call(key, by_key[key], timestamp_ms, timed_out=False)
        if self.spec.timeout == "ProcessingTimeTimeout":
            due = sorted(k for k, (_, t) in self._table().items() if t != NO_TIMESTAMP and t < timestamp_ms)
            for key in due:
                out += self._call(key, [], timestamp_ms, timed_out=True)
        return out

    def _table(self) -> dict[tuple[Any, ...], tuple[Any, int]]:
        merged: dict[tuple[Any, ...], tuple[Any, int]] = {}
        for per_state in self.backend.snapshot().key_groups.values():
            merged.update(per_state.get(GROUP_STATE, {}).get(VOID_NAMESPACE, {}))
        return merged

    def state(self) -> StateImage:
        """Key -> (value, timeout timestamp), as Spark's state data source shows the state rows."""
        return {GROUP_STATE: {(k, None): (v, t) for k, (v, t) in self._table().items()}}

    def timer_image(self) -> set[tuple[tuple[Any, ...], int]]:
        return set()  # timeouts are part of each state row, compared with the state

    @staticmethod
    def spark_image(dump: dict[str, Any]) -> StateImage:
        """The state data source's rows (``key``, ``value``: {groupState, timeoutTimestamp}) in the
        model's form."""
        entries: dict[tuple[Any, ...], tuple[Any, int | None]] = {}
        for r in dump.get("group_state") or []:
            key = _struct(r["key"])
            v = r["value"]
            gs = v.get("groupState")
            value = None if gs is None else _struct(gs)
            entries[(key, None)] = (value, int(v.get("timeoutTimestamp", NO_TIMESTAMP)))
        return {GROUP_STATE: entries}
