"""Which downstream subtask a record goes to: the one owning its key's key group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.tasks.task_env import OutputWriter
from reference_impl.keygroups import (
    assign_to_key_group,
    compute_operator_index_for_key_group,
)

__all__ = ["Partitioner"]


class Partitioner:
    """Routes a record to the downstream subtask owning its key group (cached per key)."""

    def __init__(self, key_selector: Callable[[Any], Any], max_parallelism: int, parallelism: int) -> None:
        self.key_selector = key_selector
        self.max_p = max_parallelism
        self.p = parallelism
        self._cache: dict[Any, int] = {}

    def __call__(self, record: Any) -> int:
        key = self.key_selector(record)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._target(key)
        return t

    def _target(self, key: Any) -> int:
        """The subtask owning ``key``'s key group (every route is computed here, then cached)."""
        return compute_operator_index_for_key_group(self.max_p, self.p, assign_to_key_group(key, self.max_p))

    def send_all(self, output: OutputWriter, records: list[Any]) -> None:
        """Send ``records`` to their subtasks, in order per subtask, one call per subtask."""
        if not records:
            return
        if self.p == 1:  # one downstream subtask owns every key group
            output.send_records(0, records)
            return
        sel, cache = self.key_selector, self._cache
        per: list[list[Any]] = [[] for _ in range(self.p)]
        for r in records:
            key = sel(r)
            t = cache.get(key)
            if t is None:
                t = cache[key] = self._target(key)
            per[t].append(r)
        for t, rs in enumerate(per):
            if rs:
                output.send_records(t, rs)
