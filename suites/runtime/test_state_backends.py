"""A job's keyed state backend: heap, or the on-disk (RocksDB) backend with full or incremental
checkpoints, chosen by the job (``JobBuilder.state_backend``) or the scenario (``state_backend``,
``incremental``). Chaos must pass on each, and the oracles must read each one's checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import allure
import pytest

from chaos.scenario import Scenario, ScenarioError, parse_scenario
from harness.job import JobDefinitionError, StateBackendConfig
from reference_impl.checkpoint.format import referenced_shared_files
from suites.runtime.conftest import failed

pytestmark = [allure.epic("runtime"), allure.feature("state backends")]

FAULTS = {
    "faults": [
        {"at": "checkpoint:2", "kind": "crash_task", "target": "count[1]"},
        {"at": "checkpoint:4", "kind": "crash_task", "target": "count[0]"},
    ],
    "rescale": [{"at": "checkpoint:3", "parallelism": {"source": 3, "count": 3}}],
}


@pytest.mark.parametrize(
    "backend", [{"state_backend": "rocksdb"}, {"state_backend": "rocksdb", "incremental": True}]
)
def test_chaos_passes_on_the_ondisk_backend(sim_run, backend):
    out = sim_run(**backend, **FAULTS)
    assert failed(out) == set(), out.verdicts
    run_dir = Path(out.run_dir)
    restores = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [e for e in restores if e["type"] == "restore" and e.get("checkpoint_id")], "no restore"
    manifests = list(run_dir.glob("restored-from/chk-*/count-*.state"))
    shared = [r for f in manifests for r in referenced_shared_files(f.read_bytes(), str(f))]
    # incremental checkpoints name shared key-group files; full ones hold their key groups inline
    assert bool(shared) is bool(backend.get("incremental")), shared[:3]


def test_incremental_checkpoints_write_deltas_on_reused_bases(sim_run):
    out = sim_run(state_backend="rocksdb", incremental=True, keys=400, records=2000)
    assert failed(out) == set(), out.verdicts
    refs = [
        r.path
        for f in Path(out.run_dir).glob("checkpoints/*/chk-*/count-*.state")
        for r in referenced_shared_files(f.read_bytes(), str(f))
    ]
    assert refs, "no incremental manifest retained"
    # a delta names only what changed since the previous checkpoint, on top of a reused base
    assert any("-delta-" in p for p in refs) and any("-base-" in p for p in refs), refs[:5]


def test_incremental_needs_rocksdb(tmp_path):
    with pytest.raises(JobDefinitionError, match="rocksdb"):
        StateBackendConfig("heap", incremental=True)
    with pytest.raises(JobDefinitionError, match="unknown state backend"):
        StateBackendConfig("memory")
    with pytest.raises(ScenarioError, match="incremental"):
        parse_scenario("name: s\ncluster: sim\nincremental: true\n", "s.yaml")
    assert Scenario.model_validate({"name": "s", "state_backend": "rocksdb"}).state_backend == "rocksdb"
