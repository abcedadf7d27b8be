"""State TTL configuration and expiry arithmetic, as Flink's ``StateTtlConfig`` and ``TtlUtils``.

A value is expired iff ``ts + ttl <= now``, with the expiration timestamp clamped so that ``ts + ttl``
never overflows int64 (Flink's ``TtlUtils.getExpirationTimestamp``). Defaults follow current Flink:
update on create and write, never return expired values, processing time, and background cleanup on
(incremental cleanup of 5 entries per state access for heap state, compaction-filter cleanup for the
on-disk backend); cleanup on full snapshot is opt-in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = [
    "UpdateType",
    "StateVisibility",
    "TtlTimeCharacteristic",
    "IncrementalCleanup",
    "CompactionFilterCleanup",
    "StateTtlConfig",
    "expiration_timestamp",
    "is_expired",
    "LONG_MAX",
]

LONG_MAX = 2**63 - 1


class UpdateType(str, Enum):
    """When the last-access timestamp is refreshed."""

    Disabled = "Disabled"
    OnCreateAndWrite = "OnCreateAndWrite"
    OnReadAndWrite = "OnReadAndWrite"


class StateVisibility(str, Enum):
    """Whether an expired value that is still stored may be returned by a read (and, as in Flink's
    ``getUnexpired``, folded into a Reducing/Aggregating write or a namespace merge). A read of an
    expired value clears it; a list keeps its expired elements while any element is alive."""

    ReturnExpiredIfNotCleanedUp = "ReturnExpiredIfNotCleanedUp"
    NeverReturnExpired = "NeverReturnExpired"


class TtlTimeCharacteristic(str, Enum):
    ProcessingTime = "ProcessingTime"


@dataclass(frozen=True)
class IncrementalCleanup:
    """Check ``cleanup_size`` entries per state access (and per record if asked) with a persistent
    iterator over the state, removing expired ones (heap backend)."""

    cleanup_size: int = 5
    run_cleanup_for_every_record: bool = False

    def __post_init__(self) -> None:
        if self.cleanup_size < 0:
            raise ValueError(f"cleanup_size must be >= 0, got {self.cleanup_size}")


@dataclass(frozen=True)
class CompactionFilterCleanup:
    """On-disk backend: drop expired entries while sweeping (compacting); the current time is
    re-read after every ``query_time_after_num_entries`` entries."""

    query_time_after_num_entries: int = 1000


def expiration_timestamp(ts: int, ttl_ms: int) -> int:
    """``ts + ttl`` clamped to int64 max (Flink's ``getExpirationTimestamp``)."""
    ttl_without_overflow = min(LONG_MAX - ts, ttl_ms) if ts > 0 else ttl_ms
    return ts + ttl_without_overflow


def is_expired(ts: int, ttl_ms: int, now_ms: int) -> bool:
    """Expired iff the (clamped) expiration timestamp is at or before ``now_ms``."""
    return expiration_timestamp(ts, ttl_ms) <= now_ms


@dataclass(frozen=True)
class StateTtlConfig:
    """TTL of one state. Build with ``StateTtlConfig(ttl_ms=...)`` or ``StateTtlConfig.new_builder(ttl)``."""

    ttl_ms: int
    update_type: UpdateType = UpdateType.OnCreateAndWrite
    state_visibility: StateVisibility = StateVisibility.NeverReturnExpired
    time_characteristic: TtlTimeCharacteristic = TtlTimeCharacteristic.ProcessingTime
    full_snapshot_cleanup: bool = False
    incremental_cleanup: IncrementalCleanup | None = field(default_factory=IncrementalCleanup)
    compaction_filter_cleanup: CompactionFilterCleanup | None = field(default_factory=CompactionFilterCleanup)

    def __post_init__(self) -> None:
        if not isinstance(self.ttl_ms, int) or isinstance(self.ttl_ms, bool) or self.ttl_ms <= 0:
            raise ValueError(f"TTL must be a positive number of milliseconds, got {self.ttl_ms!r}")
        object.__setattr__(self, "update_type", UpdateType(self.update_type))
        object.__setattr__(self, "state_visibility", StateVisibility(self.state_visibility))

    @property
    def is_enabled(self) -> bool:
        return self.update_type != UpdateType.Disabled

    @property
    def update_on_read(self) -> bool:
        return self.update_type == UpdateType.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        return self.state_visibility == StateVisibility.ReturnExpiredIfNotCleanedUp

    @staticmethod
    def new_builder(ttl_ms: int) -> StateTtlConfigBuilder:
        return StateTtlConfigBuilder(ttl_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttl_ms": self.ttl_ms,
            "update_type": self.update_type.value,
            "state_visibility": self.state_visibility.value,
            "time_characteristic": self.time_characteristic.value,
            "full_snapshot_cleanup": self.full_snapshot_cleanup,
            "incremental_cleanup": None
            if self.incremental_cleanup is None
            else {
                "cleanup_size": self.incremental_cleanup.cleanup_size,
                "run_cleanup_for_every_record": self.incremental_cleanup.run_cleanup_for_every_record,
            },
            "compaction_filter_cleanup": None
            if self.compaction_filter_cleanup is None
            else {
                "query_time_after_num_entries": self.compaction_filter_cleanup.query_time_after_num_entries
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StateTtlConfig:
        inc = d.get("incremental_cleanup")
        comp = d.get("compaction_filter_cleanup")
        return cls(
            ttl_ms=int(d["ttl_ms"]),
            update_type=UpdateType(d.get("update_type", "OnCreateAndWrite")),
            state_visibility=StateVisibility(d.get("state_visibility", "NeverReturnExpired")),
            time_characteristic=TtlTimeCharacteristic(d.get("time_characteristic", "ProcessingTime")),
            full_snapshot_cleanup=bool(d.get("full_snapshot_cleanup", False)),
            incremental_cleanup=None if inc is None else IncrementalCleanup(**inc),
            compaction_filter_cleanup=None if comp is None else CompactionFilterCleanup(**comp),
        )


class StateTtlConfigBuilder:
    """Flink-style fluent builder."""

    def __init__(self, ttl_ms: int) -> None:
        self._cfg = StateTtlConfig(ttl_ms)

    def set_update_type(self, t: UpdateType) -> StateTtlConfigBuilder:
        self._cfg = replace(self._cfg, update_type=t)
        return self

    def update_ttl_on_create_and_write(self) -> StateTtlConfigBuilder:
        return self.set_update_type(UpdateType.OnCreateAndWrite)

    def update_ttl_on_read_and_write(self) -> StateTtlConfigBuilder:
        return self.set_update_type(UpdateType.OnReadAndWrite)

    def set_state_visibility(self, v: StateVisibility) -> StateTtlConfigBuilder:
        self._cfg = replace(self._cfg, state_visibility=v)
        return self

    def return_expired_if_not_cleaned_up(self) -> StateTtlConfigBuilder:
        return self.set_state_visibility(StateVisibility.ReturnExpiredIfNotCleanedUp)

    def never_return_expired(self) -> StateTtlConfigBuilder:
        return self.set_state_visibility(StateVisibility.NeverReturnExpired)

    def cleanup_full_snapshot(self) -> StateTtlConfigBuilder:
        self._cfg = replace(self._cfg, full_snapshot_cleanup=True)
        return self

    def cleanup_incrementally(
        self, cleanup_size: int, run_cleanup_for_every_record: bool
    ) -> StateTtlConfigBuilder:
        self._cfg = replace(
            self._cfg, incremental_cleanup=IncrementalCleanup(cleanup_size, run_cleanup_for_every_record)
        )
        return self

    def cleanup_in_compaction_filter(self, query_time_after_num_entries: int = 1000) -> StateTtlConfigBuilder:
        self._cfg = replace(
            self._cfg, compaction_filter_cleanup=CompactionFilterCleanup(query_time_after_num_entries)
        )
        return self

    def disable_cleanup_in_background(self) -> StateTtlConfigBuilder:
        self._cfg = replace(self._cfg, incremental_cleanup=None, compaction_filter_cleanup=None)
        return self

    def build(self) -> StateTtlConfig:
        return self._cfg
