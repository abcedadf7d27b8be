"""Jobs: the registry of named jobs, ``module:factory`` references to users' jobs, and
:func:`load_job`, which turns a scenario's job settings into the :class:`JobSpec` a run uses.
Built-in jobs (``keyed_count``, ``ttl_verify``) register themselves like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.job import JobDefinitionError
from harness.jobs.registry import (
    JOBS,
    UnknownJobError,
    build_graph,
    declared_args,
    register_job,
    resolve_factory,
)
from harness.jobs.spec import JobSpec, KeySeqOutput
from harness.reference.cache import reference_key

__all__ = ["JOBS", "JobSpec", "KeySeqOutput", "UnknownJobError", "register_job", "load_job", "build_job"]


def load_job(
    ref: str,
    options: dict[str, Any] | None = None,
    *,
    records: int | None = None,
    keys: int | None = None,
    seed: int | None = None,
    parallelism: dict[str, int] | int | None = None,
    max_parallelism: int | None = None,
    base_dir: Path | None = None,
) -> JobSpec:
    """The job ``ref`` names, built with ``options``, at ``parallelism`` (an int sets every task;
    a mapping names operators) and ``max_parallelism`` when given."""
    factory, module = resolve_factory(ref, base_dir)
    scenario_args = {k: v for k, v in (("records", records), ("keys", keys), ("seed", seed)) if v is not None}
    graph = build_graph(factory, ref, dict(options or {}), scenario_args)
    try:
        if max_parallelism is not None:
            graph = graph.with_max_parallelism(max_parallelism)
        if parallelism is not None:
            graph = graph.with_parallelism(parallelism)
    except JobDefinitionError as e:
        raise UnknownJobError(str(e)) from None
    args = {**declared_args(factory, scenario_args, options or {}), **(options or {})}
    return JobSpec(graph, dict(options or {}), module, reference_key(ref, factory, args, graph))


def build_job(
    name: str,
    records: int,
    keys: int,
    seed: int,
    max_parallelism: int,
    parallelism: dict[str, int] | int,
    options: dict[str, Any] | None = None,
) -> JobSpec:
    """A job at the given size and parallelism (shorthand of :func:`load_job`)."""
    return load_job(
        name,
        options,
        records=records,
        keys=keys,
        seed=seed,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
    )


# the built-in jobs register themselves on import
from harness.jobs import allround as _allround  # noqa: E402,F401
from harness.jobs import keyed_count as _keyed_count  # noqa: E402,F401
from harness.jobs import ttl_verify as _ttl_verify  # noqa: E402,F401
