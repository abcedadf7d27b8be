"""A Spark task slot that runs several subtasks (adaptive recovery with fewer slots than operators,
``harness.driver.adaptive.slot_layout``): each subtask runs ``run_subtask`` on a thread of its own, as
Flink's slot sharing runs one subtask of each operator in a slot, and the slot fails as a whole,
with the first error, when any of its subtasks fails. The subtasks learn each other's endpoints
through the driver (``Gather``/``Peers``), as every subtask does, so sharing a slot changes nothing
there."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["run_shared"]


def run_shared(run_one: Callable[[int], dict[str, Any]], partitions: list[int]) -> list[dict[str, Any]]:
    """Run ``run_one(partition)`` for each of ``partitions`` on its own thread; their summaries, or
    the first error once any fails (the others end as their peers' channels close)."""
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []
    done = threading.Condition()

    def body(p: int) -> None:
        try:
            r = run_one(p)
            with done:
                results[p] = r
                done.notify_all()
        except BaseException as e:
            with done:
                errors.append(e)
                done.notify_all()

    for p in partitions:
        threading.Thread(target=body, args=(p,), name=f"subtask-{p}", daemon=True).start()
    with done:
        done.wait_for(lambda: errors or len(results) == len(partitions))
        if errors:
            raise errors[0]
        return [results[p] for p in partitions]
