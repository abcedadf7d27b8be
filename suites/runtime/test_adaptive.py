"""Adaptive recovery's decision (``harness.driver.adaptive``): which deployment the task slots left can run,
and which subtasks share a slot when there are fewer slots than operators."""

from __future__ import annotations

import threading

import allure
import pytest

from harness.driver.adaptive import AdaptiveConfig, fit, slot_layout
from harness.jobs import build_job
from harness.spark.slot_sharing import run_shared

pytestmark = [allure.epic("runtime"), allure.feature("adaptive recovery")]


def test_enough_slots_keep_the_configured_parallelism_one_subtask_per_slot():
    f = fit({"source": 2, "count": 3}, 8)
    assert (f.parallelism, f.slots) == ({"source": 2, "count": 3}, 5)


def test_fewer_slots_take_subtasks_from_the_widest_operator_downstream_first():
    assert fit({"source": 2, "count": 3}, 4).parallelism == {"source": 2, "count": 2}
    # a tie at 2 and 2: the downstream operator gives up a subtask
    assert fit({"source": 2, "count": 3}, 3).parallelism == {"source": 2, "count": 1}
    assert fit({"source": 2, "count": 3}, 2).parallelism == {"source": 1, "count": 1}
    assert fit({"source": 2, "count": 3}, 2).slots == 2


def test_fewer_slots_than_operators_share_slots_one_subtask_of_each_operator_per_slot():
    f = fit({"source": 1, "count": 1}, 1)
    assert (f.parallelism, f.slots) == ({"source": 1, "count": 1}, 1)
    f = fit({"source": 3, "a": 1, "b": 4}, 2)
    assert (f.parallelism, f.slots) == ({"source": 2, "a": 1, "b": 2}, 2)


def test_no_slot_is_no_deployment():
    with pytest.raises(ValueError, match="at least 1 task slot"):
        fit({"source": 1, "count": 1}, 0)
    with pytest.raises(ValueError, match=">= 0"):
        AdaptiveConfig(resource_stabilization_timeout_ms=-1)


def test_slot_layout_one_per_slot_or_subtask_j_of_every_operator_in_slot_j():
    graph = build_job("keyed_count", 100, 10, 1, 128, {"source": 2, "count": 2}).graph
    subtasks = graph.subtasks()  # source[0], source[1], count[0], count[1]
    assert slot_layout(subtasks, 4) == [[0], [1], [2], [3]]
    assert slot_layout(subtasks, 2) == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="exceeds 1 slots"):
        slot_layout(subtasks, 1)


def test_a_shared_slot_runs_its_subtasks_together_and_fails_as_a_whole():
    started = threading.Barrier(2, timeout=10)  # both subtasks run at once, on threads of the slot

    def one(p):
        started.wait()
        return {"partition": p}

    assert run_shared(one, [3, 1]) == [{"partition": 3}, {"partition": 1}]

    def failing(p):
        if p == 1:
            raise RuntimeError("subtask 1 failed")
        return {"partition": p}

    with pytest.raises(RuntimeError, match="subtask 1 failed"):
        run_shared(failing, [0, 1])
