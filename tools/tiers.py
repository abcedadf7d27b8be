"""``./dev test`` without arguments (CI): the whole suite as two pytest sessions at once, split by marker
one way. The fast tier (``./dev test --fast``'s marker expression: no Spark, no Docker, not slow) runs
alongside everything else (Spark, docker, the slow Python tests), which waits on JVM starts,
micro-batch triggers and containers much of its time. Only the fast tier is moved: it is what every
edit loop runs on a loaded machine and it waits on no clock; and the others then run under the load
``./dev test --stress`` proves the Spark and docker suites pass under (a busy loop on one of two cores).
The slow Python tests (real sockets, measured toxics) stay in the main session, as before.

Both write to one ``allure-results/``; the fast tier's output follows the main session's. Exit code: the
first failing session's (no test selected counts as success). ``STATECHAOS_SERIAL_TESTS=1`` runs the
fast tier after the main session instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def others(fast: str) -> str:
    """The marker expression of every test the fast tier's expression ``fast`` leaves out."""
    return f"not ({fast})"


def _pytest(marker: str, args: Sequence[str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "--alluredir=allure-results", "-m", marker, *extra, *args]


def run(fast: str, args: Sequence[str], alluredir: Path = Path("allure-results")) -> int:
    """Both sessions over ``args`` (extra pytest arguments, without ``-m``); 0 when both passed."""
    shutil.rmtree(alluredir, ignore_errors=True)  # both add to it: cleaned once, before either starts
    serial = os.environ.get("STATECHAOS_SERIAL_TESTS") == "1"
    with tempfile.TemporaryDirectory(prefix="statechaos-tiers-") as tmp:
        log = Path(tmp) / "fast-tier.log"
        t0 = time.monotonic()
        with log.open("wb") as out:
            fast_cmd = _pytest(fast, args, "-p", "no:cacheprovider")  # one session writes .pytest_cache
            tier = None if serial else subprocess.Popen(fast_cmd, stdout=out, stderr=subprocess.STDOUT)
            main = subprocess.run(_pytest(others(fast), args), check=False).returncode
            main_s = time.monotonic() - t0
            if tier is None:
                tier = subprocess.Popen(fast_cmd, stdout=out, stderr=subprocess.STDOUT)
            codes = [main, tier.wait()]
        print(f"\n[tiers] the fast tier (-m {fast!r}), {'after' if serial else 'run alongside'}:", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
    print(f"[tiers] main session {main_s:.0f} s (pytest exit {codes[0]}), fast tier exit {codes[1]}, "
          f"whole run {time.monotonic() - t0:.0f} s", flush=True)  # fmt: skip
    return next((c for c in codes if c not in (0, 5)), 0)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
