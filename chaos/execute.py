"""Executes a validated scenario on its cluster and returns the oracle verdicts.

The scenario's job (registered or ``module:factory``, ``chaos.scenario_job``) is built at its
parallelism; its cluster (``chaos.cluster.registry``) builds the executor and the injectors of its fault
kinds (``chaos.faults``) and runs it; ``harness.oracles`` checks what the run left behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.cluster.registry import cluster_for
from chaos.errors import InfrastructureError, InputError
from chaos.scenario import Scenario
from chaos.schedule import plan
from harness.collector import fewer_collections
from harness.jobs import JobSpec
from harness.run_store import RunStore

if TYPE_CHECKING:  # only for annotations: the oracles load when a run is judged
    from harness.oracles import Verdict

__all__ = [
    "execute_scenario",
    "liveness_bound_ms",
    "alignment_bound_ms",
    "RunGaveUp",
]


def liveness_bound_ms(sc: Scenario) -> int:
    """How long a fault's recovery may make no progress at all (no records, checkpoint acks, timers,
    restores, deployments: ``harness.oracles.liveness``) before the liveness check fails; a recovery
    that keeps moving passes however long it takes. The scenario's ``recovery_bound_ms``, else 20
    checkpoint intervals and at least 10 s on the simulator, 60 s on Spark: between a lost executor
    and its tasks' restore the history is quiet while Spark notices the loss, cancels the barrier
    job, relaunches an executor JVM or resubmits on the slots left, and starts the tasks' Python
    workers (22 s of silence measured for an adaptive redeploy on local-cluster at load 28 on 2 cores)."""
    if sc.runtime.recovery_bound_ms is not None:
        return int(sc.runtime.recovery_bound_ms)
    return max(10_000 if sc.cluster_kind == "sim" else 60_000, 20 * sc.runtime.checkpoint.interval_ms)


def alignment_bound_ms(sc: Scenario) -> int:
    """How long a subtask may stay blocked in an alignment after its checkpoint was aborted: one
    checkpoint interval on the simulator (the abort reaches every task in the same step; a task must
    not wait for the next checkpoint's barrier instead), and at least 5 s on Spark (the abort travels
    to the executors over the network)."""
    if sc.cluster_kind == "sim":
        return int(sc.runtime.checkpoint.interval_ms)
    return max(5_000, 2 * sc.runtime.checkpoint.interval_ms)


def scenario_spec(sc: Scenario) -> JobSpec:
    """The scenario's job, built; a job that cannot be built is bad input (exit 2)."""
    from chaos.scenario_job import scenario_job

    try:
        return scenario_job(sc, sc.base_dir)
    except InputError as e:  # an unknown job, one its definition or the scenario's settings break
        raise InputError(f"scenario {sc.name!r}: {e}") from None


def record_input(spec: JobSpec, run_dir: Path) -> None:
    """Write what the job reads (``input.json``: files with their SHA-256, generator settings), so a
    replay can tell whether it reads the very same input."""
    import json

    describe = getattr(spec.source, "describe_input", None)
    if describe is not None:
        RunStore(run_dir).input.write_text(json.dumps(describe(), indent=2, sort_keys=True, default=str))


def execute_scenario(
    sc: Scenario, run_dir: Path, resume: bool = False
) -> tuple[list[Verdict], dict[str, Any]]:
    """Run the runtime scenario ``sc`` in ``run_dir`` (``resume``: take over a dead driver's run);
    return (verdicts, run statistics). Every engine's run: :func:`chaos.engines.engine_of`."""
    with fewer_collections():  # the run and its oracles allocate much and make few cycles
        return _execute(sc, run_dir, resume)


def _execute(sc: Scenario, run_dir: Path, resume: bool) -> tuple[list[Verdict], dict[str, Any]]:
    from chaos.scenario_job import checks_for
    from harness.oracles import IntegrityConfig, LivenessConfig, check_all

    spec = scenario_spec(sc)
    record_input(spec, run_dir)
    stats = cluster_for(sc).run(sc, spec, run_dir, resume=resume)
    stats["fault_phases"] = _fault_phases(run_dir)
    # the plan recorded at run_start against what happened; nothing planned: no claim
    planned = sc.runtime.faults or sc.runtime.rescale
    schedule = list(check_all(run_dir, spec, ["fault_schedule"])) if planned else []
    if stats.get("status") == "failed" and _stalled(run_dir):  # a finding: liveness names what stopped
        return _stall_verdicts(sc, spec, run_dir) + schedule, stats
    if stats.get("status") == "failed" and _judged_as_progress(sc, str(stats.get("reason"))):
        return [_progress_verdict(sc, run_dir, str(stats.get("reason"))), *schedule], stats
    if stats.get("status") == "failed":
        # the restart strategy (or Spark) gave up: the oracles would only count what never ran
        raise RunGaveUp(
            f"the job could not finish: {stats.get('reason')}", str(stats.get("root_cause") or ""), stats
        )
    config = {
        "checkpoint_integrity": IntegrityConfig(
            retained=sc.runtime.checkpoint.retained, max_concurrent=sc.runtime.checkpoint.max_concurrent
        ),
        "liveness": LivenessConfig(bound_ms=liveness_bound_ms(sc), alignment_bound_ms=alignment_bound_ms(sc)),
    }
    checks = checks_for(sc, spec.graph)
    # adaptive recovery acted (only executors with task slots to lose have it; sim has none): judge it
    if "adaptive_recovery" not in checks and sc.cluster != "sim" and _adapted(run_dir):
        checks = [*checks, "adaptive_recovery"]
    verdicts = check_all(run_dir, spec, checks, config)
    return [*verdicts, *schedule], stats


