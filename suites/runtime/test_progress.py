"""ProgressWatch: a wait fails only when nothing it waits for moved for the bound (a fake clock: no
test here depends on the machine's speed), and says what stopped and for how long."""

from __future__ import annotations

import pytest

from harness.progress import ProgressWatch


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_slow_run_that_keeps_moving_is_never_stalled_however_long_it_takes():
    clock = Clock()
    watch = ProgressWatch(10, clock)
    for n in range(100):  # 100 steps of 9 s: 900 s in all, far past the bound, moving every step
        clock.t += 9
        watch.observe(records=n, checkpoints=n // 10)
        assert watch.stalled() is None


def test_a_stall_names_every_signal_and_how_long_it_stood_still():
    clock = Clock()
    watch = ProgressWatch(10, clock)
    watch.observe(records=5, checkpoints=1)
    clock.t += 4
    watch.observe(records=7, checkpoints=1)  # records moved, checkpoints did not
    clock.t += 10
    watch.observe(records=7, checkpoints=1)
    assert watch.stalled() is None  # exactly the bound: not over it
    clock.t += 1
    why = watch.stalled()
    assert why == (
        "no progress for 11 s (bound 10 s): checkpoints (1) unchanged for 15 s, records (7) unchanged for 11 s"
    )
    watch.observe(records=7, checkpoints=2)  # progress again: no longer stalled
    assert watch.stalled() is None


def test_nothing_observed_counts_from_the_start_and_a_bound_must_be_positive():
    clock = Clock()
    watch = ProgressWatch(5, clock)
    clock.t += 6
    assert watch.stalled() == "no progress for 6 s (bound 5 s): nothing observed"
    with pytest.raises(ValueError, match="positive"):
        ProgressWatch(0)
