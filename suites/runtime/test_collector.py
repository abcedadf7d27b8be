"""A run paces the cyclic garbage collector (harness.collector): its young threshold is raised inside
the block, nested blocks share it, and the thresholds found are restored after, also on an error."""

from __future__ import annotations

import gc

import pytest

from harness.collector import YOUNG_THRESHOLD, fewer_collections


def test_raised_inside_restored_after_also_when_nested_or_failing():
    before = gc.get_threshold()
    assert before[0] < YOUNG_THRESHOLD
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        with fewer_collections():
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the outer block still runs
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a run failed")
    assert gc.get_threshold() == before


def test_a_threshold_already_higher_or_changed_meanwhile_is_left_alone():
    before = gc.get_threshold()
    try:
        gc.set_threshold(YOUNG_THRESHOLD * 2, *before[1:])
        with fewer_collections():
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD * 2
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD * 2
        gc.set_threshold(*before)
        with fewer_collections():
            gc.set_threshold(1234, *before[1:])  # someone else's choice wins
        assert gc.get_threshold()[0] == 1234
    finally:
        gc.set_threshold(*before)
