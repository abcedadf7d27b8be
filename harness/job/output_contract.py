"""What a job's committed output means to the oracles, declared by the job itself
(``JobBuilder.output``, ``state_depends_on_interleaving``, ``oracle_config``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OutputContract"]


_SCALARS = frozenset((int, float, str, bytes, bool, type(None)))


def _whole(record: Any) -> Any:
    """A record as a hashable value: lists become tuples, dicts sorted item tuples. (A flat list or
    dict, the usual record, is converted in one C call: its scalars stay as they are.)"""
    t = type(record)
    if t is dict:
        if set(map(type, record.values())) <= _SCALARS:
            return tuple(sorted(record.items()))
        return tuple(sorted((k, _whole(v)) for k, v in record.items()))
    if t is list or t is tuple:
        if set(map(type, record)) <= _SCALARS:
            return tuple(record)
        return tuple(_whole(x) for x in record)
    if isinstance(record, list | tuple):
        return tuple(_whole(x) for x in record)
    if isinstance(record, dict):
        return tuple(sorted((k, _whole(v)) for k, v in record.items()))
    return record


@dataclass
class OutputContract:
    """What the job's committed output means to the oracles.

    - ``identity``: what makes an output record unique (an event id, say); default ``compare``'s
      value, else the whole record. Failure reports name records by it (``identity_name`` labels it).
    - ``compare``: the part of a record that must equal the reference's record of the same identity
      (default the whole record); leave out fields that depend on processing time.
    - ``key``: the record's key; when set, per-key order must match the reference's.
    - ``seq``: a per-key sequence number rising by 1 from 1 (enables the ``sequence`` check).
    - ``expected``: ``inputs -> outputs``, the fault-free output, instead of running the reference.
    - ``interleaving``: why this job's state at a checkpoint depends on how inputs from different
      subtasks interleave (or on processing time); the state model comparison is then skipped, for
      the keyed states in ``interleaving_states`` or, when that is None, for all of them.
    - ``oracle_config``: typed settings for oracles that need them (e.g. ``ttl``).
    """

    identity: Callable[[Any], Any] | None = None
    identity_name: str = "record"
    compare: Callable[[Any], Any] | None = None
    key: Callable[[Any], Any] | None = None
    seq: Callable[[Any], int] | None = None
    expected: Callable[[list[Any]], list[Any]] | None = None
    interleaving: str | None = None
    interleaving_states: frozenset[str] | None = None
    oracle_config: dict[str, Any] = field(default_factory=dict)
    expected_columns: Callable[[], Any] | None = None  # optional columnar form (harness.contract)

    def identity_of(self, record: Any) -> Any:
        if self.identity is not None:
            return _whole(self.identity(record))
        return self.content_of(record)

    def content_of(self, record: Any) -> Any:
        """What of ``record`` the exactly-once oracle compares with the reference's record."""
        return _whole(self.compare(record) if self.compare is not None else record)

    @property
    def content_beyond_identity(self) -> bool:
        """Whether a record holds compared fields its identity leaves out (then records of equal
        identity are compared field by field)."""
        return self.identity is not None and self.compare is not self.identity
