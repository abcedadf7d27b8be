"""The test tiers: markers classify tests one way (a test not marked ``spark``/``docker`` cannot
start Spark or use Docker, here or in a process it starts), and the mechanics of ``./dev test
--stress`` (rounds under a CPU hog, the duration spread, exit 1 when a round fails) and of the full
run's two lanes (tools/tiers.py: the fast tier, then the ``alongside`` tests, alongside the rest)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from chaos.cluster.docker_stack import docker_client
from harness.spark.cluster import SparkCluster, SparkRefused

ROOT = Path(__file__).resolve().parents[2]


def test_a_test_not_marked_spark_cannot_start_spark_in_its_process_or_a_child():
    with pytest.raises(SparkRefused, match=r"test_tiers\.py::.* is not marked @pytest.mark.spark"):
        SparkCluster("local-cluster[1,1,512]").start()
    child = subprocess.run(
        [sys.executable, "-c", "from harness.spark.cluster import SparkCluster; SparkCluster().start()"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert child.returncode != 0 and "STATECHAOS_NO_SPARK is set" in child.stderr, child.stderr[-2000:]


def test_a_test_not_marked_docker_cannot_use_docker():
    assert "test_tiers.py" in os.environ["STATECHAOS_NO_DOCKER"]
    with pytest.raises(RuntimeError, match="STATECHAOS_NO_DOCKER is set"):
        docker_client()


def _stress_module(name: str = "stress"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # four pytest sessions of its own
def test_stress_runs_rounds_prints_the_spread_and_fails_when_a_round_fails(tmp_path, monkeypatch):
    """Two rounds of a tiny selection: one test always passes, the other fails in its second round
    only (a counter file outside pytest), as a load-sensitive test would."""
    stress = _stress_module()
    counter = tmp_path / "count"
    (tmp_path / "test_tiny.py").write_text(
        "from pathlib import Path\n"
        "def test_steady():\n    pass\n"
        "def test_second_round_fails():\n"
        f"    p = Path({str(counter)!r})\n"
        "    n = int(p.read_text()) if p.exists() else 0\n"
        "    p.write_text(str(n + 1))\n"
        "    assert n != 1\n"
    )
    monkeypatch.chdir(tmp_path)
    out = Console(record=True, width=200)
    assert stress.stress(["test_tiny.py"], rounds=2, console=out) == 1
    text = out.export_text()
    assert "round 1/2: passed" in text and "round 2/2: FAILED" in text
    assert "test_tiny::test_steady" in text and "test_tiny::test_second_round_fails" in text
    assert "failed" in text.split("test_second_round_fails")[1].splitlines()[0]
    assert "round(s) 2 of 2 failed" in text

    counter.write_text("5")  # from now on every round passes
    out = Console(record=True, width=200)
    assert stress.stress(["test_tiny.py"], rounds=2, console=out) == 0
    assert "2 of 2 rounds passed" in out.export_text()


@pytest.mark.slow  # two pytest sessions of its own
def test_full_run_splits_by_marker_one_way_and_fails_when_either_session_fails(tmp_path, monkeypatch, capfd):
    """``./dev test``'s two lanes over a tiny suite: each test runs in exactly one session (the fast
    tier's expression, then ``alongside``, in lane two; the rest in the main session), all report to
    one Allure folder (cleaned once, before), and a failure in any session is the run's."""
    tiers = _stress_module("tiers")
    fast = "not spark and not slow"
    (tmp_path / "test_tiny.py").write_text(
        "import os, pytest\n"
        "def test_plain():\n    assert os.environ.get('FAIL') != 'fast'\n"
        "@pytest.mark.slow\ndef test_slow():\n    pass\n"
        "@pytest.mark.spark\ndef test_spark():\n    assert os.environ.get('FAIL') != 'main'\n"
        "@pytest.mark.spark\n@pytest.mark.alongside\ndef test_beside():\n"
        "    assert os.environ.get('FAIL') != 'alongside'\n"
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "allure-results").mkdir()
    (tmp_path / "allure-results" / "stale-result.json").write_text("{}")
    assert tiers.run(fast, ["test_tiny.py", "-v"]) == 0
    text = capfd.readouterr().out
    main, _, two = text.partition("[tiers] lane two")
    assert "test_slow PASSED" in main and "test_spark PASSED" in main, main
    assert "test_plain" not in main and "test_beside" not in main, main
    assert "test_plain PASSED" in two and "test_beside PASSED" in two, two
    assert "test_slow" not in two and "test_spark" not in two, two
    assert two.index("test_plain PASSED") < two.index("test_beside PASSED"), two
    results = list((tmp_path / "allure-results").glob("*-result.json"))
    assert len(results) == 4 and not (tmp_path / "allure-results" / "stale-result.json").exists(), results
    for failing in ("fast", "main", "alongside"):
        monkeypatch.setenv("FAIL", failing)
        assert tiers.run(fast, ["test_tiny.py"]) == 1, failing
