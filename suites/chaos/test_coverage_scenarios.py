"""The scenarios shipped to reach paths no other scenario took do reach them: reads at the exact TTL
expiry instant, several checkpoints in flight at once, the heap snapshot's sparse split, and restores
and rescales of a source whose splits are part finished, part unfinished. (That they pass is
``test_scenarios_folder``'s business; here: that they still exercise what they were written for.)"""

from __future__ import annotations

import json
from pathlib import Path

import allure

from chaos.report.runner import run_scenario
from chaos.scenario import load_scenario

pytestmark = [allure.epic("chaos"), allure.feature("scenario coverage")]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _run(tmp_path, name):
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    out = run_scenario(sc, tmp_path / name)
    assert out.passed, [(v["oracle"], v["summary"]) for v in out.failed_checks] or out.error
    events = [json.loads(x) for x in open(Path(out.run_dir) / "history.jsonl")]
    return sc, out, events


def test_ttl_reads_land_exactly_at_the_expiry_instant(tmp_path):
    _, out, _ = _run(tmp_path, "ttl-expiry-instant-sim")
    ttl = next(v for v in out.verdicts if v["oracle"] == "ttl")
    assert ttl["data"]["skew_ms"] == 0 and ttl["data"]["at_expiry"] >= 100, ttl["data"]


def test_concurrent_checkpoints_and_partly_finished_splits(tmp_path):
    sc, _, events = _run(tmp_path, "concurrent-checkpoints-sim")
    pending: set[int] = set()
    most = 0
    for e in events:
        if e["type"] == "checkpoint_triggered":
            pending.add(e["checkpoint_id"])
            most = max(most, len(pending))
        elif e["type"] in ("checkpoint_completed", "checkpoint_aborted"):
            pending.discard(e["checkpoint_id"])
    assert most >= 2, "never more than one checkpoint in flight"

    def total(key: str) -> int:
        i = int(key.removeprefix("key-"))
        return sc.records // sc.keys + (1 if i < sc.records % sc.keys else 0)

    offsets = {e["checkpoint_id"]: e["source_offsets"] for e in events if e["type"] == "checkpoint_completed"}
    restored = {
        e["checkpoint_id"] for e in events if e["type"] == "restore" and e["checkpoint_id"] is not None
    }
    rescaled = {e["checkpoint_id"] for e in events if e["type"] == "rescale"}
    assert rescaled and restored - rescaled, (restored, rescaled)
    for cid in restored:  # the crash's restore and the rescale's both
        finished = sum(1 for k, n in offsets[cid].items() if n == total(k))
        assert 0 < finished < len(offsets[cid]), (
            f"checkpoint {cid}: {finished}/{len(offsets[cid])} splits finished"
        )
    # few keys over many key groups: each subtask's key groups outnumber its keys (the sparse split)
    assert sc.max_parallelism // max(sc.parallelism.values()) > sc.keys // min(sc.parallelism.values())
