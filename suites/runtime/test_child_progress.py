"""A child process (the SSS replay, its state reads) is bounded by its progress, not by the clock: a
slow child that keeps working runs to its end; one that does nothing is killed, naming what stopped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.progress import ChildStalled, run_while_progressing


def test_a_child_that_keeps_working_runs_past_the_bound(tmp_path: Path) -> None:
    # about 2.5 s of CPU with a 1 s bound: a fixed limit of 1 s would have killed it
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.5: pass\n"
    assert run_while_progressing([sys.executable, "-c", busy], folder=tmp_path, bound_s=1.0, poll_s=0.1) == 0


def test_a_child_that_writes_is_progressing(tmp_path: Path) -> None:
    code = f"import time, pathlib\nfor i in range(6):\n    pathlib.Path({str(tmp_path)!r}, str(i)).write_text('x'); time.sleep(0.5)\n"
    assert run_while_progressing([sys.executable, "-c", code], folder=tmp_path, bound_s=1.5, poll_s=0.1) == 0


def test_a_child_doing_nothing_is_killed_naming_what_stopped(tmp_path: Path) -> None:
    with pytest.raises(
        ChildStalled, match=r"no progress for .*files written .* CPU seconds|CPU seconds .* files written"
    ):
        run_while_progressing([sys.executable, "-c", "import time; time.sleep(600)"], folder=tmp_path,
                              bound_s=1.0, poll_s=0.1)  # fmt: skip
