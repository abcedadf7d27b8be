"""Recovery time after an executor SIGKILL: ours vs Spark Structured Streaming's, on the same
local-cluster, with the same keys and checkpoint interval.

Both sides: SIGKILL an executor JVM that runs the job (ours: the one running the stateful subtask,
as its task reported; Structured Streaming: the one with the lowest id, which every micro-batch's
tasks are spread over) right after the second checkpoint has
completed (ours: the coordinator completed checkpoint 2; Structured Streaming: micro-batch 1's
commit file exists), and stop the clock at the first checkpoint completed after that — ours: the
first checkpoint of the next deployment, at whatever parallelism (Spark fails the barrier stage;
with a spare slot per task it relaunches every task at once; without one, adaptive recovery
(``harness.driver.adaptive``, on by default) restarts the job on the slot left, sharing it, after the
resource stabilization timeout; every task restores from checkpoint 2, then the coordinator
completes a new checkpoint); Structured
Streaming: the next micro-batch commit (Spark retries the lost tasks, the state store reloads the
lost partitions from the checkpoint). Cluster startup is excluded, and each side runs a warm-up job
first (see ``end_to_end``). Lower is better: the ratio is ours / Spark's, target <= 1. Measured
on two cluster shapes (``SHAPES_FULL``): with and without a spare task slot per task.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from chaos.extra.bench.core import Figure
from chaos.extra.bench.end_to_end import MASTER, run_ours, runnable_operators, spark_cluster, warm_up
from chaos.extra.bench.spark_streaming import run_structured_streaming_count, write_input

__all__ = ["run", "KillAfterCheckpoint", "Measured"]

KILL_AFTER = 2
STATEFUL_TASK = "count[0]"  # ours: the kill hits the executor running the job's stateful subtask
INTERVAL_MS = 500  # both sides
# keys (state size at the kill). Both sides stop once they have recovered: ours reads an input too
# large to end first (OURS_RECORDS, whatever the machine's speed) and the benchmark stops the run at
# the first checkpoint after the restore; Spark gets 10 records per key in 10 micro-batches, which
# Structured Streaming runs one per trigger however fast the machine is
OURS_RECORDS = 10**9
KEYS_FULL = (2_000, 10_000, 40_000)
SSS_BATCHES = 10
# Cluster shapes (both sides run on the same one). Ours relaunches the whole barrier stage, which
# needs a free slot per task at once: with 2 cores per executor the survivor has them; with 1 core
# per executor adaptive recovery restarts the job on the survivor's one slot (both subtasks share it)
# rather than wait for the replacement executor (new JVM, cold Python workers).
SPARE_SLOTS = "local-cluster[2,2,2048]"
SHAPES_QUICK: tuple[tuple[str, tuple[int, ...]], ...] = ((SPARE_SLOTS, (2_000,)),)
SHAPES_FULL: tuple[tuple[str, tuple[int, ...]], ...] = ((SPARE_SLOTS, KEYS_FULL), (MASTER, (2_000,)))


class Measured(Exception):  # noqa: N818 - not an error: the run has given what it measures
    """Raised from the hooks to end our run once the recovery has been measured; the executor's own
    cleanup (coordinator retired, links closed, ``run_end`` written) runs as it unwinds."""


def _victim(cluster: Any, executor_id: str | None = None) -> int:
    """The pid of executor ``executor_id``, else of the live executor with the lowest id."""
    pids = cluster.executor_pids()
    if not pids:
        raise RuntimeError("no executor process of the benchmark's cluster is visible")
    if executor_id in pids:
        return pids[executor_id]
    return pids[min(pids, key=lambda e: int(e) if e.isdigit() else 0)]


def _executor_of(ex: Any, task: str) -> str | None:
    """The executor that runs ``task`` in ``ex``'s current deployment, as the task reported it. Once a
    kill has been replaced, the executor with the lowest id may run none of the job's tasks: killing it
    would leave nothing to recover."""
    try:
        home = ex.inband.current_homes().get(task)
    except AttributeError:  # not a SparkExecutor (the hook's unit test)
        return None
    return None if home is None else home.executor_id


class KillAfterCheckpoint:
    """Chaos hooks for a :class:`SparkExecutor`: SIGKILL an executor once checkpoint ``after`` has
    completed; ``recovery_seconds`` is the time from the kill to the first checkpoint completed by a
    later deployment (after Spark relaunched the stage and the tasks restored). Then it cancels the
    Spark job and raises :class:`Measured` from the driver loop: the rest of the input is not needed."""

    def __init__(self, cluster: Any, after: int = KILL_AFTER) -> None:
        self.cluster, self.after = cluster, after
        self.ex: Any = None
        self.killed_at: float | None = None
        self.killed_deployment = -1
        self.recovery_seconds: float | None = None
        self.slots = 0  # the task slots of the deployment that recovered

    def planned(self) -> list[dict[str, Any]]:
        return []  # a measurement, not a planned fault: fault_schedule has nothing to judge

    def start(self, controls: Any, emit: Any) -> KillAfterCheckpoint:
        self.ex = controls  # the SparkExecutor: which deployment runs
        return self

    def on_checkpoint_completed(self, checkpoint_id: int) -> None:
        dep = self.ex.dep.number if self.ex is not None and self.ex.dep is not None else 0
        if self.killed_at is None and checkpoint_id >= self.after:
            pid = _victim(self.cluster, _executor_of(self.ex, STATEFUL_TASK))
            os.kill(pid, signal.SIGKILL)
            self.killed_at, self.killed_deployment = time.perf_counter(), dep
        elif self.killed_at is not None and self.recovery_seconds is None and dep > self.killed_deployment:
            self.recovery_seconds = time.perf_counter() - self.killed_at
            self.slots = self.ex.slots

    def on_time(self, now_ms: int) -> None:
        if self.recovery_seconds is not None:
            self.cluster.sc.cancelAllJobs()
            _wait_for_no_active_job(self.cluster)
            raise Measured(f"recovered in {self.recovery_seconds:.2f} s")

    def on_records(self, total_records: int) -> None:
        pass

    def on_failpoint(self, name: str, target: str | None = None) -> None:
        return None

    def awaiting(self, kinds: tuple[str, ...]) -> list[str]:
        return []

    def holding(self) -> list[str]:
        return []

    def heal_all(self) -> None:
        pass


def _wait_for_no_active_job(cluster: Any, timeout_s: float = 60.0) -> None:
    """A cancelled job's tasks release their slots before the next measurement starts."""
    deadline = time.monotonic() + timeout_s
    while cluster.sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)


