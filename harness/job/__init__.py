"""The job API: a source, then any number of keyed process stages (each ``key_by`` a selector),
stateless ``map``/``filter``/``flat_map`` chained onto the source or a stage, and an exactly-once
sink on the last stage. Functions are plain Python. Every operator has a name; the source and each
keyed stage are tasks with their own parallelism (chained operators run inside the task before them,
as Flink chains them); the job has a max parallelism (its number of key groups).

The job also states what its output means (:class:`OutputContract`): which field identifies a
record, which is its key, whether it carries a per-key sequence number, and whether its state at a
checkpoint depends on how inputs interleave. The oracles read only that and the graph.

A job graph is a description, not running code: every executor deep-copies the function templates
for each subtask and attempt, so the sim executor and the Spark executor run the very same task code
(``harness.tasks``) from the very same graph.

One import for the job API, which lives in ``functions`` (what a job's functions are and see),
``job_graph`` (the graph), ``job_builder`` (how one is built) and ``job_errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from harness.job.functions import (
        KeyedBroadcastProcessFunction,
        KeyedProcessFunction,
        ReadOnlyBroadcastState,
        RuntimeContext,
        SourceFunction,
    )
    from harness.job.job_builder import JobBuilder
    from harness.job.job_errors import JobDefinitionError
    from harness.job.job_graph import (
        STATE_BACKENDS,
        Chained,
        JobGraph,
        SourceSpec,
        StageSpec,
        StateBackendConfig,
        WatermarkStrategy,
        apply_chain,
        task_name,
    )
    from harness.job.output_contract import OutputContract

# each name loads its module on first use: importing one module of this package imports no other
_API = {
    "task_name": "harness.job.job_graph",
    "RuntimeContext": "harness.job.functions",
    "KeyedProcessFunction": "harness.job.functions",
    "KeyedBroadcastProcessFunction": "harness.job.functions",
    "ReadOnlyBroadcastState": "harness.job.functions",
    "SourceFunction": "harness.job.functions",
    "SourceSpec": "harness.job.job_graph",
    "StageSpec": "harness.job.job_graph",
    "Chained": "harness.job.job_graph",
    "apply_chain": "harness.job.job_graph",
    "OutputContract": "harness.job.output_contract",
    "JobGraph": "harness.job.job_graph",
    "JobBuilder": "harness.job.job_builder",
    "JobDefinitionError": "harness.job.job_errors",
    "StateBackendConfig": "harness.job.job_graph",
    "STATE_BACKENDS": "harness.job.job_graph",
    "WatermarkStrategy": "harness.job.job_graph",
}

__all__ = [
    "task_name",
    "RuntimeContext",
    "KeyedProcessFunction",
    "KeyedBroadcastProcessFunction",
    "ReadOnlyBroadcastState",
    "SourceFunction",
    "SourceSpec",
    "StageSpec",
    "Chained",
    "apply_chain",
    "OutputContract",
    "JobGraph",
    "JobBuilder",
    "JobDefinitionError",
    "StateBackendConfig",
    "STATE_BACKENDS",
    "WatermarkStrategy",
]

if not TYPE_CHECKING:
    __getattr__ = lazy_getattr(__name__, _API, globals())


def __dir__() -> list[str]:
    return __all__
