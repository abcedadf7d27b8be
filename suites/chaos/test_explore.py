"""``statechaos explore`` finds a planted bug, shrinks its schedule, and writes a replayable file;
on the correct runtime it finds nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import allure
import pytest

from chaos.explore import _run, _scenario_with, explore, phase_score
from chaos.report.cli import main
from chaos.report.runner import run_scenario
from chaos.scenario import Scenario, load_scenario
from suites.runtime.test_broken_variants import _alignment_does_not_block, _source_ignores_restored_offsets

pytestmark = [allure.epic("chaos"), allure.feature("exploration")]

SMALL = {
    "name": "explore-small",
    "cluster": "sim",
    "parallelism": {"source": 2, "count": 2},
    "max_parallelism": 32,
    "records": 2000,
    "keys": 40,
    "checkpoint": {"interval_ms": 40, "retained": 2},
    "checks": ["exactly_once", "sequence", "restored_state", "checkpoint_integrity", "liveness"],
    "seed": 3,
}


@pytest.mark.parametrize(
    "breaker",
    [_source_ignores_restored_offsets, _alignment_does_not_block],
    ids=["restored source replays from the start", "alignment does not block"],
)
def test_explore_finds_and_shrinks_a_planted_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breaker: Callable[[pytest.MonkeyPatch], None]
) -> None:
    breaker(monkeypatch)
    found = explore(Scenario.model_validate(SMALL), tmp_path, max_runs=30)
    assert found.minimal is not None, "the planted bug was not found"
    assert 1 <= len(found.minimal.faults) <= 2, found.minimal.faults
    assert {"exactly_once", "sequence"} & set(found.failed_checks) and found.confirmed
    # the written file is a scenario that fails the same way when run
    replayed = run_scenario(load_scenario(found.minimal_file), tmp_path / "replay")
    assert not replayed.passed


def test_a_found_failure_is_found_again_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _source_ignores_restored_offsets(monkeypatch)
    sc = Scenario.model_validate(SMALL)
    first = explore(sc, tmp_path, max_runs=30)
    again = explore(sc, tmp_path, max_runs=30)  # same runs dir: same example database
    assert first.minimal is not None and again.minimal is not None
    assert again.minimal.faults == first.minimal.faults and again.minimal.seed == first.minimal.seed
    assert again.runs < first.runs


def test_explore_finds_nothing_on_the_correct_runtime(tmp_path: Path) -> None:
    found = explore(Scenario.model_validate(SMALL), tmp_path, max_runs=6)
    assert found.minimal is None and found.runs >= 6


def test_a_run_reports_the_phases_its_faults_struck(tmp_path: Path) -> None:
    """What steers the search: a crash soon after a restore struck the restore phase (the schedules
    Hypothesis draws are random, so this uses a fixed one; 1 of 5 random 6-run searches struck none)."""
    crash = {"kind": "crash_task", "target": "source[0]"}
    faults = [{"at": "records:700", "kind": "crash_task", "target": "count[1]"}, {**crash, "at": "records:720"}]
    _, stats = _run(_scenario_with(Scenario.model_validate(SMALL), 3, faults), tmp_path / "run")
    assert stats["fault_phases"] == {"1": [], "2": ["restore"]}


def test_a_phase_no_run_struck_yet_scores_most() -> None:
    hit: set[str] = set()
    first = phase_score({"1": ["snapshot"], "2": ["snapshot", "restore"]}, hit)
    assert hit == {"snapshot", "restore"} and first == 22
    again = phase_score({"1": ["snapshot"]}, hit)
    new = phase_score({"1": ["alignment", "snapshot"]}, hit)
    assert new > again == 1 and "alignment" in hit


def test_cli_explore_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text("\n".join(f"{k}: {v}" for k, v in SMALL.items()).replace("'", '"'))
    runs = str(tmp_path / "runs")
    assert main(["explore", str(sc), "--runs-dir", runs]) == 2  # neither --budget nor --seeds
    assert main(["explore", str(sc), "--budget", "soon", "--runs-dir", runs]) == 2
    assert main(["explore", str(sc), "--seeds", "0", "--runs-dir", runs]) == 2
    _source_ignores_restored_offsets(monkeypatch)
    assert main(["explore", str(sc), "--budget", "2m", "--runs-dir", runs]) == 1
    out = capsys.readouterr().out
    assert "runs/min" in out and "statechaos run " in out
