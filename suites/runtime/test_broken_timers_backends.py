"""Broken runtimes around state backends, timers, watermarks and multi-stage barriers: each test
breaks the runtime in one deliberate way (monkeypatching, in the test only) and asserts some oracle
fails, while the same scenario passes on the unbroken runtime (as ``test_broken_variants``)."""

from __future__ import annotations

import allure
import pytest

import reference_impl.state.ondisk_backend as ondisk
from suites.runtime.conftest import failed

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]

CRASHES = [
    {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
    {"at": "checkpoint:5", "kind": "crash_task", "target": "count[0]"},
]


def _incremental_reuses_stale_shared_file(mp):
    orig = ondisk.OnDiskKeyedStateBackend.checkpoint_incremental

    def checkpoint_incremental(self, *a, **kw):
        if self._track:  # after the first checkpoint: forget what changed, reuse every old file
            self._changed = set()
        return orig(self, *a, **kw)

    mp.setattr(ondisk.OnDiskKeyedStateBackend, "checkpoint_incremental", checkpoint_incremental)


VARIANTS = {
    "an incremental checkpoint reuses a stale shared file": (
        _incremental_reuses_stale_shared_file,
        {"state_backend": "rocksdb", "incremental": True, "faults": CRASHES},
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_broken_runtime_is_caught(sim_run, monkeypatch, name):
    breaker, overrides = VARIANTS[name]
    healthy = sim_run(**overrides)
    assert failed(healthy) == set(), f"the scenario must pass on the correct runtime: {healthy.verdicts}"
    breaker(monkeypatch)
    broken = sim_run(**overrides)
    caught = failed(broken)
    allure.dynamic.parameter("caught by", ", ".join(sorted(caught)) or "nothing")
    assert caught, f"no oracle caught: {name}"
