"""Incremental checkpoints judged without a model: each one's keyed state, read through its chains of
base and delta files, equals the full snapshot the subtask's backend took at the same barrier. A
delta that misses a delete leaves the entry alive in every later checkpoint of that key group; in a
job whose state depends on interleaving (allround: no model at a cut) and with no restore, nothing
else sees it. Found by a mutation hunt over the repo's sim scenarios (issue #32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import allure

from reference_impl.state import ondisk_backend
from suites.runtime.conftest import caught_when_broken

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]


def _a_removed_entry_is_not_tracked_as_changed(mp):
    """The on-disk backend deletes a removed state entry (not a timer's) but does not mark its key
    changed: the next delta does not hold the delete, so every later checkpoint still has the entry
    (a fired session window's count, sum and ids; its namespace is never used again, so no record
    and no restore shows it)."""

    def pop(self, k: Any, default: Any = None) -> Any:
        b = self._b
        dbkey = self._dbkey(k)
        c = b._cache.pop(dbkey, None) if b._cache else None
        if c is not None:
            v = c[0]
        else:
            raw = b._get(dbkey)
            if raw is None:
                return default
            v = self._dec(raw)
        b._delete(dbkey)
        if b._track and b._by_sid[self._mid[:2]].name.startswith("_timer_state/"):
            b._changed.add(dbkey)
        return v

    mp.setattr(ondisk_backend._NamespaceView, "pop", pop)


ALLROUND_ROCKSDB: dict[str, Any] = {
    "job": "allround",
    "records": 2000,
    "max_parallelism": 64,
    "state_backend": "rocksdb",
    "incremental": True,
    "parallelism": {"events": 2, "sessions": 2, "profile": 2},
    "checkpoint": {"interval_ms": 15, "retained": 2},
    "checks": ["exactly_once", "sequence", "checkpoint_state", "checkpoint_integrity", "liveness"],
}


def test_every_incremental_checkpoint_equals_the_backends_full_snapshot(sim_run):
    out = sim_run(**ALLROUND_ROCKSDB)
    (v,) = [v for v in out.verdicts if v["oracle"] == "checkpoint_state"]
    assert v["status"] == "holds", v
    assert v["data"]["incremental_key_groups_judged"] > 0 and "full snapshot" in v["summary"]


def test_a_delta_missing_a_delete_is_caught_although_no_checkpoint_is_restored(tmp_path: Path, monkeypatch):
    caught, broken = caught_when_broken(
        tmp_path, monkeypatch, _a_removed_entry_is_not_tracked_as_changed, ALLROUND_ROCKSDB
    )
    assert caught == {"checkpoint_state"}, broken.verdicts
    (v,) = [v for v in broken.verdicts if v["oracle"] == "checkpoint_state"]
    assert any(
        "the incremental checkpoint has" in d and "the backend held <absent>" in d for d in v["details"]
    ), v["details"][:5]
