"""Run a scenario on Spark: start the cluster (embedded local-cluster by default, or a spark://
master), build injectors for process faults (SIGKILL an executor or a Python worker, SIGSTOP an
executor) on top of the runtime ones, and drive the job with ``harness.spark``. The cluster and
every process it started are gone when this returns, also on failure and Ctrl-C."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from chaos.errors import EnvironmentProblem
from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.process import KillProcess, PauseProcess
from chaos.scenario import Scenario
from chaos.schedule import Nemesis, PlannedFault, plan
from chaos.scope import RunScope
from harness.jobs import JobSpec

__all__ = ["run_spark", "spark_master"]


def _slots(sc: Scenario, spec: JobSpec) -> int:
    sizes = [sum(spec.graph.parallelism().values())]
    for step in sc.rescale:
        p = spec.graph.with_parallelism(step.parallelism).parallelism()
        sizes.append(sum(p.values()))
    return max(sizes)


def spark_master(sc: Scenario, slots: int) -> str:
    """The master URL for the scenario's cluster, with enough task slots for its largest deployment."""
    from harness.spark.cluster import parse_master

    if sc.cluster == "docker":
        raise EnvironmentProblem(
            "cluster 'docker': the dockerised Spark executor is not wired to scenarios yet; "
            "run the scenario with --cluster local or a spark:// master"
        )
    try:
        return parse_master(sc.cluster, slots)
    except ValueError as e:  # e.g. a local-cluster[W,C,M] with too few slots for the barrier stage
        raise EnvironmentProblem(f"scenario {sc.name!r}: cluster: {e}") from None


def _executor_target(cluster: Any, target: str | None, rng: random.Random) -> tuple[str, int]:
    pids = cluster.executor_pids()
    if not pids:
        raise InjectorError("no executor process of this run is visible on this host")
    ids = sorted(pids, key=lambda x: int(x) if x.isdigit() else x)
    if target is None:
        eid = rng.choice(ids)
    else:
        want = str(target).removeprefix("executor:")
        if not want.isdigit():
            raise InjectorError(f"target {target!r}: expected executor:N")
        eid = ids[int(want) % len(ids)]  # the N-th live executor (ids grow as Spark replaces them)
    return eid, pids[eid]


def run_spark(sc: Scenario, spec: JobSpec, run_dir: Path) -> dict[str, Any]:
    from chaos.execute import checkpoint_config, rescale_requests, runtime_injector
    from harness.spark.cluster import SparkCluster, SparkEnvironmentError
    from harness.spark.executor import SparkExecutor

    slots = _slots(sc, spec)
    master = spark_master(sc, slots)
    unsupported = [f.kind for f in sc.faults if f.kind == "network"]
    if unsupported:
        raise EnvironmentProblem(
            f"scenario {sc.name!r}: network faults on the Spark executor need its proxied data channels, "
            "which this version does not ship yet; run the other fault kinds, or network toxics against a "
            "Toxiproxy-API proxy with chaos.injectors.network"
        )
    try:
        cluster = SparkCluster(master, app_name=f"statechaos-{sc.name}-{sc.seed}").start()
    except SparkEnvironmentError as e:
        raise EnvironmentProblem(str(e)) from None
    try:
        scope = RunScope(run_id=run_dir.name, pids=cluster.owned_pids, paths=[run_dir / "checkpoints"])
        ex = SparkExecutor(
            spec.graph,
            run_dir,
            checkpoint_config(sc),
            cluster,
            seed=sc.seed,
            rescales=rescale_requests(sc),
            max_restarts=sc.max_restarts,
            time_limit_s=sc.timeout_s,
            run_info={"scenario": sc.name, "records": sc.records, "keys": sc.keys, "checks": sc.checks},
            failpoints_on=any(f.kind == "failpoint" for f in sc.faults),
        )

        def factory(p: PlannedFault, rng: random.Random) -> Injector | None:
            f = p.fault
            if f.kind == "kill_executor":
                _, pid = _executor_target(cluster, None if f.target is None else str(f.target), rng)
                return KillProcess(scope, pid, "executor")
            if f.kind == "pause_executor":
                _, pid = _executor_target(cluster, None if f.target is None else str(f.target), rng)
                return PauseProcess(scope, pid, "executor")
            if f.kind == "kill_python_worker":
                eid, _ = _executor_target(cluster, None if f.target is None else str(f.target), rng)
                workers = cluster.python_worker_pids().get(eid, [])
                if not workers:
                    raise InjectorError(f"executor {eid} has no Python worker running")
                return KillProcess(scope, rng.choice(workers), "python_worker")
            return runtime_injector(ex, scope, p, rng)

        nemesis = Nemesis(plan(sc), factory, ex.history.emit)
        ex.hooks = nemesis
        stats = ex.run().to_stats()
        return {**stats, "master": master, "spark_startup_s": round(getattr(cluster, "startup_s", 0.0), 1)}
    finally:
        cluster.stop()
