"""The fluent way to build a :class:`~harness.job.JobGraph` (:class:`JobBuilder`). Re-exported by
``harness.job`` and ``harness``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from harness.job.functions import KeyedBroadcastProcessFunction, KeyedProcessFunction, SourceFunction
from harness.job.job_errors import JobDefinitionError
from harness.job.job_graph import (
    Chained,
    JobGraph,
    SourceSpec,
    StageSpec,
    StateBackendConfig,
    WatermarkStrategy,
)
from harness.job.output_contract import OutputContract

__all__ = ["JobBuilder"]


class JobBuilder:
    """``JobBuilder("count", max_parallelism=128).source("source", src, 2).key_by(sel)
    .process("count", fn, 2).map(f, "fmt").sink(ExactlyOnceFileSinkSpec()).build()``.

    ``map``/``filter``/``flat_map`` chain onto the source or the stage before them; ``output`` and
    ``state_depends_on_interleaving`` state the :class:`OutputContract`."""

    def __init__(self, name: str, max_parallelism: int = 128) -> None:
        self.name = name
        self.max_parallelism = max_parallelism
        self._source: SourceSpec | None = None
        self._stages: list[StageSpec] = []
        self._key: Callable[[Any], Any] | None = None
        self._broadcast: SourceSpec | None = None
        self._contract = OutputContract()
        self._backend = StateBackendConfig()

    def source(
        self,
        name: str,
        function: SourceFunction,
        parallelism: int = 1,
        watermarks: WatermarkStrategy | None = None,
    ) -> JobBuilder:
        """The job's source; ``watermarks`` gives its records event time (per-split watermarks)."""
        self._source = SourceSpec(name, function, parallelism, watermarks=watermarks)
        return self

    def key_by(self, selector: Callable[[Any], Any]) -> JobBuilder:
        self._key = selector
        return self

    def connect_broadcast(self, name: str, function: SourceFunction, parallelism: int = 1) -> JobBuilder:
        """Broadcast source ``name`` to every subtask of the next keyed stage (after ``key_by``),
        whose function must be a :class:`KeyedBroadcastProcessFunction`."""
        if self._key is None:
            raise JobDefinitionError(f"connect_broadcast({name!r}): call key_by(...) first")
        self._broadcast = SourceSpec(name, function, parallelism)
        return self

    def process(self, name: str, function: KeyedProcessFunction, parallelism: int = 1) -> JobBuilder:
        if self._key is None:
            raise JobDefinitionError(f"stage {name!r}: call key_by(...) before process(...)")
        if not isinstance(function, KeyedProcessFunction):
            raise JobDefinitionError(f"stage {name!r}: expected a KeyedProcessFunction, got {function!r}")
        if self._broadcast is not None and not isinstance(function, KeyedBroadcastProcessFunction):
            raise JobDefinitionError(
                f"stage {name!r} has a broadcast input: expected a KeyedBroadcastProcessFunction"
            )
        self._stages.append(StageSpec(name, self._key, function, parallelism, broadcast=self._broadcast))
        self._key = self._broadcast = None
        return self

    def _chain(self, kind: str, fn: Callable[[Any], Any], name: str | None) -> JobBuilder:
        if self._key is not None:
            raise JobDefinitionError(f"{kind}(...) after key_by(...): call process(...) first")
        if self._stages:
            chain = self._stages[-1].chain
        elif self._source is not None:
            chain = self._source.chain
        else:
            raise JobDefinitionError(f"{kind}(...) needs a source or keyed stage before it")
        chain.append(Chained(kind, fn, name or f"{kind}-{len(self.graph_names())}"))
        return self

    def graph_names(self) -> list[str]:
        src = [] if self._source is None else [self._source.name, *(c.name for c in self._source.chain)]
        return src + [n for s in self._stages for n in (s.name, *(c.name for c in s.chain))]

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> JobBuilder:
        return self._chain("map", fn, name)

    def filter(self, fn: Callable[[Any], bool], name: str | None = None) -> JobBuilder:
        return self._chain("filter", fn, name)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> JobBuilder:
        return self._chain("flat_map", fn, name)

    def sink(self, sink: Any) -> JobBuilder:
        if not self._stages:
            raise JobDefinitionError("sink(...) needs a keyed stage before it")
        self._stages[-1].sink = sink
        return self

    def output(
        self,
        *,
        identity: Callable[[Any], Any] | None = None,
        identity_name: str | None = None,
        key: Callable[[Any], Any] | None = None,
        seq: Callable[[Any], int] | None = None,
        expected: Callable[[list[Any]], list[Any]] | None = None,
        compare: Callable[[Any], Any] | None = None,
    ) -> JobBuilder:
        """Declare what the output means (see :class:`OutputContract`)."""
        c = self._contract
        c.identity, c.key, c.seq, c.expected, c.compare = identity, key, seq, expected, compare
        c.identity_name = identity_name or ("record" if identity is None else "id")
        return self

    def state_depends_on_interleaving(self, why: str, states: Iterable[str] | None = None) -> JobBuilder:
        """The job's state at a checkpoint legitimately depends on input interleaving or processing
        time: the restored-state oracle then skips the model comparison and says so. ``states``
        names the keyed or operator states concerned (the others are still compared); without it, the whole
        comparison is skipped and the verdict covers only restores against their checkpoints."""
        self._contract.interleaving = why
        self._contract.interleaving_states = None if states is None else frozenset(states)
        return self

    def expected_columns(self, fn: Callable[[], Any]) -> JobBuilder:
        """The expected output in columns (``harness.jobs.KeySeqOutput``), for jobs whose output is
        ``[key, seq, ...]``: lets the exactly-once oracle check millions of records per second."""
        self._contract.expected_columns = fn
        return self

    def oracle_config(self, oracle: str, config: Any) -> JobBuilder:
        """Typed settings for one oracle (e.g. ``"ttl"``: ``harness.jobs.ttl_verify.TtlReads``)."""
        self._contract.oracle_config[oracle] = config
        return self

    def state_backend(self, kind: str, incremental: bool = False) -> JobBuilder:
        """Keep keyed state in ``heap`` (default) or ``rocksdb``, optionally with incremental
        checkpoints; a scenario's ``state_backend``/``incremental`` override it."""
        self._backend = StateBackendConfig(kind, incremental)
        return self

    def build(self) -> JobGraph:
        if self._source is None:
            raise JobDefinitionError(f"job {self.name!r} has no source")
        if self._key is not None:
            raise JobDefinitionError(f"job {self.name!r}: key_by(...) without a process(...) after it")
        g = JobGraph(
            self.name, self.max_parallelism, self._source, list(self._stages), self._contract, self._backend
        )
        g.validate()
        return g
