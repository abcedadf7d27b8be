"""A run's limit follows its progress, not the clock: on local-cluster a run whose keyed subtasks
hang fails its liveness check once nothing progressed for ``stall_limit_s``, naming what stopped; a run slower than that
bound in total but progressing all along passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
# bounds the running job; while its tasks start the driver allows at least TASK_START_BOUND_S (120 s)
STALL_S = 20


def _scenario(tmp_path: Path, name: str, **options: object) -> Path:
    shutil.copy(HERE / "stall_job.py", tmp_path / "stall_job.py")  # shipped to the executors from here
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "cluster": "local",
                "job": "stall_job:build",
                "job_options": options,
                "parallelism": {"source": 2, "count": 2},
                "checkpoint": {"interval_ms": 200},
                "checks": ["exactly_once", "liveness"],
                "stall_limit_s": STALL_S,
                "seed": 1,
            }
        )
    )
    return path


def test_a_run_that_stalls_fails_liveness_naming_what_stopped(tmp_path, run_scenario):
    """A stall is a finding (the liveness verdict fails, exit 1), not an infrastructure error."""
    outcome = run_scenario(
        _scenario(tmp_path, "stalls", records_per_split=300, hang_after=20), allow_error=True
    )
    assert outcome.error is None and outcome.result == "failed", outcome.error
    live = next(v for v in outcome.verdicts if v["oracle"] == "liveness")
    assert live["status"] == "fails" and "checkpoints_completed" in live["data"]["stopped"], live
    text = " ".join(live["details"])
    assert "no progress for" in text and f"(bound {STALL_S} s)" in text, text
    assert "checkpoints_completed (0) unchanged for" in text, text  # what stopped, and since when
    assert "waiting for: deployment 0: 4/4 tasks registered" in text, text
    assert next(v for v in outcome.verdicts if v["oracle"] == "exactly_once")["status"] == "unknown"


def test_a_slow_run_that_keeps_progressing_passes(tmp_path, run_scenario, assert_oracles):
    # each source subtask reads 6000 records at 4 ms each: 24 s, more than the stall limit, with
    # progress reported after every 256 records (1 s)
    outcome = run_scenario(_scenario(tmp_path, "slow", records_per_split=6000, sleep_ms=4))
    assert_oracles(outcome)
    assert outcome.seconds > 24 > STALL_S
