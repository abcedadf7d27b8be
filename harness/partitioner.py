"""Which downstream subtask a record goes to: the one owning its key's key group."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
            kg = assign_to_key_group(key, self.max_p)
            t = compute_operator_index_for_key_group(self.max_p, self.p, kg)
            self._cache[key] = t
        return t
