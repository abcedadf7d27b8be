"""A test-only job whose outcome depends on something outside its seed: how many times this process
built the job before (a module-level counter, as state leaked between runs makes real tests flaky).
Every second build drops one record, so the same seed gives different verdicts. The counter moves
when the job is built (once per run), not when a subtask opens: the fault-free reference runs the
job's functions in the same process only when it is not cached yet, so counting opens made the
verdicts depend on what ran before (the repeat test failed when run alone)."""

from __future__ import annotations

from typing import Any

from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, JobGraph, KeyedProcessFunction

RUNS = {"built": 0}  # the leak: survives from one run to the next in the same process


def _event(split: int, offset: int) -> dict[str, Any]:
    return {"id": f"{split}-{offset}"}


class Forward(KeyedProcessFunction):
    def __init__(self, drops: bool) -> None:
        self.drops = drops

    def process_element(self, value: Any, ctx: Any) -> None:
        if not self.drops or value["id"] != "0-0":  # every second build drops one record
            ctx.collect(value)


def _expected(inputs: list[Any]) -> list[Any]:
    return list(inputs)


def build(splits: int = 2, records_per_split: int = 50) -> JobGraph:
    RUNS["built"] += 1
    return (
        JobBuilder("flaky", max_parallelism=8)
        .source("events", GeneratorSource(_event, splits, records_per_split), 1)
        .key_by(lambda r: r["id"])
        .process("forward", Forward(drops=RUNS["built"] % 2 == 0), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: r["id"], identity_name="id", expected=_expected)
        .build()
    )
