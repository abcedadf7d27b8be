"""A test-only job whose outcome depends on something outside its seed: how many runs this process
made before (a module-level counter, as state leaked between runs makes real tests flaky). Every
second run in a process drops one record, so the same seed gives different verdicts. The counter
moves when the forwarding subtask opens (once per run: no fault restarts it), not when the output is
judged, since the fault-free reference may come from a cache."""

from __future__ import annotations

from typing import Any

from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, JobGraph, KeyedProcessFunction

RUNS = {"opened": 0}  # the leak: survives from one run to the next in the same process


def _event(split: int, offset: int) -> dict[str, Any]:
    return {"id": f"{split}-{offset}"}


class Forward(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        RUNS["opened"] += 1

    def process_element(self, value: Any, ctx: Any) -> None:
        if RUNS["opened"] % 2 == 1 or value["id"] != "0-0":  # every second run drops one record
            ctx.collect(value)


def _expected(inputs: list[Any]) -> list[Any]:
    return list(inputs)


def build(splits: int = 2, records_per_split: int = 50) -> JobGraph:
    return (
        JobBuilder("flaky", max_parallelism=8)
        .source("events", GeneratorSource(_event, splits, records_per_split), 1)
        .key_by(lambda r: r["id"])
        .process("forward", Forward(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: r["id"], identity_name="id", expected=_expected)
        .build()
    )
