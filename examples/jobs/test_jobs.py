"""Chaos tests for the example jobs, written only against the statechaos pytest plugin's fixtures:
each job must pass every check under its scenario's crashes and rescale, and its broken twin must
be caught by the oracles.

    pytest examples/jobs/test_jobs.py --alluredir=allure-results && allure serve allure-results
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JOBS = ["dedup", "fraud", "wordcount"]


@pytest.mark.parametrize("job", JOBS)
def test_job_survives_crashes_and_a_rescale(job, run_scenario, assert_oracles):
    outcome = run_scenario(HERE / f"{job}-sim.yaml")
    assert_oracles(outcome)


@pytest.mark.parametrize(
    "job, oracle, names",
    [
        ("dedup", "exactly_once", "duplicated: event_id 'e"),
        ("fraud", "exactly_once", "lost: (txn_id, score) ['t"),
        ("wordcount", "exactly_once", "duplicated: ['"),
    ],
)
def test_broken_twin_is_caught(job, oracle, names, run_scenario):
    outcome = run_scenario(HERE / f"{job}-sim.yaml", job=f"{job}:build_broken")
    failed = {v.oracle: v for v in outcome.verdicts if not v.holds}
    assert oracle in failed, outcome.verdicts
    assert any(d.startswith(names) for d in failed[oracle]["details"]), failed[oracle]["details"][:5]


def test_a_job_built_in_python(run_scenario, assert_oracles):
    """No YAML needed for the job: a factory (or a built JobGraph) goes straight to run_scenario."""
    sys.path.insert(0, str(HERE))  # pytest's importlib mode does not put this folder on sys.path
    try:
        import wordcount
    finally:
        sys.path.remove(str(HERE))
    outcome = run_scenario(
        HERE / "wordcount-sim.yaml", job=wordcount.build, parallelism={"lines": 3, "counts": 3}
    )
    assert_oracles(outcome)


def test_every_checkpoint_of_a_job_reading_files_is_judged(run_scenario, assert_oracles):
    """``checkpoint_state`` on a job whose splits are file paths (a ``/`` in every split name, which
    once read as a broadcast input's split): each completed checkpoint equals the reference at its cut."""
    outcome = run_scenario(HERE / "wordcount-sim.yaml")  # its checks name checkpoint_state
    assert_oracles(outcome)
    (v,) = [v for v in outcome.verdicts if v.oracle == "checkpoint_state"]
    assert v["data"]["checkpoints"] > 0 and v["data"]["key_groups"] > 0, v