def _ours(cluster: Any, work: Path, keys: int, time_limit_s: float) -> tuple[float, str]:
    hooks = KillAfterCheckpoint(cluster)
    try:
        run_ours(
            cluster, work, OURS_RECORDS, keys, interval_ms=INTERVAL_MS, hooks=hooks, time_limit_s=time_limit_s
        )
    except Measured:
        pass
    if hooks.recovery_seconds is None:
        raise RuntimeError(
            f"ours: no checkpoint completed after the kill within {time_limit_s:.0f} s "
            f"(killed: {hooks.killed_at is not None})"
        )
    return (
        hooks.recovery_seconds,
        f"unbounded input, stopped at the first checkpoint after the restore (on {hooks.slots} task slots)",
    )


def _theirs(cluster: Any, work: Path, keys: int, op: str) -> float:
    src = work / f"input-{keys}"
    if not src.exists():
        write_input(src, 10 * keys, keys, SSS_BATCHES)
    r = run_structured_streaming_count(
        cluster.spark,
        10 * keys,
        keys,
        INTERVAL_MS,
        operator=op,
        batches=SSS_BATCHES,
        kill_executor_pid=lambda: _victim(cluster),
        kill_after_batches=KILL_AFTER,
        stop_after_recovery=True,
        input_dir=src,
    )
    if r.recovery_seconds is None:
        raise RuntimeError(f"Spark {op}: no micro-batch committed after the kill")
    return r.recovery_seconds


def run(quick: bool) -> list[Figure]:
    ops, missing = runnable_operators()
    repeats = 1 if quick else 2  # best of n per side: a kill's cost varies run to run
    figures: list[Figure] = []
    for master, sizes in SHAPES_QUICK if quick else SHAPES_FULL:
        with (
            tempfile.TemporaryDirectory(prefix="statechaos-bench-recovery-") as tmp,
            spark_cluster(master, "recovery") as cluster,
        ):
            work = Path(tmp)
            warm_up(cluster, work, ops)
            for keys in sizes:
                ours = [_ours(cluster, work, keys, 180 if quick else 600) for _ in range(repeats)]
                ours_s, ours_note = min(ours)
                theirs = {op: min(_theirs(cluster, work, keys, op) for _ in range(repeats)) for op in ops}
                best = min(theirs, key=lambda op: theirs[op])
                others = "; ".join(f"{op} {t:.1f} s" for op, t in theirs.items())
                not_run = ", ".join(f"{o} ({w})" for o, w in missing.items())
                figures.append(
                    Figure(
                        name="recovery: executor SIGKILL -> first checkpoint after restore",
                        value=ours_s,
                        baseline=theirs[best],
                        unit="s",
                        baseline_name=f"Spark SS {best}",
                        target=1.0,
                        higher_is_better=False,
                        size={"cluster": master, "keys": keys, "interval_ms": INTERVAL_MS},
                        notes=(
                            f"cluster startup excluded; best of {repeats} per side; kill after checkpoint/"
                            f"micro-batch {KILL_AFTER}; ours {ours_note} (all runs: "
                            f"{', '.join(f'{t:.1f}' for t, _ in ours)} s); Spark {10 * keys} records in "
                            f"{SSS_BATCHES} micro-batches; operators: {others}"
                            + (f"; not run: {not_run}" if not_run else "")
                        ),
                    )
                )
    return figures
