"""A Spark task slot that runs several subtasks (adaptive recovery with fewer slots than operators,
``harness.adaptive.slot_layout``): each subtask runs ``run_subtask`` on a thread of its own, as
Flink's slot sharing runs one subtask of each operator in a slot. The slot exchanges the data
endpoints of all its subtasks in one ``allGather`` (the barrier stage's tasks must each call it
once), and fails as a whole, with the first error, when any of its subtasks fails."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SharedGather", "run_shared"]


class SharedGather:
    """Stands in for ``BarrierTaskContext`` to ``n`` subtasks of one slot: their ``allGather`` calls
    become one call of the slot's task, and every subtask gets every task's messages."""

    def __init__(self, ctx: Any, n: int, timeout_s: float = 120.0) -> None:
        self.ctx, self.n, self.timeout_s = ctx, n, timeout_s
        self.cond = threading.Condition()
        self.mine: list[str] = []
        self.everyone: list[str] | None = None
        self.error: BaseException | None = None

    def allGather(self, message: str) -> list[str]:  # noqa: N802 - BarrierTaskContext's name
        with self.cond:
            self.mine.append(message)
            if len(self.mine) == self.n:
                try:
                    got = self.ctx.allGather(json.dumps(self.mine))
                    self.everyone = [m for batch in got for m in json.loads(batch)]
                except BaseException as e:
                    self.error = e
                self.cond.notify_all()
            elif not self.cond.wait_for(
                lambda: self.everyone is not None or self.error is not None, self.timeout_s
            ):
                raise TimeoutError(
                    f"the slot's other subtasks did not reach allGather within {self.timeout_s} s"
                )
            if self.error is not None:
                raise RuntimeError(f"the slot's allGather failed: {self.error}")
            assert self.everyone is not None
            return self.everyone


def run_shared(
    run_one: Callable[[int, Any], dict[str, Any]], partitions: list[int], ctx: Any
) -> list[dict[str, Any]]:
    """Run ``run_one(partition, ctx)`` for each of ``partitions`` on its own thread; their summaries,
    or the first error once any fails (the others end as their peers' channels close)."""
    gather = SharedGather(ctx, len(partitions))
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []
    done = threading.Condition()

    def body(p: int) -> None:
        try:
            r = run_one(p, gather)
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
