"""A small event-time job for the runtime tests: every record registers event-time timers (one due
mid-run, one only at end of input) and a processing-time timer that is never due; timers emit
``{k, t, id, d}``. Registered as ``test_timed``."""

from __future__ import annotations

from typing import Any

from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    KeyedProcessFunction,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from harness.job import JobGraph
from harness.jobs import register_job
from harness.jobs.registry import JOBS

FAR = 10**9


def ev(split: int, n: int) -> dict[str, Any]:
    return {"k": f"k{(split * 5 + n) % 7}", "ts": n * 10 + (split * 3 + n) % 5, "id": f"{split}-{n}"}


class Timed(KeyedProcessFunction):
    """Per record: an event-time timer at ts + 30 (fires mid-run), one FAR away (fires only at end of
    input), and a processing-time timer FAR away (never due: dropped at end of input)."""

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", default=0))

    def process_element(self, value, ctx):
        self.seen.update(self.seen.value() + 1)
        ts = ctx.timer_service()
        ts.register_event_time_timer(value["ts"] + 30, value["id"])
        ts.register_event_time_timer(FAR + value["ts"], value["id"])
        ts.register_processing_time_timer(ctx.now_ms() + FAR)

    def on_timer(self, timestamp, ctx):
        assert ctx.current_watermark() >= timestamp or ctx.time_domain == "processing"
        ctx.collect({"k": ctx.current_key, "t": timestamp, "id": ctx.timer_namespace, "d": ctx.time_domain})


def timed(splits: int = 4, per_split: int = 150) -> JobGraph:
    return (
        JobBuilder("timed", 32)
        .source(
            "src",
            GeneratorSource(ev, splits, per_split, interleave=True),
            2,
            watermarks=WatermarkStrategy.for_bounded_out_of_orderness(5, lambda r: r["ts"]),
        )
        .key_by(lambda r: r["k"])
        .process("timers", Timed(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: (r["id"], r["t"]), identity_name="(id, t)")
        .state_depends_on_interleaving("timers fire as watermarks pass")
        .build()
    )


if "test_timed" not in JOBS:
    register_job("test_timed", timed)
