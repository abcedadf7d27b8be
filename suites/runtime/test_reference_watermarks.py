"""The fault-free reference's expected output is computed with watermarks as a fault-free run at
parallelism 1 has them (per split, the minimum over unfinished splits, after each poll), so an
event-time job's closed windows leave its state as they leave the job's, and its output is the one
the held-back reference (no watermark until end of input) gave for a deterministic job."""

from __future__ import annotations

import copy
from typing import Any

import allure

from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    KeyedProcessFunction,
    RuntimeContext,
    WatermarkStrategy,
)
from harness.jobs import build_job
from harness.reference.run import ReferenceRun, reference_output
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.time import ManualClock
from reference_impl.timers import MIN_WATERMARK

pytestmark = [allure.epic("runtime"), allure.feature("fault-free reference")]

BOUND = 5


def ev(split: int, n: int) -> dict[str, Any]:
    return {"k": n % 7, "ts": n * 10 + (split * 3 + n) % BOUND, "id": f"{split}-{n}"}


class SeesWatermark(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        ctx.collect({"id": value["id"], "ts": value["ts"], "wm": ctx.current_watermark()})


def _job(splits: int = 3, per_split: int = 2000) -> Any:
    return (
        JobBuilder("sees_watermark", 16)
        .source(
            "src",
            GeneratorSource(ev, splits, per_split, interleave=True),
            1,
            watermarks=WatermarkStrategy.for_bounded_out_of_orderness(BOUND, lambda r: r["ts"]),
        )
        .key_by(lambda r: r["k"])
        .process("p", SeesWatermark(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: r["id"], identity_name="id")
        .build()
    )


def _held(graph: Any) -> list[Any]:
    """The output with no watermark before the end of input (what the reference computed before)."""
    src = copy.deepcopy(graph.source.function)
    ctx = RuntimeContext(None, OperatorStateBackend(), ManualClock(0), "src", 0, 1, graph.max_parallelism)
    src.open(src.initial_splits(), ctx)
    ref = ReferenceRun(graph)
    while not src.exhausted():
        ref.feed(src.poll(1024))
    ref.finish()
    return ref.output


def test_the_reference_passes_watermarks_while_it_reads() -> None:
    _, out = reference_output(_job())
    marks = [r["wm"] for r in out]
    assert marks == sorted(marks)  # in order with the records, never going back
    assert marks[-1] > MIN_WATERMARK  # it advanced before the end of input
    assert all(r["wm"] < r["ts"] for r in out)  # behind every record (none is late)
    assert marks[-1] >= max(r["ts"] for r in out) - 1024 * 10  # within about a poll of the input


def test_an_event_time_job_gives_the_output_of_the_held_back_reference() -> None:
    spec = build_job("allround", 3000, 23, 1, 64, 2)
    assert spec.graph.source.watermarks is not None
    _, out = reference_output(spec.graph)
    assert out == _held(spec.graph)  # sessions, their profiles, rules, in the same order
    assert out  # sessions fired
