"""What each engine does with a scenario (its ``engine`` field, :mod:`harness.engines`), so the front
ends (``statechaos`` list / run, the runner, the pytest plugin) take one path for every scenario
(:class:`chaos.scenario.Scenario`, one model whose ``part`` holds the engine's fields) and ask its
engine instead of branching on its kind: how its run is executed and judged, whether it runs a job,
how a field override or another PySpark is applied, how ``list`` describes it.

``runtime``: the job on its cluster (:mod:`chaos.execute`); ``structured_streaming``: the query under
chaos (:mod:`chaos.sss.execute`). Each engine's modules load when a scenario of it is used."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.errors import InputError
from harness.engines import RUNTIME, STRUCTURED_STREAMING

if TYPE_CHECKING:  # only for annotations: each engine's modules load when one of its scenarios runs
    from chaos.scenario import Scenario
    from harness.oracles import Verdict

__all__ = ["Engine", "engine_of", "ListRow"]


@dataclass(frozen=True)
class ListRow:
    """How ``statechaos list`` describes a scenario."""

    cluster: str
    rescale_steps: int
    checks: int


@dataclass(frozen=True)
class Engine:
    name: str
    # run the scenario in the run directory (resume: take over a dead driver's run); (verdicts, statistics)
    execute: Callable[[Scenario, Path, bool], tuple[list[Verdict], dict[str, Any]]]
    # whether it runs a job (``job``: a registered name or ``module:factory``), whose module the run
    # directory keeps so ``replay`` runs the same code; a query is named by its module:function instead
    runs_job: bool
    # the scenario with fields replaced, validated again (source: where the fields came from)
    override: Callable[[Scenario, dict[str, Any], str], Scenario]
    list_row: Callable[[Scenario], ListRow]
    # the scenario run under another PySpark; None: this engine runs on statechaos's own
    on_pyspark: Callable[[Scenario, str], Scenario] | None = None


# ---------------------------------------------------------------------------------------------- runtime


def _runtime_execute(sc: Scenario, run_dir: Path, resume: bool) -> tuple[list[Verdict], dict[str, Any]]:
    from chaos.execute import execute_scenario

    return execute_scenario(sc, run_dir, resume=resume)


def _runtime_override(sc: Scenario, fields: dict[str, Any], source: str) -> Scenario:
    from chaos.scenario import ScenarioError, _field_name
    from chaos.scenario_job import job_problems

    out = sc.with_fields(fields)
    problems = job_problems(out, sc.base_dir)
    if problems:
        raise ScenarioError(source, [(None, _field_name(loc), m) for loc, m in problems])
    return out


def _runtime_row(sc: Scenario) -> ListRow:
    from chaos.scenario_job import checks_for, scenario_job

    checks = checks_for(sc, scenario_job(sc, sc.base_dir).graph)  # validated: the job builds
    return ListRow(sc.cluster, len(sc.runtime.rescale), len(checks))


# --------------------------------------------------------------------------------- structured_streaming


def _query_execute(sc: Scenario, run_dir: Path, resume: bool) -> tuple[list[Verdict], dict[str, Any]]:
    from chaos.sss.execute import execute_sss

    if resume:  # its driver restarts are the query's own, from its checkpoint location
        raise InputError(
            f"scenario {sc.name!r}: a Structured Streaming run cannot be resumed by a new statechaos "
            "driver; its scenario restarts the query's driver itself (kill_driver faults)"
        )
    return execute_sss(sc, run_dir)


def _query_override(sc: Scenario, fields: dict[str, Any], source: str) -> Scenario:
    return sc.with_fields(fields)


def _query_row(sc: Scenario) -> ListRow:
    return ListRow(f"{sc.cluster} (sss)", 0, len(sc.sss.checks()))  # a query has no rescale steps


def _query_on_pyspark(sc: Scenario, version: str) -> Scenario:
    return sc.with_overrides(spark=version)


_ENGINES = {
    RUNTIME: Engine(RUNTIME, _runtime_execute, True, _runtime_override, _runtime_row),
    STRUCTURED_STREAMING: Engine(STRUCTURED_STREAMING, _query_execute, False, _query_override, _query_row,
                                 _query_on_pyspark),  # fmt: skip
}


def engine_of(sc: Scenario) -> Engine:
    """The engine a scenario runs on."""
    return _ENGINES[sc.engine]
