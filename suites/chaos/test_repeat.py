"""Repeat runs: ``statechaos run --repeat N`` and the plugin's ``--statechaos-repeat N`` run a scenario
N times with its seed and once with each of N other seeds, and fail when the same seed gave different
verdicts. The flaky case is planted: ``flaky_job.py`` drops a record in every second run of a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.repeat import other_seeds
from chaos.report.cli import main

HERE = Path(__file__).resolve().parent
FLAKY = HERE / "flaky-sim.yaml"
STABLE = HERE.parents[1] / "scenarios" / "ttl-expiry-instant-sim.yaml"  # half a second a run


def test_the_same_seed_giving_different_verdicts_exits_1_and_says_flaky(tmp_path, capsys):
    report = tmp_path / "out.json"
    rc = main(["run", str(FLAKY), "--repeat", "3", "--runs-dir", str(tmp_path), "--json", str(report)])
    out = capsys.readouterr().out
    assert rc == 1
    data = json.loads(report.read_text())
    assert data["flaky"] == ["flaky"]
    rep = data["repeats"][0]
    assert [r["seed"] for r in rep["same_seed"]] == [3, 3, 3]
    assert [r["seed"] for r in rep["other_seeds"]] == other_seeds(3, 3) == [4, 5, 6]
    results = [r["result"] for r in rep["same_seed"]]
    assert set(results) == {"passed", "failed"}, results
    assert any(d.startswith("exactly_once: ") for d in rep["differences"]), rep["differences"]
    assert "FLAKY" in out and "durations with seed 3: min" in out and "durations with other seeds" in out


def test_a_stable_scenario_repeated_exits_0_with_its_verdicts_side_by_side(tmp_path, capsys):
    report = tmp_path / "out.json"
    rc = main(["run", str(STABLE), "--repeat", "2", "--runs-dir", str(tmp_path), "--json", str(report)])
    out = capsys.readouterr().out
    data = json.loads(report.read_text())
    assert rc == 0, out
    assert data["flaky"] == [] and len(data["scenarios"]) == 4
    rep = data["repeats"][0]
    seed = rep["seed"]
    assert [r["seed"] for r in rep["same_seed"]] == [seed, seed]
    assert [r["seed"] for r in rep["other_seeds"]] == [seed + 1, seed + 2]
    assert "stable: the same verdicts in all 2 runs" in out and "run 2" in out


@pytest.mark.parametrize("bad", ["0", "x"])
def test_repeat_needs_a_positive_count(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", str(STABLE), "--repeat", bad])
    assert e.value.code == 2 and "--repeat" in capsys.readouterr().err


@pytest.mark.slow  # a pytest session of its own
def test_the_plugin_option_fails_a_flaky_test_and_passes_a_stable_one(tmp_path):
    (tmp_path / "test_user.py").write_text(
        "def test_flaky(run_scenario):\n"
        f"    run_scenario({str(FLAKY)!r})\n"
        "def test_stable(run_scenario):\n"
        f"    assert run_scenario({str(STABLE)!r}).passed\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--statechaos-repeat",
            "2",
            "test_user.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
    assert "flaky: flaky gave different verdicts with the same seed 3 in 2 runs" in done.stdout
