"""``./dev test`` without arguments (CI): the whole suite as two lanes at once, split by marker one
way. Lane two runs the fast tier (``./dev test --fast``'s marker expression: no Spark, no Docker, not
slow), then the tests marked ``alongside`` (long, self-contained Spark tests that share nothing with
the rest: the Structured Streaming examples' union runs); lane one, the main session, runs everything
else (Spark, docker, the slow Python tests), which waits on JVM starts, micro-batch triggers and
containers much of its time. Lane two ends well before lane one, so its tests cost the run no wall
time; the others then run under the load ``./dev test --stress`` proves the Spark and docker suites
pass under (a busy loop on one of two cores). The slow Python tests (real sockets, measured toxics)
stay in the main session, as before.

All sessions write to one ``allure-results/``; lane two's output follows the main session's. Exit
code: the first failing session's (no test selected counts as success). ``STATECHAOS_SERIAL_TESTS=1``
runs lane two after the main session instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

ALONGSIDE = "alongside"  # the marker of lane two's tests after the fast tier (pyproject's markers)


def others(fast: str) -> str:
    """The marker expression of the main session: every test neither lane-two expression selects."""
    return f"not ({fast}) and not {ALONGSIDE}"


def lane_two(fast: str) -> list[str]:
    """Lane two's marker expressions, run one after the other: the fast tier, then ``alongside``."""
    return [fast, f"{ALONGSIDE} and not ({fast})"]


def _pytest(marker: str, args: Sequence[str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "--alluredir=allure-results", "-m", marker, *extra, *args]


def _run_lane(markers: list[str], args: Sequence[str], out: IO[bytes], codes: list[int]) -> None:
    for marker in markers:  # one session writes .pytest_cache: the main one
        cmd = _pytest(marker, args, "-p", "no:cacheprovider")
        codes.append(subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode)


def run(fast: str, args: Sequence[str], alluredir: Path = Path("allure-results")) -> int:
    """Both lanes over ``args`` (extra pytest arguments, without ``-m``); 0 when every session passed."""
    shutil.rmtree(alluredir, ignore_errors=True)  # all add to it: cleaned once, before any starts
    serial = os.environ.get("STATECHAOS_SERIAL_TESTS") == "1"
    with tempfile.TemporaryDirectory(prefix="statechaos-tiers-") as tmp:
        log = Path(tmp) / "lane-two.log"
        t0 = time.monotonic()
        two: list[int] = []
        with log.open("wb") as out:
            lane = threading.Thread(target=_run_lane, args=(lane_two(fast), args, out, two), daemon=True)
            if not serial:
                lane.start()
            main = subprocess.run(_pytest(others(fast), args), check=False).returncode
            main_s = time.monotonic() - t0
            if serial:
                lane.start()
            lane.join()
        print(f"\n[tiers] lane two: the fast tier (-m {fast!r}), then -m {ALONGSIDE!r}, "
              f"{'after' if serial else 'run alongside'}:", flush=True)  # fmt: skip
        sys.stdout.write(log.read_text(errors="replace"))
    print(f"[tiers] main session {main_s:.0f} s (pytest exit {main}), lane two exits {two}, "
          f"whole run {time.monotonic() - t0:.0f} s", flush=True)  # fmt: skip
    return next((c for c in (main, *two) if c not in (0, 5)), 0)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
