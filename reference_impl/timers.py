"""Timers of a keyed operator, as Flink's ``InternalTimerServiceImpl``: per time domain (event time,
processing time) a set of ``(timestamp, key, namespace)`` timers, deduplicated, fired in timestamp
order with the timer's key (and namespace) current.

Timers are key-grouped state. Flink keeps them in key-grouped priority queues that are written into
the keyed part of a checkpoint (with RocksDB, as the column families ``_timer_state/event_<name>``
and ``_timer_state/processing_<name>``). Here they are exactly that: a map state per domain under
those names (namespace = the timer's namespace, map key = the timestamp), held by the operator's
keyed backend (heap or on-disk). So they are checkpointed (also incrementally), restored,
redistributed by key group on rescale and shown by ``inspect`` with no separate path. An in-memory
heap orders them for firing; it is rebuilt from the restored key groups on restore.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

import msgpack

from reference_impl.snapshot import KeyedStateSnapshot
from reference_impl.state.descriptors import MapStateDescriptor
from reference_impl.state.handles import VOID_NAMESPACE

__all__ = [
    "EVENT_TIME",
    "PROCESSING_TIME",
    "MIN_WATERMARK",
    "MAX_WATERMARK",
    "TIMER_STATE_PREFIX",
    "timer_state_name",
    "InternalTimerService",
    "TimerService",
]

EVENT_TIME = "event"
PROCESSING_TIME = "processing"
MIN_WATERMARK = -(1 << 63)  # Long.MIN_VALUE: no watermark yet
MAX_WATERMARK = (1 << 63) - 1  # Long.MAX_VALUE: end of input, every event-time timer fires
TIMER_STATE_PREFIX = "_timer_state/"

Fire = Callable[[str, int, Any, Any], None]  # (domain, timestamp, key, namespace)


def timer_state_name(domain: str, service: str = "user-timers") -> str:
    """The keyed state holding one domain's timers (Flink's RocksDB column family name)."""
    return f"{TIMER_STATE_PREFIX}{domain}_{service}"


def _order(key: Any, namespace: Any) -> bytes:
    """A deterministic tie-break among timers of the same timestamp, whatever the key's type."""
    return msgpack.packb([repr(key), repr(namespace)])


class InternalTimerService:
    """Both time domains of one keyed operator subtask over its keyed backend."""

    def __init__(self, backend: Any, service: str = "user-timers") -> None:
        self.backend = backend
        self.descriptors = {
            d: MapStateDescriptor(timer_state_name(d, service)) for d in (EVENT_TIME, PROCESSING_TIME)
        }
        self._queues: dict[str, list[tuple[int, bytes, Any, Any]]] = {EVENT_TIME: [], PROCESSING_TIME: []}
        self.watermark = MIN_WATERMARK

    # ------------------------------------------------------------------ registration (current key)

    def _state(self, domain: str, namespace: Any) -> Any:
        return self.backend.get_partitioned_state(namespace, self.descriptors[domain])

    def register(self, domain: str, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        """A timer for the current key; registering the same (timestamp, key, namespace) twice keeps one."""
        ts = int(timestamp)
        st = self._state(domain, namespace)
        if not st.contains(ts):
            st.put(ts, True)
            key = self.backend.get_current_key()
            heapq.heappush(self._queues[domain], (ts, _order(key, namespace), key, namespace))

    def delete(self, domain: str, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        """Delete the current key's timer (a no-op if there is none); its queue entry is dropped lazily."""
        self._state(domain, namespace).remove(int(timestamp))

    # ------------------------------------------------------------------ firing

    def next_timestamp(self, domain: str) -> int | None:
        q = self._queues[domain]
        return q[0][0] if q else None

    def _fire_until(self, domain: str, time: int, fire: Fire) -> int:
        q, n = self._queues[domain], 0
        while q and q[0][0] <= time:
            ts, _, key, ns = heapq.heappop(q)
            self.backend.set_current_key(key)
            st = self._state(domain, ns)
            if not st.contains(ts):
                continue  # deleted, or a duplicate entry of a timer that already fired
            st.remove(ts)
            n += 1
            fire(domain, ts, key, ns)
        return n

    def advance_watermark(self, watermark: int, fire: Fire) -> int:
        """Fire every event-time timer at or before ``watermark`` (if it moves forward); returns how many."""
        if watermark <= self.watermark:
            return 0
        self.watermark = watermark
        return self._fire_until(EVENT_TIME, watermark, fire)

    def advance_processing_time(self, now: int, fire: Fire) -> int:
        """Fire every processing-time timer at or before ``now``; returns how many."""
        return self._fire_until(PROCESSING_TIME, now, fire)

    # ------------------------------------------------------------------ restore

    def restore(self, snapshots: Iterable[KeyedStateSnapshot]) -> None:
        """Rebuild the firing queues from the restored key groups (call before the backend restores
        them, which may consume the snapshots)."""
        names = {self.descriptors[d].name: d for d in self.descriptors}
        kgr = self.backend.key_group_range
        for snap in snapshots:
            for kg, per_state in snap.key_groups.items():
                if kg not in kgr:
                    continue
                for name, by_ns in per_state.items():
                    domain = names.get(name)
                    if domain is None:
                        continue
                    for ns, by_key in by_ns.items():
                        for key, stamps in by_key.items():
                            for ts in stamps:
                                self._queues[domain].append((int(ts), _order(key, ns), key, ns))
        for q in self._queues.values():
            heapq.heapify(q)

    def pending(self, domain: str) -> int:
        """Queue entries of ``domain`` (deleted timers may still be counted until they come up)."""
        return len(self._queues[domain])

    def clear_processing_time(self) -> None:
        """Drop pending processing-time timers without firing them (end of input, as Flink does)."""
        self._queues[PROCESSING_TIME] = []


class TimerService:
    """What a keyed function sees as ``ctx.timer_service()``: Flink's ``TimerService`` for the
    current key, with an optional namespace (Flink's ``InternalTimerService`` takes one)."""

    def __init__(self, internal: InternalTimerService, clock: Any) -> None:
        self._internal = internal
        self._clock = clock

    def current_processing_time(self) -> int:
        return self._clock.now_ms()

    def current_watermark(self) -> int:
        return self._internal.watermark

    def register_event_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._internal.register(EVENT_TIME, timestamp, namespace)

    def register_processing_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._internal.register(PROCESSING_TIME, timestamp, namespace)

    def delete_event_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._internal.delete(EVENT_TIME, timestamp, namespace)

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._internal.delete(PROCESSING_TIME, timestamp, namespace)
