"""A user's own test file, using only the plugin's fixtures, runs a scenario on local-cluster and
asserts on the oracles: ``examples/test_user_chaos.py`` is copied into an empty folder (no project
conftest, no pyproject) and run in a fresh pytest session, as a user's project would run it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from suites.waits import run_while_progressing

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_users_own_chaos_tests_run_on_local_cluster_with_only_the_plugin(tmp_path, java):
    project = tmp_path / "user-project"
    project.mkdir()
    shutil.copy(EXAMPLES / "test_user_chaos.py", project)
    shutil.copytree(EXAMPLES / "scenarios", project / "scenarios")
    alluredir = tmp_path / "allure-results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = run_while_progressing(  # fails only when neither its folders nor its output moved for 300 s
        [sys.executable, "-m", "pytest", "test_user_chaos.py", "-p", "no:cacheprovider", "-v", "-rA"]
        + [f"--alluredir={alluredir}", f"--basetemp={tmp_path / 'basetemp'}"],
        tmp_path,
        "the user's chaos tests",
        stall_s=300,
        cwd=project,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "test_keyed_count_survives_an_executor_kill PASSED" in proc.stdout, proc.stdout[-3000:]
    assert "3 passed" in proc.stdout, proc.stdout[-2000:]  # the local-cluster test and two folder cases
    results = [json.loads(f.read_text()) for f in alluredir.glob("*-result.json")]
    local = next(r for r in results if r["name"] == "test_keyed_count_survives_an_executor_kill")
    assert local["status"] == "passed"
    params = {p["name"]: p["value"] for p in local["parameters"]}
    assert params["cluster"].strip("'") == "local"
    steps = [s["name"] for top in local["steps"] for s in top.get("steps", [])]
    assert any(s.startswith("fault: kill_executor on ") for s in steps), steps
    assert any(s.startswith("restore from checkpoint") for s in steps), steps
