"""Word count over CSV files, written only with statechaos's public job API: a ``flat_map`` splits
lines into words and a ``filter`` drops stop words before the keyed ``counts`` stage, whose
ValueState counts each word and emits ``[word, count]``. Each word's counts rise by 1 from 1 (the
job declares word and count as key and sequence number), whatever order the files' lines
interleave in.

``build_broken`` counts in a Python dict: after a restart the counts start over, and the oracles
name the duplicated ``[word, count]`` records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import (
    CsvSource,
    ExactlyOnceFileSinkSpec,
    JobBuilder,
    JobGraph,
    KeyedProcessFunction,
    RuntimeContext,
    ValueStateDescriptor,
)

DATA = Path(__file__).resolve().parent / "data"
STOP_WORDS = frozenset({"the", "a"})


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        n = self.count.value() + 1
        self.count.update(n)
        ctx.collect([value, n])


class BrokenCount(KeyedProcessFunction):
    """BUG: counts in a Python dict are neither checkpointed nor restored."""

    def open(self, ctx: RuntimeContext) -> None:
        self.counts: dict[str, int] = {}

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        n = self.counts[value] = self.counts.get(value, 0) + 1
        ctx.collect([value, n])


def _words(row: dict[str, Any]) -> list[str]:
    return row["text"].split()


def _kept(word: str) -> bool:
    return word not in STOP_WORDS


def _word(w: Any) -> Any:
    return w


def _first(r: list[Any]) -> Any:
    return r[0]


def _second(r: list[Any]) -> int:
    return int(r[1])


def _graph(fn: KeyedProcessFunction, files: list[str] | None, parallelism: int) -> JobGraph:
    paths = [Path(f) for f in files] if files else sorted(DATA.glob("lines-*.csv"))
    return (
        JobBuilder("wordcount", max_parallelism=32)
        .source("lines", CsvSource(paths), parallelism)
        .flat_map(_words, name="split")
        .filter(_kept, name="drop-stop-words")
        .key_by(_word)
        .process("counts", fn, parallelism)
        .sink(ExactlyOnceFileSinkSpec())
        .output(key=_first, seq=_second)
        .build()
    )


def build(files: list[str] | None = None, parallelism: int = 2) -> JobGraph:
    return _graph(Count(), files, parallelism)


def build_broken(files: list[str] | None = None, parallelism: int = 2) -> JobGraph:
    return _graph(BrokenCount(), files, parallelism)
