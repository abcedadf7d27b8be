"""Timers and event time in running jobs (sim executor): watermarks per split, the minimum over
input channels, event-time timers firing as watermarks pass and all of them at end of input, pending
processing-time timers dropped at end of input (as Flink quiesces its processing-time service), the
final checkpoint after end of input passed every operator (FLIP-147), and the same seed giving the
same history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import allure
import pytest

from chaos.report.runner import run_scenario
from chaos.scenario import Scenario
from harness.driver.coordinator import CheckpointConfig
from harness.sim.executor import SimExecutor
from harness.tasks.items import Watermark
from suites.runtime import timed_job
from suites.runtime.conftest import failed
from suites.runtime.timed_job import timed

pytestmark = [allure.epic("runtime"), allure.feature("timers and event time")]

FAR = timed_job.FAR

BASE: dict[str, Any] = {
    "name": "timed",
    "cluster": "sim",
    "job": "test_timed",
    "parallelism": {"src": 2, "timers": 2},
    "max_parallelism": 32,
    "checkpoint": {"interval_ms": 15, "retained": 2},
    "checks": ["exactly_once", "restored_state", "checkpoint_integrity", "liveness"],
    "seed": 5,
}


def _history(out) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (Path(out.run_dir) / "history.jsonl").read_text().splitlines()]


def _committed(out) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for f in sorted((Path(out.run_dir) / "output" / "committed").glob("*.jsonl")):
        rows += [(f.name, json.loads(x)) for x in f.read_text().splitlines() if x.strip()]
    return rows


def test_event_time_timers_fire_as_watermarks_pass_and_all_at_end_of_input(tmp_path):
    fault_free = {**BASE, "checks": ["exactly_once", "checkpoint_integrity", "liveness"]}  # no restore
    out = run_scenario(Scenario.model_validate(fault_free), tmp_path / "run")
    assert failed(out) == set(), out.verdicts
    rows = [r for _, r in _committed(out)]
    near = [r for r in rows if r["t"] < FAR]
    far = [r for r in rows if r["t"] >= FAR]
    assert len(near) == len(far) == 4 * 150  # one of each per record, exactly once
    assert not [r for r in rows if r["d"] == "processing"]  # pending processing timers are dropped
    by_commit: dict[str, list[bool]] = {}
    for name, r in _committed(out):
        by_commit.setdefault(name.split("-")[0], []).append(r["t"] < FAR)
    # near timers fire mid-run, committed by several checkpoints before any far one, which fire only
    # at end of input and are committed by a checkpoint after it (the final one, FLIP-147)
    first_far = min(c for c, v in by_commit.items() if not all(v))
    assert len([c for c in by_commit if c < first_far]) >= 2, sorted(by_commit)


def test_watermarks_restore_and_chaos_holds(tmp_path):
    sc = {
        **BASE,
        "job_options": {"per_split": 600},
        "faults": [
            {"at": "checkpoint:3", "kind": "crash_task", "target": "timers[1]"},
            {"at": "checkpoint:6", "kind": "crash_task", "target": "src[0]"},
        ],
        "rescale": [{"at": "checkpoint:4", "parallelism": {"src": 3, "timers": 3}}],
    }
    out = run_scenario(Scenario.model_validate(sc), tmp_path / "run")
    assert failed(out) == set(), out.verdicts
    restores = [e for e in _history(out) if e["type"] == "restore" and e["operator"] == "timers"]
    assert any(e["checkpoint_id"] and e["watermark"] > -(1 << 63) for e in restores), restores


def test_operator_watermark_is_the_minimum_over_channels(tmp_path):
    graph = timed(splits=2, per_split=5)
    ex = SimExecutor(graph, tmp_path, CheckpointConfig(interval_ms=1000))
    ex._deploy(graph)
    t = ex.streams[0][0]
    t.on_control(0, Watermark(100))
    assert t.timers.watermark == -(1 << 63)  # channel 1 has none yet
    t.on_control(1, Watermark(40))
    assert t.timers.watermark == 40
    t.on_control(1, Watermark(30))  # a channel's watermark never goes back
    t.on_control(1, Watermark(150))
    assert t.timers.watermark == 100
    ex._retire("test")


def test_same_seed_same_history(tmp_path):
    sc = Scenario.model_validate({**BASE, "faults": [{"at": "checkpoint:3", "kind": "crash_task"}]})
    a = run_scenario(sc, tmp_path / "a")
    b = run_scenario(sc, tmp_path / "b")
    assert failed(a) == set() == failed(b)
    assert (Path(a.run_dir) / "history.jsonl").read_bytes() == (Path(b.run_dir) / "history.jsonl").read_bytes()


@pytest.mark.parametrize("state_backend", ["heap", "rocksdb"])
def test_allround_same_seed_same_history(tmp_path, state_backend):
    sc = Scenario.model_validate(
        {
            "name": "ar",
            "cluster": "sim",
            "job": "allround",
            "state_backend": state_backend,
            "records": 1200,
            "parallelism": {"events": 2, "sessions": 2, "profile": 2},
            "max_parallelism": 64,
            "checkpoint": {"interval_ms": 15, "retained": 2},
            "faults": [{"at": "checkpoint:2", "kind": "crash_task"}, {"at": "checkpoint:4", "kind": "crash_task"}],
            "rescale": [{"at": "checkpoint:3", "parallelism": {"events": 3, "sessions": 1, "profile": 3}}],
            "seed": 9,
        }
    )
    a = run_scenario(sc, tmp_path / "a")
    b = run_scenario(sc, tmp_path / "b")
    assert failed(a) == set() == failed(b), a.verdicts
    assert (Path(a.run_dir) / "history.jsonl").read_bytes() == (Path(b.run_dir) / "history.jsonl").read_bytes()
