"""How the Spark executor's tasks run: the job's subtasks as one barrier-mode stage
(``RDD.barrier().mapPartitions``) followed by a shuffle, so the barrier stage is a ShuffleMapStage that
Spark relaunches as a whole when a task or an executor dies (a barrier ResultStage it never retries).
Each task runs ``harness.spark.task_runner.run_subtask`` for one subtask, or, in a deployment with fewer
slots than subtasks (adaptive recovery), for the subtasks its slot shares (``harness.spark.slot_sharing``)."""

from __future__ import annotations

import threading
from typing import Any

from harness.job import JobGraph
from harness.spark.network import Endpoint
from harness.spark.task_runner import run_subtask
from harness.spark.transport import RunSecret

__all__ = ["JOB_CODE_FAILED", "submit_stage"]

# marks a task failure no restart can fix: the job's code does not load on the executor
JOB_CODE_FAILED = "statechaos: the job's code cannot be loaded on the executor"


def _stage_body(
    graph: JobGraph,
    run_dir: str,
    coordinators: dict[str, Endpoint],
    secret: RunSecret,
    layout: list[list[int]],
    job: str,
    stall_s: float,
) -> Any:
    """The barrier stage's function (``job``: its Spark job group, which its tasks name on
    registration; ``stall_s``: how long its tasks' waits may see no progress). The run's secret travels inside it (Spark ships the closure to
    the executors), never on a command line, in a log or in a file. The job travels pickled, with the
    user's modules registered by value, so it is loaded on the executor where a failure can be told
    apart (its code cannot load there) from the job's own failures."""
    from pyspark import cloudpickle

    blob = cloudpickle.dumps(graph)  # user modules registered by value travel inside

    def body(it: Any) -> Any:
        import pickle
        import traceback

        from pyspark import BarrierTaskContext

        try:
            g = pickle.loads(blob)
        except Exception:  # e.g. a module the job imports is missing on the executor
            raise RuntimeError(f"{JOB_CODE_FAILED}\n{traceback.format_exc()}") from None
        list(it)
        ctx = BarrierTaskContext.get()
        mine, attempt = layout[ctx.partitionId()], ctx.taskAttemptId()
        if len(mine) == 1:
            yield run_subtask(g, run_dir, coordinators, secret, mine[0], attempt, job, stall_s)
        else:
            from harness.spark.slot_sharing import run_shared

            yield from run_shared(
                lambda p: run_subtask(g, run_dir, coordinators, secret, p, attempt, job, stall_s), mine
            )

    return body


def submit_stage(
    sc: Any,
    graph: JobGraph,
    run_dir: str,
    coordinators: dict[str, Endpoint],
    secret: RunSecret,
    layout: list[list[int]],
    group: str,
    stall_s: float = 120.0,
) -> tuple[threading.Thread, dict[str, Any]]:
    """Run the job as one Spark job in job group ``group`` (``sc.cancelJobGroup`` stops it), on a
    thread of its own, one barrier task per slot of ``layout`` (``harness.driver.adaptive.slot_layout``); the
    dict gets ``tasks`` (each subtask's summary) or ``error`` (what Spark raised when it gave up, or
    the cancel) when the thread ends."""
    n = len(layout)
    result: dict[str, Any] = {}
    body = _stage_body(graph, run_dir, coordinators, secret, layout, group, stall_s)

    def run() -> None:
        try:
            sc.setJobGroup(group, f"statechaos {graph.name}")
            rdd = sc.parallelize(range(n), n).barrier().mapPartitions(body)
            result["tasks"] = rdd.map(lambda r: (0, r)).groupByKey(1).values().collect()
        except BaseException as e:  # reported to the driver loop
            result["error"] = e

    th = threading.Thread(target=run, name="spark-job", daemon=True)
    th.start()
    return th, result
