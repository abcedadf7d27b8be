"""The simulator's pace is the scenario's ``sim.tick_ms``: a processing-time timer of 2 s cannot fire
in a run of a few thousand records at the default pace (about 0.2 s of simulated time), and fires at
a pace that makes the run last several seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import allure

from chaos.runner import run_scenario
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
        .source("src", GeneratorSource(lambda s, n: {"k": f"k{n % 7}", "n": n}, 2, 1500), 2)
        .key_by(lambda r: r["k"])
        .process("idle", _Idle(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )


if "test_idle" not in JOBS:
    register_job("test_idle", _idle_job)


def _run(tmp_path: Path, **sim: Any) -> tuple[int, int]:
    sc = {
        "name": "pace",
        "cluster": "sim",
        "job": "test_idle",
        "parallelism": {"src": 2, "idle": 2},
        "checkpoint": {"interval_ms": 40},
        "checks": ["checkpoint_integrity"],
        **({"sim": sim} if sim else {}),
    }
    out = run_scenario(Scenario.model_validate(sc), tmp_path)
    assert out.error is None, out.error
    events = [json.loads(x) for x in (Path(out.run_dir) / "history.jsonl").read_text().splitlines()]
    fired = sum(int(e.get("processing", 0)) for e in events if e["type"] == "timers_fired")
    return fired, int(out.stats["sim_time_ms"])


def test_a_two_second_timer_fires_only_at_a_pace_that_lets_it(tmp_path: Path) -> None:
    fired, took = _run(tmp_path / "default")
    assert fired == 0 and took < IDLE_MS
    fired, took = _run(tmp_path / "paced", tick_ms=40)
    assert fired > 0 and took > IDLE_MS
