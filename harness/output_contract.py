"""What a job's committed output means to the oracles, declared by the job itself
(``JobBuilder.output``, ``state_depends_on_interleaving``, ``oracle_config``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OutputContract"]


def _whole(record: Any) -> Any:
    """A record as a hashable value: lists become tuples, dicts sorted item tuples."""
    if isinstance(record, list | tuple):
        return tuple(_whole(x) for x in record)
    if isinstance(record, dict):
        return tuple(sorted((k, _whole(v)) for k, v in record.items()))
    return record


@dataclass
class OutputContract:
    """What the job's committed output means to the oracles.

    - ``identity``: what makes an output record unique (an event id, say); default the whole
      record. Failure reports name records by it (``identity_name`` labels it).
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
    key: Callable[[Any], Any] | None = None
    seq: Callable[[Any], int] | None = None
    expected: Callable[[list[Any]], list[Any]] | None = None
    interleaving: str | None = None
    interleaving_states: frozenset[str] | None = None
    oracle_config: dict[str, Any] = field(default_factory=dict)
    expected_columns: Callable[[], Any] | None = None  # optional columnar form (harness.contract)

    def identity_of(self, record: Any) -> Any:
        return _whole(self.identity(record) if self.identity is not None else record)
