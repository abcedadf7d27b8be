"""A chaos test that FAILS on purpose, to show what a failure looks like in the Allure report.

It breaks the runtime inside the test only (monkeypatch; production code has no bug switches): on
restore, every keyed-state backend silently drops the last key group of its range. The scenario
crashes a keyed subtask twice, so the restored-state oracle finds state missing after the restore and
the report shows the failing oracle and its explanation, a state diff (checkpoint vs restored state,
from ``reference_impl.inspect.diff``), the timeline plot, the replay command, the history and the
scenario.

Not part of ``./dev test`` (whose testpaths are ``suites/``). Run it with:

    ./dev test examples/failing        # fails; then ./dev allure and open allure-report/
"""

from __future__ import annotations

import pytest

SCENARIO = """
name: broken-restore-demo
description: a keyed count whose restore drops a key group (deliberately broken runtime)
cluster: sim
job: keyed_count
parallelism: {source: 2, count: 2}
max_parallelism: 32
records: 3000
keys: 300
checkpoint: {interval_ms: 40ms, retained: 2}
faults:
  - {at: "checkpoint:2", kind: crash_task, target: "count[1]"}
  - {at: "checkpoint:5", kind: crash_task, target: "count[0]"}
checks: [exactly_once, sequence, restored_state, checkpoint_integrity, liveness]
seed: 1
"""


@pytest.fixture
def restore_drops_last_key_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliberate bug: a restore that forgets the last key group of the subtask's range."""
    from reference_impl.state import heap_backend

    orig = heap_backend.HeapKeyedStateBackend.restore

    def restore(self, snapshots):  # type: ignore[no-untyped-def]
        for s in snapshots:
            s.key_groups.pop(self.key_group_range.end, None)
        orig(self, snapshots)

    monkeypatch.setattr(heap_backend.HeapKeyedStateBackend, "restore", restore)


def test_keyed_count_survives_task_crashes(restore_drops_last_key_group, run_scenario, assert_oracles):
    outcome = run_scenario(SCENARIO)
    assert_oracles(outcome)  # fails: oracle failed: restored_state: N differences ...
