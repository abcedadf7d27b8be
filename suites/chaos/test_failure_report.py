"""A failing chaos test must explain itself in Allure: the deliberately failing examples
(``examples/failing/``) run in a fresh pytest session with ``--alluredir``, and their results must carry
the failing oracle, the state diff, the timeline plot, the replay command, the history and the
scenario, and land in the right category (oracle failure vs infrastructure error). The same holds for
``statechaos run --alluredir``."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.report.cli import main
from suites.waits import run_while_progressing

ROOT = Path(__file__).resolve().parents[2]
FAILING = ROOT / "examples" / "failing"
PNG = b"\x89PNG\r\n\x1a\n"


def _results(alluredir: Path) -> dict[str, dict[str, Any]]:
    """Allure test results by test (or scenario) name."""
    out = {}
    for f in alluredir.glob("*-result.json"):
        r = json.loads(f.read_text())
        out[r["name"]] = r
    return out


def _category(alluredir: Path, result: dict[str, Any]) -> str | None:
    """The category Allure files a result under: the first whose statuses and message regex match."""
    message = (result.get("statusDetails") or {}).get("message") or ""
    for c in json.loads((alluredir / "categories.json").read_text()):
        if result["status"] not in c.get("matchedStatuses", []):
            continue
        if "messageRegex" in c and not re.fullmatch(c["messageRegex"], message):
            continue
        return c["name"]
    return None


def _attachment(alluredir: Path, result: dict[str, Any], name: str) -> bytes:
    found = [a for a in result.get("attachments", []) if a["name"] == name]
    assert found, f"no attachment {name!r}; have {[a['name'] for a in result.get('attachments', [])]}"
    return (alluredir / found[0]["source"]).read_bytes()


def _steps(steps: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for s in steps:
        out.append((s["name"], s["status"]))
        out += _steps(s.get("steps", []))
    return out


def _labels(result: dict[str, Any]) -> set[tuple[str, str]]:
    return {(lb["name"], lb["value"]) for lb in result["labels"]}


def _assert_explains_restore_failure(alluredir: Path, result: dict[str, Any]) -> None:
    assert result["status"] == "failed", result["statusDetails"]
    assert "oracle failed: restored_state" in result["statusDetails"]["message"]
    assert _category(alluredir, result) == "Oracle failures"
    explanation = _attachment(alluredir, result, "failing oracle: restored_state").decode()
    assert "FAILED" in explanation and "checkpoint has" in explanation
    diff = _attachment(alluredir, result, "state diff").decode()
    assert re.search(r"restored from checkpoint \d+: \d+ differences", diff), diff[:500]
    assert re.search(r"missing: operator count state 'count' .* key 'key-\d+' \(key group \d+\)", diff)
    assert _attachment(alluredir, result, "timeline").startswith(PNG)
    replay = _attachment(alluredir, result, "replay command").decode()
    run_dir = Path(replay.split()[2])
    assert replay.startswith("statechaos replay ") and (run_dir / "scenario.yaml").is_file()
    history = _attachment(alluredir, result, "history (JSON lines)").decode().splitlines()
    assert {json.loads(line)["type"] for line in history} >= {"fault_start", "restore", "run_end"}
    assert b"broken-restore-demo" in _attachment(alluredir, result, "scenario")
    steps = _steps(result["steps"])
    assert ("fault: crash_task on count[1]", "passed") in steps
    assert any(n.startswith("restore from checkpoint") for n, _ in steps)
    assert ("oracle restored_state: FAILED", "failed") in steps
    assert ("oracle sequence: holds", "passed") in steps
    labels = _labels(result)
    assert {("epic", "chaos"), ("story", "broken-restore-demo"), ("feature", "cluster: sim")} <= labels


@pytest.mark.slow
def test_failing_examples_show_oracle_diff_plot_and_replay_in_allure(tmp_path):
    alluredir = tmp_path / "allure-results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = run_while_progressing(  # fails only when neither its folders nor its output moved for 300 s
        [sys.executable, "-m", "pytest", str(FAILING), "-p", "no:cacheprovider", "-q"]
        + [f"--alluredir={alluredir}", f"--basetemp={tmp_path / 'basetemp'}"],
        tmp_path,
        "the failing examples",
        stall_s=300,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "oracle failed: restored_state" in proc.stdout and "statechaos replay" in proc.stdout
    results = _results(alluredir)
    _assert_explains_restore_failure(alluredir, results["test_keyed_count_survives_task_crashes"])

    infra = results["test_a_cluster_too_small_for_the_job"]
    if infra["status"] == "skipped":  # no Java on this machine: the local-cluster cannot even be tried
        pytest.skip(infra["statusDetails"]["message"])
    assert infra["status"] == "broken" and "task slots" in infra["statusDetails"]["message"]
    assert _category(alluredir, infra) == "Infrastructure errors"
    assert b"InputError" in _attachment(alluredir, infra, "error")

    env_props = (alluredir / "environment.properties").read_text()
    assert "spark.version=" in env_props and "cluster=" in env_props and "seed=" in env_props
    assert re.search(r"^cluster=.*\bsim\b", env_props, re.M), env_props


def test_statechaos_run_alluredir_explains_a_failure_the_same_way(tmp_path, monkeypatch):
    from reference_impl.state import heap_backend

    orig = heap_backend.HeapKeyedStateBackend.restore

    def restore(self, snapshots):
        for s in snapshots:
            s.key_groups.pop(self.key_group_range.end, None)
        orig(self, snapshots)

    monkeypatch.setattr(heap_backend.HeapKeyedStateBackend, "restore", restore)
    example = (FAILING / "test_broken_restore.py").read_text()
    scenario = tmp_path / "broken.yaml"
    scenario.write_text(example.split('SCENARIO = """', 1)[1].split('"""', 1)[0])
    alluredir = tmp_path / "allure"
    rc = main(["run", str(scenario), "--runs-dir", str(tmp_path / "runs"), "--alluredir", str(alluredir)])
    assert rc == 1
    result = _results(alluredir)["broken-restore-demo"]
    _assert_explains_restore_failure(alluredir, result)
    assert ("suite", "statechaos run") in _labels(result)
    props = (alluredir / "environment.properties").read_text()
    assert "cluster=sim" in props and "seed=1" in props and "spark.version=" in props


def test_every_suite_file_gets_an_area_epic_and_feature():
    import importlib.util

    spec = importlib.util.spec_from_file_location("statechaos_root_conftest", ROOT / "conftest.py")
    assert spec and spec.loader
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    areas = {"state model", "TTL", "checkpoints", "rescaling", "runtime", "spark", "chaos", "benchmarks"}
    files = sorted((ROOT / "suites").glob("*/test_*.py"))
    assert len(files) > 20
    for f in files:
        epic, feature = conftest.area_labels(f)
        assert epic in areas and feature, (f, epic, feature)
    assert conftest.area_labels(ROOT / "suites/reference/test_ttl.py") == ("TTL", "state TTL")
    assert conftest.area_labels(ROOT / "suites/chaos/test_schedule.py") == ("chaos", "schedule")
    assert conftest.area_labels(ROOT / "examples/test_user_chaos.py") is None
