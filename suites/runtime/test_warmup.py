"""The suites' background preparations (``suites/warmup.py``): a waiter returns once the job ended,
fails naming it when nothing it watches moved for the bound, and the session ends what still runs."""

from __future__ import annotations

import sys

import pytest

from suites import warmup


def test_wait_returns_when_the_job_ends_and_fails_when_it_stands_still() -> None:
    warmup.start("quick", [sys.executable, "-c", "print('made')"])
    warmup.wait("quick", stall_s=60)
    assert warmup._jobs["quick"].proc.returncode == 0
    warmup.wait("never started")  # nothing to wait for
    warmup.start("stuck", [sys.executable, "-c", "import time; time.sleep(600)"], lambda: "same")
    with pytest.raises(AssertionError, match="the background stuck"):
        warmup.wait("stuck", stall_s=0.5)
    stuck = warmup._jobs["stuck"].proc
    warmup.stop_all()
    assert stuck.returncode is not None and not warmup._jobs
