"""Barrier alignment: blocking, completion on the last channel, cancellation by a newer barrier or a
cancel marker, ignored stale barriers, end of input."""

from __future__ import annotations

import pytest

from harness.tasks.barriers import Alignment, BarrierAligner


def test_single_channel_aligns_at_once():
    a = BarrierAligner(1)
    assert a.on_barrier(0, 1) is Alignment.ALIGNED and a.blocked_channels() == set()


def test_channels_block_until_all_delivered():
    a = BarrierAligner(3)
    assert a.on_barrier(1, 1) is Alignment.BLOCKED
    assert a.blocked_channels() == {1}
    assert a.on_barrier(0, 1) is Alignment.BLOCKED
    assert a.blocked_channels() == {0, 1}
    assert a.on_barrier(2, 1) is Alignment.ALIGNED
    assert a.blocked_channels() == set()
    assert a.on_barrier(0, 1) is Alignment.IGNORED  # duplicate/old


def test_newer_barrier_cancels_the_current_alignment():
    a = BarrierAligner(2)
    a.on_barrier(0, 1)
    assert a.on_barrier(1, 2) is Alignment.BLOCKED
    assert a.cancelled == [1] and a.blocked_channels() == {1}
    assert a.on_barrier(1, 1) is Alignment.IGNORED  # the cancelled checkpoint's late barrier
    assert a.on_barrier(0, 2) is Alignment.ALIGNED


def test_cancel_marker_unblocks_and_later_barriers_are_ignored():
    a = BarrierAligner(2)
    a.on_barrier(0, 3)
    assert a.on_cancel(3)
    assert a.blocked_channels() == set()
    assert a.on_barrier(1, 3) is Alignment.IGNORED
    assert not a.on_cancel(2)  # nothing current


def test_cancel_of_a_future_checkpoint_ignores_its_barriers():
    a = BarrierAligner(2)
    a.on_barrier(0, 1)
    assert not a.on_cancel(2)
    assert a.on_barrier(1, 2) is Alignment.IGNORED and a.blocked_channels() == {0}
    assert a.on_barrier(1, 1) is Alignment.ALIGNED


def test_end_of_input_counts_as_delivered():
    a = BarrierAligner(3)
    a.on_barrier(0, 1)
    a.on_barrier(1, 1)
    assert a.on_end_of_input(2) is Alignment.ALIGNED
    assert a.on_barrier(0, 2) is Alignment.BLOCKED
    assert a.on_barrier(1, 2) is Alignment.ALIGNED


def test_needs_a_channel():
    with pytest.raises(ValueError):
        BarrierAligner(0)
