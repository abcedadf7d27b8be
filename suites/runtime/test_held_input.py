"""Holding the end of input for a planned fault must not freeze watermarks: a stage with event-time
timers fed by a broadcast input (which has no watermarks of its own) emits its output while the
fault is still to come, as it does fault-free, so the fault strikes while its timers fire."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import allure

from chaos.report.runner import run_scenario
from chaos.scenario import Scenario
from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    KeyedBroadcastProcessFunction,
    WatermarkStrategy,
)
from harness.jobs import register_job
from harness.jobs.registry import JOBS
from suites.runtime.conftest import failed

pytestmark = [allure.epic("runtime"), allure.feature("timers and event time")]


class _Alerts(KeyedBroadcastProcessFunction):
    """Per event an event-time timer 30 ms later that emits an alert weighted by the rules seen."""

    def process_broadcast_element(self, rule: Any, ctx: Any) -> None:
        ctx.broadcast_state("rules").put(rule["rule"], 1)

    def process_element(self, e: Any, ctx: Any) -> None:
        ctx.timer_service().register_event_time_timer(e["ts"] + 30, e["id"])

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        ctx.collect({"k": ctx.current_key, "id": ctx.timer_namespace, "t": timestamp})


def _event(split: int, n: int) -> dict[str, Any]:
    return {"k": f"k{n % 5}", "ts": n * 10, "id": f"{split}-{n}"}


def _alerts(records: int | None = None) -> Any:
    return (
        JobBuilder("alerts", 16)
        .source(
            "events",
            GeneratorSource(_event, 2, 200, interleave=True),
            1,
            watermarks=WatermarkStrategy.for_bounded_out_of_orderness(5, lambda r: r["ts"]),
        )
        .key_by(lambda r: r["k"])
        .connect_broadcast("rules", GeneratorSource(lambda s, n: {"rule": n}, 1, 5), 1)
        .process("alerts", _Alerts(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: (r["id"], r["t"]), identity_name="(id, t)")
        .state_depends_on_interleaving("timers fire as watermarks pass")
        .build()
    )


if "test_alerts" not in JOBS:
    register_job("test_alerts", _alerts)


def _first_output_checkpoint(run_dir: str) -> int:
    names = [f.name for f in (Path(run_dir) / "output" / "committed").glob("*.jsonl") if f.stat().st_size]
    return min(int(re.match(r"c(\d+)-", n)[1]) for n in names)  # type: ignore[index]


def test_a_stage_fed_by_a_broadcast_input_emits_before_the_last_planned_fault(tmp_path: Path) -> None:
    sc = {
        "name": "held",
        "cluster": "sim",
        "job": "test_alerts",
        "parallelism": {"events": 1, "rules": 1, "alerts": 2},
        "checkpoint": {"interval_ms": 10, "retained": 2},
        "checks": ["exactly_once", "restored_state", "checkpoint_integrity", "liveness"],
        "faults": [{"at": "checkpoint:15", "kind": "crash_task", "target": "events[0]"}],
        "sim": {"tick_ms": 1},  # 1 ms a step: the input ends before checkpoint 15, so its end is held
        "seed": 3,
    }
    out = run_scenario(Scenario.model_validate(sc), tmp_path / "run")
    assert failed(out) == set(), out.verdicts
    history = (Path(out.run_dir) / "history.jsonl").read_text()
    assert '"input_held"' in history  # the fault was still to come when the input ended
    assert _first_output_checkpoint(out.run_dir) < 15
    # the run says which phases its fault struck
    from chaos.report.runner import story

    assert set(out.stats["fault_phases"]) == {"1"}
    assert story(Path(out.run_dir))[-1].startswith("1 faults hit: alignment ")
