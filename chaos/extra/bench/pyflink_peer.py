"""PyFlink as a peer: the keyed running count in Flink's own runtime (PyFlink's Python DataStream
API, a ``KeyedProcessFunction`` with a ``ValueState``, checkpoints every second, parallelism 2, an
exactly-once ``FileSink``) against ours (``keyed_count`` on the per-record path, source 1 + count 1
on ``local-cluster[2,1,2048]``, 1 s checkpoints, exactly-once file sink), in one run.

Both sides are measured at steady state as a **marginal rate**: each runs the count at two input
sizes, and the figure is ``(n2 - n1) / (t2 - t1)``, so what a job pays once (JVM and cluster
start-up, Python worker start, job submission, the final checkpoint) cancels out. PyFlink's jobs run
one after another in one JVM (a tiny warm-up job first), in a subprocess of PyFlink's own
venv (:mod:`chaos.extra.bench.pyflink_env`), started in a session of its own and killed with every
descendant (its JVM, the Python workers that JVM starts) when it ends, fails or is interrupted.

When the PyFlink venv is not built the module raises :class:`~chaos.extra.bench.core.Unavailable` naming
the command that builds it; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chaos.extra.bench.core import Figure, Unavailable
from chaos.extra.bench.pyflink_env import PYFLINK_VERSION, PyflinkUnavailable, ready_python

__all__ = ["PyflinkConfig", "PyflinkResult", "run_pyflink", "marginal_rate", "run"]

JOB = Path(__file__).with_name("pyflink_job.py")
KEYS = 1_000
# (n1, n2) records per side, {quick: ..., full: ...}. PyFlink runs ~3-8k records/s, ours ~40x that; the
# difference must take several seconds on each side, since a run's end waits up to a checkpoint
# interval (1 s) for the final checkpoint, jitter that lands on t2 - t1
PYFLINK_SIZES = {True: (5_000, 45_000), False: (20_000, 200_000)}
OUR_SIZES = {True: (50_000, 500_000), False: (100_000, 2_000_000)}
WARM_UP = (500, 100)  # a first job in a fresh JVM runs far slower (class loading, JIT): ~2x under load
STALL_S = 600.0  # no job finished for this long: PyFlink is stuck


@dataclass(frozen=True)
class PyflinkConfig:
    """What the PyFlink side runs with, every setting passed to Flink explicitly (Flink 2.3's
    defaults) so the statement in the output is what ran."""

    execution_mode: str = "process"  # python.execution-mode: a Beam worker process per task slot
    bundle_size: int = 1_000  # python.fn-execution.bundle.size: records per Python bundle
    bundle_time_ms: int = 1_000  # python.fn-execution.bundle.time
    state_backend: str = "hashmap"  # state.backend.type: heap, as our ValueState
    state_cache_size: int = 1_000  # python.state.cache-size: keyed state cached in the Python worker
    checkpoint_interval_ms: int = 1_000  # as ours (chaos.extra.bench.end_to_end.INTERVAL_MS)
    parallelism: int = 2

    def flink_conf(self) -> dict[str, str]:
        return {
            "python.execution-mode": self.execution_mode,
            "python.fn-execution.bundle.size": str(self.bundle_size),
            "python.fn-execution.bundle.time": str(self.bundle_time_ms),
            "python.state.cache-size": str(self.state_cache_size),
            "state.backend.type": self.state_backend,
            "execution.checkpointing.interval": f"{self.checkpoint_interval_ms} ms",
            "execution.checkpointing.storage": "filesystem",
        }

    def short(self) -> str:
        """The settings that set PyFlink's per-record cost, for the bench table's baseline column."""
        return (
            f"PyFlink {PYFLINK_VERSION} {self.execution_mode} mode, bundle {self.bundle_size:,}, "
            f"{self.state_backend} state, state cache {self.state_cache_size:,}, p={self.parallelism}"
        )

    def describe(self) -> str:
        return (
            f"PyFlink {PYFLINK_VERSION}, local MiniCluster, parallelism {self.parallelism}, "
            f"{self.execution_mode} mode, bundle size {self.bundle_size:,} / {self.bundle_time_ms} ms, "
            f"state backend {self.state_backend}, Python state cache {self.state_cache_size:,} entries, "
            f"checkpoints every {self.checkpoint_interval_ms} ms to the filesystem, "
            "NumberSequenceSource -> Python map -> key_by -> KeyedProcessFunction(ValueState) -> FileSink"
        )


@dataclass
class PyflinkResult:
    records: int
    keys: int
    seconds: float
    lines: int


def marginal_rate(small: tuple[int, float], large: tuple[int, float]) -> float:
    """Records/s between two runs ``(records, seconds)``: the steady-state rate, fixed costs cancelled."""
    (n1, t1), (n2, t2) = small, large
    if n2 <= n1 or t2 <= t1:
        raise RuntimeError(
            f"no marginal rate: {n2:,} records took {t2:.2f} s, {n1:,} records {t1:.2f} s "
            "(the larger run was not slower: noise larger than the work; use larger sizes)"
        )
    return (n2 - n1) / (t2 - t1)


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc`` (leader of its own session), ended with every descendant when the block exits: the
    descendants are listed before anything is killed, since the Python workers of a killed JVM would
    be reparented and lost."""
    try:
        yield proc
    finally:
        _kill_tree(proc)


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    _, alive = psutil.wait_procs(tree, timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def run_pyflink(
    python: Path, sizes: list[tuple[int, int]], config: PyflinkConfig, warm_up: tuple[int, int] | None
) -> list[PyflinkResult]:
    """Run the PyFlink count once per ``(records, keys)`` in ``sizes`` (after ``warm_up``, if any),
    one JVM, in a subprocess of ``python``; checks each job committed one line per record."""
    with tempfile.TemporaryDirectory(prefix="statechaos-bench-pyflink-") as tmp:
        work = Path(tmp)
        cfg = {
            "sizes": [list(s) for s in sizes],
            "warm_up": list(warm_up) if warm_up else None,
            "parallelism": config.parallelism,
            "flink_conf": config.flink_conf(),
            "workdir": str(work),
        }
        (work / "config.json").write_text(json.dumps(cfg))
        logs = work / "logs"
        logs.mkdir()
        env = {
            **os.environ,
            "FLINK_LOG_DIR": str(logs),
            "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        env.pop("PYTHONPATH", None)  # the venv's own packages only
        stderr = open(work / "stderr.log", "w")  # noqa: SIM115 - closed below, after the process
        results: list[PyflinkResult] = []
        try:
            proc = subprocess.Popen(
                [str(python), str(JOB), str(work / "config.json")],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
                cwd=work,
                start_new_session=True,  # Ctrl-C reaches us only; we end the whole tree
            )
            with _reaped(proc):
                results = _read_results(proc, work, logs)
        finally:
            stderr.close()
        expected = [*(([warm_up]) if warm_up else []), *sizes]
        if len(results) != len(expected):
            raise RuntimeError(f"PyFlink ran {len(results)} of {len(expected)} jobs")
        for r in results:
            if r.lines != r.records:
                raise RuntimeError(f"PyFlink committed {r.lines} lines for {r.records} records")
        return results[1:] if warm_up else results


def _read_results(proc: subprocess.Popen[str], work: Path, logs: Path) -> list[PyflinkResult]:
    import selectors

    assert proc.stdout is not None
    out: list[PyflinkResult] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    last = time.monotonic()
    while True:
        if not sel.select(timeout=min(5.0, STALL_S)):
            if proc.poll() is not None:
                break
            if time.monotonic() - last > STALL_S:
                raise TimeoutError(f"PyFlink finished no job for {STALL_S:.0f} s{_tail(work, logs)}")
            continue
        line = proc.stdout.readline()
        if not line:
            break
        d = json.loads(line)
        out.append(PyflinkResult(int(d["records"]), int(d["keys"]), float(d["seconds"]), int(d["lines"])))
        last = time.monotonic()
    if proc.wait() != 0:
        raise RuntimeError(f"the PyFlink job exited {proc.returncode}{_tail(work, logs)}")
    return out


def _tail(work: Path, logs: Path) -> str:
    text = (work / "stderr.log").read_text(errors="replace").strip().splitlines()[-8:]
    return (":\n" + "\n".join(text) if text else "") + f"\n(Flink's logs were in {logs})"


def _our_runs(quick: bool) -> tuple[tuple[int, float], tuple[int, float], int]:
    """Ours at the two sizes (best of 2 each in full mode) on one cluster, after a warm-up job."""
    from chaos.extra.bench.end_to_end import MASTER, run_ours, spark_cluster

    n1, n2 = OUR_SIZES[quick]
    opts = {"batched": False}  # the per-record path: a function call per record, as PyFlink's
    with (
        tempfile.TemporaryDirectory(prefix="statechaos-bench-pyflink-ours-") as tmp,
        spark_cluster(MASTER, "pyflink-peer") as cluster,
    ):
        work = Path(tmp)
        run_ours(cluster, work, 2_000, 100, interval_ms=200, options=opts)
        tries = 1 if quick else 2
        t1 = min(run_ours(cluster, work, n1, KEYS, options=opts).seconds for _ in range(tries))
        big = min(
            (run_ours(cluster, work, n2, KEYS, options=opts) for _ in range(tries)), key=lambda r: r.seconds
        )
    return (n1, t1), (n2, big.seconds), big.checkpoints


def run(quick: bool) -> list[Figure]:
    return [measure(quick, PyflinkConfig())]


def measure(quick: bool, config: PyflinkConfig) -> Figure:
    """Ours / PyFlink (run with ``config``), marginal rates, PyFlink first; Unavailable without its venv."""
    try:
        python = ready_python()
    except PyflinkUnavailable as e:
        raise Unavailable(str(e)) from None
    p1, p2 = PYFLINK_SIZES[quick]
    theirs = run_pyflink(python, [(p1, KEYS), (p2, KEYS)], config, WARM_UP)
    flink_rate = marginal_rate((p1, theirs[0].seconds), (p2, theirs[1].seconds))
    small, large, checkpoints = _our_runs(quick)
    ours_rate = marginal_rate(small, large)
    return Figure(
        name="keyed running count, marginal rate: ours / PyFlink",
        value=ours_rate,
        baseline=flink_rate,
        unit="records/s",
        baseline_name=config.short(),
        target=10.0,
        size={"keys": KEYS, "ours": f"{small[0]}->{large[0]}", "pyflink": f"{p1}->{p2}"},
        notes=(
            f"ours: keyed_count per-record path, source 1 + count 1 on local-cluster[2,1,2048], "
            f"1 s checkpoints ({checkpoints} in the larger run), 2PC file sink; "
            f"{small[0]:,} records {small[1]:.2f} s, {large[0]:,} records {large[1]:.2f} s. "
            f"PyFlink: {config.describe()}; {p1:,} records {theirs[0].seconds:.2f} s, "
            f"{p2:,} records {theirs[1].seconds:.2f} s"
        ),
    )


if __name__ == "__main__":  # a diagnostic: ./dev python -m chaos.extra.bench.pyflink_peer [--full] [--thread]
    mode = "thread" if "--thread" in sys.argv[1:] else "process"
    fig = measure("--full" not in sys.argv[1:], PyflinkConfig(execution_mode=mode))
    print(json.dumps(fig.to_dict(), indent=2))
