"""The simulator as a cluster: one process, deterministic from the seed; faults act through the
executor's controls and failpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.cluster.base import nemesis_for
from chaos.faults import FaultTarget
from chaos.runtime_config import checkpoint_config, rescale_requests
from chaos.scenario import Scenario
from chaos.scenario_job import checks_for
from chaos.schedule import plan
from chaos.scope import RunScope
from harness.jobs import JobSpec
from harness.run_store import RunStore
from harness.sim.executor import SimConfig, SimExecutor

__all__ = ["SimCluster"]


SIM_TIME_LIMIT_S = 600  # simulated seconds: deterministic, the same on any machine


class SimCluster:
    def run(self, sc: Scenario, spec: JobSpec, run_dir: Path, resume: bool = False) -> dict[str, Any]:
        scope = RunScope(run_id=run_dir.name, paths=[RunStore(run_dir).checkpoints])
        ex = SimExecutor(
            spec.graph,
            run_dir,
            checkpoint_config(sc),
            seed=sc.seed,
            faults=nemesis_for(plan(sc), lambda controls: FaultTarget(controls, scope)),
            rescales=rescale_requests(sc),
            config=SimConfig(
                tick_ms=sc.runtime.sim.tick_ms,
                source_drift=sc.runtime.sim.source_drift,
                max_restarts=sc.runtime.max_restarts,
                time_limit_ms=int((sc.timeout_s or SIM_TIME_LIMIT_S) * 1000),
                stall_limit_ms=int(sc.stall_limit_s * 1000),
            ),
            run_info={
                "scenario": sc.name,
                "records": sc.runtime.records,
                "keys": sc.runtime.keys,
                "checks": checks_for(sc, spec.graph),
            },
        )
        ex.master.keep_every_checkpoint = "checkpoint_state" in checks_for(sc, spec.graph)
        return ex.run().to_stats()
