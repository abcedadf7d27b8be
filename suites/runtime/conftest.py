"""Helpers for the runtime suite: run a scenario (as a dict) on the sim executor and get verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import allure
import pytest

from chaos.report.runner import ScenarioOutcome, run_scenario
from chaos.scenario import Scenario
from chaos.scenario_job import DEFAULT_CHECKS
from harness import KeyedProcessFunction
from harness.jobs import register_job
from harness.jobs.keyed_count import keyed_count
from harness.jobs.registry import JOBS

BASE: dict[str, Any] = {
    "name": "t",
    "cluster": "sim",
    "job": "keyed_count",
    "parallelism": {"source": 2, "count": 2},
    "max_parallelism": 32,
    "records": 3000,
    "keys": 40,
    "checkpoint": {"interval_ms": 40, "retained": 2},
    # the checks a scenario that names none gets (so the suite judges what users' runs judge), and rescale
    "checks": [*DEFAULT_CHECKS, "rescale"],
    "seed": 1,
}


# the allround job at a size its planted-bug tests run in a second or two (each adds its faults)
SMALL_ALLROUND: dict[str, Any] = {
    "job": "allround",
    "records": 3000,
    "max_parallelism": 64,
    "parallelism": {"events": 2, "sessions": 2, "profile": 2},
    "checkpoint": {"interval_ms": 15, "retained": 2},
}


def keyed_count_with(name: str, function: type[KeyedProcessFunction]) -> str:
    """Register, once, job ``name``: keyed_count whose counting stage runs a new ``function()`` (a test's
    own stateful function, judged against keyed_count's input and reference). Returns ``name``."""

    def build(records: int = 3000, keys: int = 40, seed: int = 0, parallelism: int = 1) -> Any:
        g = keyed_count(records, keys, seed, parallelism)
        g.stages[0].function = function()
        return g

    if name not in JOBS:
        register_job(name, build)
    return name


def scenario(**overrides: Any) -> dict[str, Any]:
    """BASE with ``overrides``; without faults or rescales, BASE's checks that judge restores
    (``restored_state``, ``rescale``) are left out: they would have nothing to judge (``unknown``)."""
    sc = {**BASE, **overrides}
    if "checks" not in overrides and not sc.get("faults") and not sc.get("rescale"):
        sc["checks"] = [c for c in BASE["checks"] if c not in ("restored_state", "rescale")]
    return sc


@pytest.fixture
def sim_run(tmp_path: Path):
    n = iter(range(10_000))

    def run(**overrides: Any) -> ScenarioOutcome:
        sc = Scenario.model_validate(scenario(**overrides))
        return run_scenario(sc, tmp_path / f"run-{next(n)}")

    return run


def failed(outcome: ScenarioOutcome) -> set[str]:
    """The checks that do not hold; a run the job gave up on counts as ``"infrastructure"`` (any other
    error is a test failure)."""
    if outcome.error_kind == "infrastructure":
        return {"infrastructure"}
    assert outcome.error is None, outcome.error
    return {v["oracle"] for v in outcome.verdicts if not v["passed"]}


def fails(outcome: ScenarioOutcome) -> set[str]:
    """The checks that fail with evidence (not ``unknown``): what a planted bug must be caught by;
    a run the job gave up on counts as ``"infrastructure"``."""
    if outcome.error_kind == "infrastructure":
        return {"infrastructure"}
    assert outcome.error is None, outcome.error
    return {v["oracle"] for v in outcome.verdicts if v.get("status", "fails") == "fails"}


def caught_when_broken(
    tmp_path: Path, monkeypatch: Any, breaker: Any, overrides: dict[str, Any]
) -> tuple[set[str], ScenarioOutcome]:
    """Run BASE + ``overrides`` on the correct runtime (every check must hold), then again with
    ``breaker`` planted: the checks that caught it (``fails``) and the broken run's outcome."""
    runs = iter(range(2))

    def sim_run() -> ScenarioOutcome:
        return run_scenario(Scenario.model_validate({**BASE, **overrides}), tmp_path / f"run-{next(runs)}")

    healthy = sim_run()
    assert failed(healthy) == set(), f"the scenario must pass on the correct runtime: {healthy.verdicts}"
    breaker(monkeypatch)
    broken = sim_run()
    caught = fails(broken)
    allure.dynamic.parameter("caught by", ", ".join(sorted(caught)) or "nothing")
    return caught, broken
