"""The sim's source subtasks keep pace with each other (``sim.source_drift``), as parallel source
subtasks in Flink read at similar rates: no subtask reads more than the bound beyond the slowest live
one, so the watermark (their minimum) stays close behind and an event-time job's open state does not
grow with the run. Without the bound their difference is a random walk."""

from __future__ import annotations

from pathlib import Path

import allure
import pytest

from harness.driver.coordinator import CheckpointConfig
from harness.sim.executor import SimConfig, SimExecutor
from suites.runtime.timed_job import timed

pytestmark = [allure.epic("runtime"), allure.feature("sim executor")]


def _widest_drift(tmp_path: Path, drift: int | None) -> int:
    """The largest difference, after any step, between the records two subtasks of the source read."""
    ex = SimExecutor(
        timed(splits=4, per_split=1500), tmp_path, CheckpointConfig(interval_ms=10_000), seed=3,
        config=SimConfig(source_drift=drift),
    )  # fmt: skip
    widest = 0
    step = ex._step_source

    def watched(s):  # type: ignore[no-untyped-def]
        nonlocal widest
        step(s)
        live = [ex._read.get(x.name, 0) for x in ex.sources if not x.exhausted()]
        if len(live) == 2:
            widest = max(widest, max(live) - min(live))

    ex._step_source = watched  # type: ignore[method-assign]
    summary = ex.run()
    assert summary.status == "finished", summary
    return widest


@pytest.mark.parametrize("drift", [0, 16, 40])
def test_a_source_subtask_reads_at_most_the_drift_ahead(tmp_path: Path, drift: int) -> None:
    batch = SimConfig().source_batch
    assert _widest_drift(tmp_path, drift) <= drift + batch  # one step may take it past the bound


def test_without_the_bound_the_subtasks_drift_apart(tmp_path: Path) -> None:
    assert _widest_drift(tmp_path, None) > 2 * (16 + SimConfig().source_batch)  # seed 3: 128
