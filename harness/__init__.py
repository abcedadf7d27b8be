"""The dataflow runtime, and the public job API in one place::

    from harness import (JobBuilder, KeyedProcessFunction, RuntimeContext, SourceFunction,
                         ExactlyOnceFileSinkSpec, JsonLinesSource, CsvSource, GeneratorSource,
                         SequenceSource, ValueStateDescriptor, MapStateDescriptor, ...)

The type checker sees the names imported explicitly (under ``TYPE_CHECKING``); at run time each
resolves on first use, so importing a runtime module (as Spark's Python workers and the Structured
Streaming driver do) does not import the whole API and its dependencies (msgpack, mmh3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from harness.job import (
        JobBuilder,
        JobDefinitionError,
        JobGraph,
        KeyedBroadcastProcessFunction,
        KeyedProcessFunction,
        RuntimeContext,
        SourceFunction,
        StateBackendConfig,
        WatermarkStrategy,
    )
    from harness.job.output_contract import OutputContract
    from harness.job.sinks import ExactlyOnceFileSinkSpec
    from harness.job.sources import CsvSource, GeneratorSource, JsonLinesSource, SequenceSource
    from harness.jobs import JobSpec, load_job, register_job
    from harness.jobs.ttl_verify import TtlReads
    from reference_impl.state import (
        AggregatingStateDescriptor,
        ListStateDescriptor,
        MapStateDescriptor,
        ReducingStateDescriptor,
        ValueStateDescriptor,
    )
    from reference_impl.timers import MAX_WATERMARK, MIN_WATERMARK, TimerService
    from reference_impl.ttl import StateTtlConfig

_API = {
    # job graphs
    "JobBuilder": "harness.job",
    "JobGraph": "harness.job",
    "JobDefinitionError": "harness.job",
    "KeyedProcessFunction": "harness.job",
    "KeyedBroadcastProcessFunction": "harness.job",
    "RuntimeContext": "harness.job",
    "SourceFunction": "harness.job",
    "WatermarkStrategy": "harness.job",
    "StateBackendConfig": "harness.job",
    "TimerService": "reference_impl.timers",
    "MIN_WATERMARK": "reference_impl.timers",
    "MAX_WATERMARK": "reference_impl.timers",
    "OutputContract": "harness.job.output_contract",
    # sinks and sources
    "ExactlyOnceFileSinkSpec": "harness.job.sinks",
    "SequenceSource": "harness.job.sources",
    "JsonLinesSource": "harness.job.sources",
    "CsvSource": "harness.job.sources",
    "GeneratorSource": "harness.job.sources",
    # state
    "ValueStateDescriptor": "reference_impl.state",
    "ListStateDescriptor": "reference_impl.state",
    "MapStateDescriptor": "reference_impl.state",
    "ReducingStateDescriptor": "reference_impl.state",
    "AggregatingStateDescriptor": "reference_impl.state",
    "StateTtlConfig": "reference_impl.ttl",
    # the registry and oracle settings
    "register_job": "harness.jobs",
    "load_job": "harness.jobs",
    "JobSpec": "harness.jobs",
    "TtlReads": "harness.jobs.ttl_verify",
}

__all__ = [
    "AggregatingStateDescriptor",
    "CsvSource",
    "ExactlyOnceFileSinkSpec",
    "GeneratorSource",
    "JobBuilder",
    "JobDefinitionError",
    "JobGraph",
    "JobSpec",
    "JsonLinesSource",
    "KeyedBroadcastProcessFunction",
    "KeyedProcessFunction",
    "ListStateDescriptor",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "MapStateDescriptor",
    "OutputContract",
    "ReducingStateDescriptor",
    "RuntimeContext",
    "SequenceSource",
    "SourceFunction",
    "StateBackendConfig",
    "StateTtlConfig",
    "TimerService",
    "TtlReads",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "load_job",
    "register_job",
]

if not TYPE_CHECKING:
    __getattr__ = lazy_getattr(__name__, _API, globals())


def __dir__() -> list[str]:
    return __all__
