"""The dataflow runtime, and the public job API in one place::

    from harness import (JobBuilder, KeyedProcessFunction, RuntimeContext, SourceFunction,
                         ExactlyOnceFileSinkSpec, JsonLinesSource, CsvSource, GeneratorSource,
                         SequenceSource, ValueStateDescriptor, MapStateDescriptor, ...)

Names resolve on first use, so importing a runtime module (as Spark's Python workers do) does not
import the whole API.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "OutputContract": "harness.output_contract",
    # sinks and sources
    "ExactlyOnceFileSinkSpec": "harness.sinks",
    "SequenceSource": "harness.sources",
    "JsonLinesSource": "harness.sources",
    "CsvSource": "harness.sources",
    "GeneratorSource": "harness.sources",
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

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
