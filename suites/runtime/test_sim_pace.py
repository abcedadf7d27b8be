"""The simulator's pace is the scenario's ``sim.tick_ms``: at the default pace a processing-time
timer of 2 s fires in a run of realistic size (20,000 records on 2 source subtasks last about 6 s of
processing time); at 1 ms a step the same run lasts about 1.2 s and the timer never fires. The pace is
deterministic: the same seed gives the same history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import allure

from chaos.report.runner import run_scenario
from chaos.scenario import Scenario
from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, KeyedProcessFunction
from harness.jobs import register_job
from harness.jobs.registry import JOBS

pytestmark = [allure.epic("runtime"), allure.feature("sim executor")]

IDLE_MS = 2_000


class _Idle(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.timer_service().register_processing_time_timer(ctx.now_ms() + IDLE_MS)

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        ctx.collect({"k": ctx.current_key, "idle_at": timestamp})


def _idle_job(records: int | None = None) -> Any:
    return (
        JobBuilder("idle", 16)
        .source("src", GeneratorSource(lambda s, n: {"k": f"k{n % 7}", "n": n}, 2, 10_000), 2)
        .key_by(lambda r: r["k"])
        .process("idle", _Idle(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )


if "test_idle" not in JOBS:
    register_job("test_idle", _idle_job)


def _run(tmp_path: Path, **sim: Any) -> tuple[int, int, bytes]:
    sc = {
        "name": "pace",
        "cluster": "sim",
        "job": "test_idle",
        "parallelism": {"src": 2, "idle": 2},
        "checkpoint": {"interval_ms": 500},
        "checks": ["checkpoint_integrity"],
        **({"sim": sim} if sim else {}),
    }
    out = run_scenario(Scenario.model_validate(sc), tmp_path)
    assert out.error is None, out.error
    history = (Path(out.run_dir) / "history.jsonl").read_bytes()
    events = [json.loads(x) for x in history.splitlines()]
    fired = sum(int(e.get("processing", 0)) for e in events if e["type"] == "timers_fired")
    return fired, int(out.stats["sim_time_ms"]), history


def test_a_two_second_timer_fires_in_a_run_of_realistic_size_at_the_default_pace(tmp_path: Path) -> None:
    fired, took, history = _run(tmp_path / "default")
    assert fired > 0 and took > IDLE_MS
    assert _run(tmp_path / "again")[2] == history  # deterministic at this pace too
    fired, took, _ = _run(tmp_path / "fast", tick_ms=1)
    assert fired == 0 and took < IDLE_MS
