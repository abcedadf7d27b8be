"""Where our end-to-end run spends its time: py-spy samples every Python process of the run (the
executors' PySpark workers that run our subtasks, and the driver) while ``end_to_end.run_ours``
processes the keyed count, and the busiest functions are printed as shares of all samples.

    ./dev python -m chaos.extra.bench.profile_e2e [RECORDS] [KEYS]

py-spy is no dependency of the project (``pip install py-spy``); without it this says so and exits 2.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

__all__ = ["main", "top_frames"]


def _python_workers(executor_pids: list[int]) -> list[int]:
    """The PySpark daemons under the executor JVMs (their forked workers are profiled with them)."""
    out = []
    for pid in executor_pids:
        for child in psutil.Process(pid).children(recursive=False):
            if "python" in child.name().lower():
                out.append(child.pid)
    return out


# our own modules, as py-spy names their files
OURS = ("harness/", "reference_impl/", "chaos/")


def top_frames(
    raw_files: list[Path], n: int = 15
) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Parse py-spy's raw (collapsed-stack) output: total samples, the top ``n`` functions by self
    samples (the innermost frame) and, among our own modules' functions, by inclusive samples
    (anywhere on the stack; PySpark's wrappers around every task would fill that list otherwise)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for f in raw_files:
        for line in f.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = stack.split(";")[1:]  # the first is the process
            if not frames:
                continue
            c = int(count)
            total += c
            own[frames[-1]] += c
            for fr in set(frames):
                if any(m in fr for m in OURS):
                    incl[fr] += c
    return total, own.most_common(n), incl.most_common(n)


def main(argv: list[str] | None = None) -> int:
    from chaos.extra.bench.end_to_end import MASTER, run_ours, spark_cluster

    args = sys.argv[1:] if argv is None else argv
    records = int(args[0]) if args else 500_000
    keys = int(args[1]) if len(args) > 1 else 10_000
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy is not installed (pip install py-spy); it is not a dependency of statechaos")
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="statechaos-profile-") as tmp,
        spark_cluster(MASTER, "profile") as cl,
    ):
        work = Path(tmp)
        run_ours(cl, work, 2_000, 100, interval_ms=200)  # warm-up: PySpark daemons forked, classes loaded
        targets = [*_python_workers(list(cl.executor_pids().values())), os.getpid()]
        spies: list[tuple[subprocess.Popen[Any], Path]] = []
        for pid in targets:
            out = work / f"spy-{pid}.txt"
            cmd = [
                spy,
                "record",
                "--function",
                "-f",
                "raw",
                "-r",
                "200",
                "--nonblocking",
                "-o",
                str(out),
                "--pid",
                str(pid),
            ]
            if pid != os.getpid():
                cmd.append("--subprocesses")
            spies.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out))
        try:
            result = run_ours(cl, work, records, keys)
        finally:
            for p, _ in spies:
                p.send_signal(signal.SIGINT)
            for p, _ in spies:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        total, own, incl = top_frames([o for _, o in spies if o.exists()])
    print(
        f"ours: {records} records, {keys} keys in {result.seconds:.1f} s ({result.records_per_s:,.0f}/s), "
        f"{len(targets)} processes sampled, {total} samples"
    )
    for title, rows in (("self", own), ("inclusive (our modules)", incl)):
        print(f"\ntop functions by {title} samples")
        for frame, c in rows:
            print(f"  {100 * c / max(1, total):5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