def _adapted(run_dir: Path) -> bool:
    """Whether adaptive recovery scaled the job (``harness.oracles.adaptive_recovery``): then its verdict
    is given whether the scenario's checks name it or not."""
    from harness.oracles.adaptive_recovery import adaptive_recovery_acted
    from harness.oracles.artifacts import RunArtifacts

    return adaptive_recovery_acted(RunArtifacts.load(run_dir))


def _fault_phases(run_dir: Path) -> dict[str, list[str]]:
    """Which phases of the job each fault struck (``chaos.fault_phases``), by fault id."""
    from chaos.fault_phases import phases_hit
    from harness.events import read_events

    path = RunStore(run_dir).history
    if not path.is_file():
        return {}
    return {str(k): v for k, v in phases_hit(list(read_events(path))).items()}


def _stall_verdicts(sc: Scenario, spec: JobSpec, run_dir: Path) -> list[Verdict]:
    """A run that stopped progressing: ``liveness`` fails naming what stopped; the other checks are
    unknown (they would judge a run cut short, not the system's results)."""
    from chaos.scenario_job import checks_for
    from harness.oracles import LivenessConfig, Verdict, check_all
    from harness.oracles.verdict import Status

    config = {"liveness": LivenessConfig(liveness_bound_ms(sc), alignment_bound_ms(sc))}
    out = list(check_all(run_dir, spec, ["liveness"], config))
    for name in checks_for(sc, spec.graph):
        if name != "liveness":
            why = "the run stalled before it finished: nothing to judge (see liveness)"
            out.append(Verdict(name, False, why, status=Status.UNKNOWN))
    return out


def _stalled(run_dir: Path) -> bool:
    """Did the run stop progressing for its stall limit (a ``stalled`` event, harness.progress)?"""
    from harness.events import RunStalled, read_events

    path = RunStore(run_dir).history
    return path.is_file() and any(isinstance(e, RunStalled) for e in read_events(path))


def _judged_as_progress(sc: Scenario, reason: str) -> bool:
    """A run that could not finish is a finding (a failed ``progress`` check, exit 1), not an
    infrastructure error, when the job's own code raised the same way again and again (any cluster),
    or on sim, where no environment can be the cause (a spent restart budget, no intact checkpoint)."""
    from harness.driver.user_code import YOUR_JOB_RAISED

    return reason.startswith(YOUR_JOB_RAISED) or sc.cluster_kind == "sim"


def _progress_verdict(sc: Scenario, run_dir: Path, reason: str) -> Verdict:
    """The failed ``progress`` check of a run that could not finish: why, its last failure and the
    planned fault that struck before it."""
    from harness.events import FaultStart, JobRestart, read_events
    from harness.oracles import Verdict

    events = list(read_events(RunStore(run_dir).history))
    details = [f"the job could not finish: {reason}"]
    restarts = [e for e in events if isinstance(e, JobRestart)]
    if restarts:
        last = restarts[-1]
        details.append(f"last restart: t={last.t} ms, attempt {last.attempt}: {last.reason}")
    faults = {p.fault_id: p for p in plan(sc)}
    end = restarts[-1].seq if restarts else len(events)
    before = [e for e in events if isinstance(e, FaultStart) and e.seq < end]
    if before:
        f = before[-1]
        what = faults[f.fault_id].describe() if f.fault_id in faults else f.kind
        details.append(f"the fault before it: t={f.t} ms, fault #{f.fault_id} {what}")
    else:
        details.append("no planned fault struck before it")
    return Verdict(
        "progress",
        False,
        f"the run could not finish after {len(restarts)} restarts",
        details,
        {"restarts": len(restarts)},
    )


class RunGaveUp(InfrastructureError):
    """The system under test gave up on the job; ``stats`` are the run's statistics so far."""

    def __init__(self, message: str, root_cause: str, stats: dict[str, Any]) -> None:
        super().__init__(message, root_cause)
        self.stats = stats


