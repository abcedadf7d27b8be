"""A test-only job whose outcome depends on something outside its seed: how many runs this process
judged before (a module-level counter, as state leaked between runs makes real tests flaky). Every
second run in a process drops one record, so the same seed gives different verdicts."""

from __future__ import annotations

from typing import Any

from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, JobGraph, KeyedProcessFunction

JUDGED = {"runs": 0}  # the leak: survives from one run to the next in the same process


def _event(split: int, offset: int) -> dict[str, Any]:
    return {"id": f"{split}-{offset}"}


def _kept(record: dict[str, Any]) -> bool:
    return JUDGED["runs"] % 2 == 0 or record["id"] != "0-0"


class Forward(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.collect(value)


def _expected(inputs: list[Any]) -> list[Any]:
    JUDGED["runs"] += 1  # asked once per run, when the oracles judge it
    return list(inputs)


def build(splits: int = 2, records_per_split: int = 50) -> JobGraph:
    return (
        JobBuilder("flaky", max_parallelism=8)
        .source("events", GeneratorSource(_event, splits, records_per_split), 1)
        .filter(_kept)
        .key_by(lambda r: r["id"])
        .process("forward", Forward(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: r["id"], identity_name="id", expected=_expected)
        .build()
    )
