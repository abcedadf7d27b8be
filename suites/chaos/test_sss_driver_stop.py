"""Stopping a Structured Streaming driver waits for it while it makes progress (its work folder
changes, its processes use CPU), however long that takes on a loaded machine, and gives up only when
it stood still for the bound. Real child processes; a bound of 2 s keeps the test short."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import allure
import pytest

from chaos.sss.driver_process import DriverProcess

pytestmark = [pytest.mark.slow, allure.epic("chaos"), allure.feature("structured streaming")]  # real processes, ~7 s

# writes every 0.2 s for 4 s, then exits 0 (a slow stop: a batch ending, state being read)
SLOW = "import sys, time\nfor i in range(20):\n    open(sys.argv[1], 'a').write('x')\n    time.sleep(0.2)\n"
# writes once, then waits without doing anything (a hung driver)
HUNG = "import sys, time\nopen(sys.argv[1], 'a').write('x')\ntime.sleep(600)\n"


def _driver(tmp_path: Path, code: str) -> DriverProcess:
    d = DriverProcess.__new__(DriverProcess)  # the real stop and kill, on a stand-in process
    d.log = (tmp_path / "log").open("w")
    d.proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "work" / "progress")],
                              start_new_session=True)  # fmt: skip
    progress = tmp_path / "work" / "progress"
    while not progress.exists() and d.proc.poll() is None:  # up: the waits below count from here
        time.sleep(0.05)
    return d


def test_a_slow_stop_that_keeps_progressing_is_waited_for(tmp_path: Path):
    (tmp_path / "work").mkdir()
    d = _driver(tmp_path, SLOW)
    t0 = time.monotonic()
    assert d.stop(tmp_path / "work", stall_s=2.0) == 0  # 4 s in all, twice the bound
    assert time.monotonic() - t0 > 2.0


def test_a_stop_that_stands_still_gives_up_and_kills_the_driver(tmp_path: Path):
    (tmp_path / "work").mkdir()
    d = _driver(tmp_path, HUNG)
    assert d.stop(tmp_path / "work", stall_s=2.0) is None
    assert d.proc.poll() is not None  # killed
