"""How cheap a simulated run is: what bounds ``statechaos explore``'s search.

Two figures, each against the bare loop (``chaos.extra.bench.bare_loop``) measured in the same run:
runs per minute of a 20,000-record keyed count on the sim executor, every oracle checked (what an
exploration run costs), against how many times per minute the bare loop does the same logical work;
and the sim executor's own records/s (no oracles) against the bare loop's.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from chaos.execute import execute_scenario
from chaos.extra.bench.bare_loop import bare_loop_rate
from chaos.extra.bench.core import Figure
from chaos.scenario import ORACLE_NAMES, Scenario

__all__ = ["run", "sim_scenario", "RUNS_PER_MINUTE_TARGET"]

RUNS_PER_MINUTE_TARGET = 100  # issue 23, for a 20,000-record scenario on the 2-core reference machine


def sim_scenario(records: int, keys: int, checks: list[str]) -> Scenario:
    """The smoke scenario's shape (2 sources, 2 counters, 100 ms checkpoints), without faults."""
    return Scenario.model_validate(
        {
            "name": "bench-sim",
            "cluster": "sim",
            "parallelism": {"source": 2, "count": 2},
            "records": records,
            "keys": keys,
            "checkpoint": {"interval_ms": 100, "retained": 2},
            "checks": checks,
        }
    )


def _best_seconds(sc: Scenario, work: Path, repeats: int) -> float:
    best = float("inf")
    for i in range(repeats):
        d = work / f"run-{i}"
        d.mkdir(parents=True)  # execute_scenario writes input.json into it first
        t0 = time.perf_counter()
        verdicts, _ = execute_scenario(sc, d)
        best = min(best, time.perf_counter() - t0)
        failed = [v.oracle for v in verdicts if not v.holds]
        if failed:
            raise RuntimeError(f"the fault-free sim run failed {', '.join(failed)} (see {d})")
        shutil.rmtree(d, ignore_errors=True)
    return best


def run(quick: bool) -> list[Figure]:
    records, keys = 20_000, 200
    repeats = 3 if quick else 5
    # a fault-free run has no TTL reads, rescale, restore or lost executor: those checks can only be
    # unknown there
    checks = [c for c in ORACLE_NAMES if c not in ("ttl", "rescale", "restored_state", "adaptive_recovery")]
    bare = bare_loop_rate(records, keys, repeats)
    with tempfile.TemporaryDirectory(prefix="statechaos-bench-sim-") as tmp:
        work = Path(tmp)
        with_oracles = _best_seconds(sim_scenario(records, keys, checks), work, repeats)
        executor_only = _best_seconds(sim_scenario(records, keys, []), work, repeats)
    bare_s = records / bare
    return [
        Figure(
            name="sim runs per minute, every oracle checked",
            value=60 / with_oracles,
            baseline=60 / bare_s,
            unit="runs/min",
            baseline_name="bare loop, same records",
            size={"records": records, "keys": keys},
            notes=(
                f"best of {repeats}; the issue's target is {RUNS_PER_MINUTE_TARGET} runs/min on the 2-core "
                f"reference machine; a run {with_oracles:.2f} s, of which the executor {executor_only:.2f} s"
            ),
        ),
        Figure(
            name="sim executor throughput (no oracles)",
            value=records / executor_only,
            baseline=bare,
            unit="records/s",
            baseline_name="bare loop",
            size={"records": records, "keys": keys},
            notes=f"best of {repeats}; one process, 2 sources and 2 counters interleaved by the simulator",
        ),
    ]
