"""Oracle speed: the exactly-once oracle over a run's committed output (JSON lines in transaction
files, as the two-phase-commit sink writes them), in records verified per second.

Two figures per size: the rate per CPU-second against the 2 M records/s target (CPU time, because
wall time on a shared machine measures the neighbours; the wall rate is in the notes), and the
columnar oracle against the general per-record one on the same output in the same run."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from chaos.extra.bench.core import Figure
from harness.job.sources import SequenceSource, key_name
from harness.jobs import JobSpec, build_job
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.exactly_once import _check_per_record, check_exactly_once

__all__ = ["run"]

TARGET_RATE = 2_000_000  # records verified per second (issue #10)
_FILES = 40  # transactions: the sink commits one file per subtask and checkpoint


def _write_output(run_dir: Path, spec: JobSpec) -> int:
    """Committed output of a fault-free keyed_count run: ``[key, seq, count]`` lines, keys
    interleaved across transaction files in commit order (as the sink writes them)."""
    d = run_dir / "output" / "committed"
    d.mkdir(parents=True)
    src = spec.source
    assert isinstance(src, SequenceSource)  # keyed_count's
    total = src.records
    per_file = -(-total // _FILES)
    counts = [src.total_for(i) for i in range(src.keys)]
    names = [key_name(i) for i in range(src.keys)]
    seq = 0
    written = 0
    for f in range(_FILES):
        lines = []
        # a block of seqs for every key per file: per-key order holds across files
        hi = min(max(counts), seq + max(1, per_file // src.keys))
        if f == _FILES - 1:
            hi = max(counts)
        for name, c in zip(names, counts, strict=True):
            top = min(c, hi)
            lines.append("".join(f'["{name}", {s}, {s}]\n' for s in range(seq + 1, top + 1)))
            written += max(0, top - seq)
        seq = hi
        # checkpoint ids 10..49: name order is commit order (files are read sorted by name)
        (d / f"c{f + 10}-s0-a0-{f}.jsonl").write_text("".join(lines))
    assert written == total, (written, total)
    return total


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def run(quick: bool) -> list[Figure]:
    sizes = [200_000, 500_000, 1_000_000] if quick else [1_000_000, 3_000_000, 10_000_000]
    keys = 1000
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="statechaos-bench-oracle-") as tmp:
        # the general per-record oracle, on a small run: it is linear, a sample measures its rate
        m = 100_000
        small = build_job("keyed_count", m, keys, 1, 128, 1)
        _write_output(Path(tmp) / "small", small)
        art = RunArtifacts(Path(tmp) / "small")
        _, slow_cpu = _timed(lambda: _check_per_record(art, small))
        slow_rate = m / slow_cpu
        for n in sizes:
            spec = build_job("keyed_count", n, keys, 1, 128, 1)
            run_dir = Path(tmp) / f"run-{n}"
            _write_output(run_dir, spec)
            best_wall, best_cpu, verdict = float("inf"), float("inf"), None
            for _ in range(1 if n >= 5_000_000 else 2):
                art = RunArtifacts(run_dir)  # fresh: the committed output is read inside the timing

                def check(art: RunArtifacts = art, spec: JobSpec = spec) -> None:
                    nonlocal verdict
                    verdict = check_exactly_once(art, spec)

                wall, cpu = _timed(check)
                best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
            assert verdict is not None and verdict.passed, verdict
            size = {"records": n, "keys": keys, "output_bytes": _bytes(run_dir)}
            figures.append(
                Figure(
                    "exactly-once oracle: records verified per CPU-second",
                    n / best_cpu,
                    TARGET_RATE,
                    "records/s",
                    "2 M records/s target",
                    1.0,
                    True,
                    size,
                    f"wall-clock {n / best_wall:,.0f} records/s (load-dependent); includes reading "
                    "and parsing the committed files",
                )
            )
            figures.append(
                Figure(
                    "exactly-once oracle: columnar / per-record",
                    n / best_cpu,
                    slow_rate,
                    "records/s",
                    "per-record oracle",
                    None,
                    True,
                    size,
                    f"per-record rate measured once, on {m:,} records (it is linear in records)",
                )
            )
    return figures


def _bytes(run_dir: Path) -> int:
    return sum(f.stat().st_size for f in (run_dir / "output" / "committed").glob("*.jsonl"))
