"""What the oracles get for a run: the job graph as it ran, and the fault-free reference computed
from it on demand (or from the job's own ``expected`` function)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from harness.job import JobGraph, OutputContract, SourceFunction
from harness.job.sources import SequenceSource, key_name
from harness.reference import cache as reference_cache
from harness.reference.run import ReferenceRun, reference_output

__all__ = ["JobSpec", "KeySeqOutput"]

T = TypeVar("T")

# what oracles derive from a fault-free output alone, by that output's identity (the cached list is the
# same object in every run of the job in this process: ``harness.reference.cache``); the list is kept
# in the entry, so its id names it while the entry lives
_DERIVED: dict[int, tuple[list[Any], dict[str, Any]]] = {}
_DERIVED_ENTRIES = 4


@dataclass(frozen=True)
class KeySeqOutput:
    """The fault-free output in columns, so an oracle can check millions of records without a Python
    object per record: key ``keys[i]`` has exactly one record per seq ``1..counts[i]``, and field
    ``2 + j`` of that record is ``extra[j][starts[i] + seq - 1]`` (``starts`` = exclusive cumsum).
    A job whose output has this shape may offer it as ``OutputContract.expected_columns``."""

    keys: list[Any]
    counts: np.ndarray
    extra: tuple[np.ndarray, ...] = ()

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.counts) - self.counts

    @classmethod
    def of_source(cls, src: SequenceSource, seq_fields: int = 0) -> KeySeqOutput:
        """Every record of ``src`` as (key, seq), plus ``seq_fields`` more fields equal to seq."""
        base, rem = divmod(src.records, src.keys)
        counts = np.full(src.keys, base, dtype=np.int64)
        counts[:rem] += 1
        starts = np.cumsum(counts) - counts
        seq = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts) + 1
        return cls([key_name(i) for i in range(src.keys)], counts, (seq,) * seq_fields)


@dataclass
class JobSpec:
    """A job graph and its fault-free reference (computed once, when an oracle first asks)."""

    graph: JobGraph
    options: dict[str, Any] = field(default_factory=dict)
    module: ModuleType | None = None  # the user module a ``module:factory`` job came from
    # what the reference depends on (``harness.reference.cache``); None: computed for this spec alone
    reference_key: str | None = None

    @property
    def contract(self) -> OutputContract:
        return self.graph.contract

    @property
    def source(self) -> SourceFunction:
        return self.graph.source.function

    @cached_property
    def _reference(self) -> tuple[list[Any], list[Any]]:
        def compute() -> tuple[list[Any], list[Any]]:
            expected = self.contract.expected
            inputs, output = reference_output(self.graph, run_stages=expected is None)
            if expected is not None:
                output = list(expected(inputs))
            return inputs, output

        return reference_cache.cached(self.reference_key, compute)

    def expected_output(self) -> list[Any]:
        """The fault-free output: the job's ``expected(inputs)``, else the reference run's (kept per
        job, options and input across runs: ``harness.reference.cache``). A copy: callers may keep it."""
        return list(self._reference[1])

    def from_reference(self, name: str, compute: Callable[[list[Any]], T]) -> T:
        """``compute(expected output)``, once per reference and ``name``: what an oracle derives from
        the fault-free output alone (its expected records indexed by identity, say) is kept beside the
        cached reference, so later runs, seeds and ``explore`` iterations of the job reuse it. Shared:
        callers read it and never change it."""
        output = self._reference[1]
        entry = _DERIVED.get(id(output))
        if entry is None or entry[0] is not output:
            if len(_DERIVED) >= _DERIVED_ENTRIES:
                _DERIVED.clear()
            entry = _DERIVED[id(output)] = (output, {})
        memo = entry[1]
        if name not in memo:
            memo[name] = compute(output)
        value: T = memo[name]
        return value

    def expected_columns(self) -> KeySeqOutput | None:
        f = self.contract.expected_columns
        return None if f is None else f()

    def identity_of(self, record: Any) -> Any:
        return self.contract.identity_of(record)

    def reference(self) -> ReferenceRun:
        """A fresh reference at offset 0, to advance to a checkpoint's cut."""
        return ReferenceRun(self.graph)
