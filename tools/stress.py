"""``./dev test --stress``: the Spark and docker suites, three rounds in a row, while a busy loop holds
one of the machine's cores; then each test's duration spread across the rounds. Exit 1 when any
round failed: a test that passes on a quiet machine but not on a loaded one waits on the clock.

    ./dev test --stress                 # suites/spark, suites/docker and every spark/docker-marked test
    ./dev test --stress suites/spark/test_transport.py -k order   # any pytest selection instead
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROUNDS = 3
HOG = "while True: pass"  # one core's worth of CPU, needs nothing installed


def default_selection(python: str) -> list[str]:
    """Node ids of the Spark and docker suites' folders and of every test marked spark or docker."""
    ids: list[str] = []
    for args in (["suites/spark", "suites/docker"], ["suites", "-m", "spark or docker"]):
        out = subprocess.run(
            [python, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        ids += [line for line in out.splitlines() if "::" in line and line not in ids]
    return ids


def durations(junit: Path) -> dict[str, tuple[float, str]]:
    """test id -> (seconds, outcome) from a JUnit XML report."""
    out: dict[str, tuple[float, str]] = {}
    if not junit.is_file():
        return out
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        out[name] = (float(case.get("time") or 0.0), outcome)
    return out


def spread_table(rounds: list[dict[str, tuple[float, str]]]) -> Table:
    """One row per test: its seconds in each round, min, median, max and max/min."""
    table = Table(title=f"test durations over {len(rounds)} rounds under a CPU hog (seconds)")
    table.add_column("test", overflow="fold")
    for i in range(len(rounds)):
        table.add_column(f"round {i + 1}", justify="right")
    for col in ("min", "median", "max", "max/min"):
        table.add_column(col, justify="right")
    names = sorted({n for r in rounds for n in r}, key=lambda n: -max(r.get(n, (0.0, ""))[0] for r in rounds))
    for name in names:
        cells, secs = [], []
        for r in rounds:
            if name not in r:
                cells.append("-")
                continue
            t, outcome = r[name]
            secs.append(t)
            cells.append(
                f"{t:.2f}"
                + (
                    ""
                    if outcome == "passed"
                    else f" [red]{outcome}[/red]"
                    if outcome == "failed"
                    else " skipped"
                )
            )
        lo, hi = (min(secs), max(secs)) if secs else (0.0, 0.0)
        med = statistics.median(secs) if secs else 0.0
        ratio = f"{hi / lo:.1f}" if lo > 0 else "-"
        table.add_row(name, *cells, f"{lo:.2f}", f"{med:.2f}", f"{hi:.2f}", ratio)
    return table


def stress(pytest_args: Sequence[str], rounds: int = ROUNDS, console: Console | None = None) -> int:
    """Run ``rounds`` pytest rounds of ``pytest_args`` (default: the Spark and docker suites) while a
    busy loop holds a core; print each round's result and the duration spread; 0 only if every
    round passed."""
    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    python = sys.executable
    args = list(pytest_args) or default_selection(python)
    if not args:
        console.print("[red]stress: no tests selected[/red]")
        return 2
    hog = subprocess.Popen([python, "-c", HOG])
    console.print(f"[bold]stress[/bold]: a busy loop (pid {hog.pid}) holds one core; {rounds} rounds")
    results: list[dict[str, tuple[float, str]]] = []
    codes: list[int] = []
    try:
        with tempfile.TemporaryDirectory(prefix="statechaos-stress-") as tmp:
            for i in range(rounds):
                junit = Path(tmp) / f"round-{i + 1}.xml"
                t0 = time.monotonic()
                rc = subprocess.run(
                    [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args],
                    check=False,
                ).returncode
                rc = 0 if rc == 5 else rc  # nothing selected (e.g. all deselected) is not a failure
                codes.append(rc)
                results.append(durations(junit))
                verdict = "[green]passed[/green]" if rc == 0 else f"[red]FAILED (pytest exit {rc})[/red]"
                console.print(f"round {i + 1}/{rounds}: {verdict} in {time.monotonic() - t0:.0f} s")
    finally:
        hog.kill()
        hog.wait()
    console.print(spread_table(results))
    failed = [i + 1 for i, rc in enumerate(codes) if rc != 0]
    if failed:
        console.print(f"[red]stress: round(s) {', '.join(map(str, failed))} of {rounds} failed[/red]")
        return 1
    console.print(f"[green]stress: {rounds} of {rounds} rounds passed[/green]")
    return 0


if __name__ == "__main__":
    sys.exit(stress(sys.argv[1:]))
