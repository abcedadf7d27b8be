"""The batched state API (``KeyedProcessFunction.process_elements``): the same outputs, the same
transactions and the same restored state as the per-record path, across restores and a rescale;
merged input never spans a barrier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import allure
import pytest

from harness.job.sinks import committed_files
from harness.jobs.keyed_count import KeyedCount
from harness.tasks import merge_record_runs
from suites.runtime.conftest import failed

pytestmark = allure.epic("runtime")

SCHEDULE: dict[str, Any] = dict(
    faults=[
        {"at": "checkpoint:2", "kind": "crash_task", "target": "count[0]"},
        {"at": {"random": 2, "within_ms": 300}, "kind": "crash_task"},
        {"at": "checkpoint:3", "kind": "delay_barrier", "delay_ms": 30},
    ],
    rescale=[{"at": "checkpoint:5", "parallelism": {"source": 3, "count": 3}}],
    seed=5,
)


def _transactions(run_dir: str) -> dict[str, list[str]]:
    """Each committed transaction's lines, sorted (the batched path emits key by key)."""
    return {f.name: sorted(f.read_text().splitlines()) for f in committed_files(Path(run_dir) / "output")}


def _restored(run_dir: str) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((Path(run_dir) / "restored").iterdir())}


@allure.feature("batched state API")
def test_batched_path_matches_per_record_across_restores_and_rescale(sim_run, monkeypatch):
    sizes: list[int] = []
    batched = KeyedCount.process_elements

    def recording(self: KeyedCount, key: Any, values: list[Any], ctx: Any) -> None:
        sizes.append(len(values))
        batched(self, key, values, ctx)

    monkeypatch.setattr(KeyedCount, "process_elements", recording)
    a = sim_run(**SCHEDULE)
    n = len(sizes)
    assert max(sizes) > 1  # the batched path ran, with several records of a key per call
    assert sum(sizes) >= 3000  # every record (and the replays after restores) went through it
    b = sim_run(**SCHEDULE, job_options={"batched": False})
    assert len(sizes) == n  # the per-record run never called process_elements
    assert failed(a) == set() and failed(b) == set()
    # same records in the same transactions: no record crossed a barrier in either direction
    ta, tb = _transactions(a.run_dir), _transactions(b.run_dir)
    assert ta == tb and len(ta) > 5
    # the same state restored at every restore and after the rescale (same keyed and operator state)
    ra, rb = _restored(a.run_dir), _restored(b.run_dir)
    assert ra == rb and any("count-2" in name for name in ra)  # the rescaled third counter


def _transactions_in_order(run_dir: str) -> list[list[str]]:
    return [f.read_text().splitlines() for f in committed_files(Path(run_dir) / "output")]


def _key_runs(run_dir: str) -> tuple[int, int]:
    """(runs of consecutive lines of one key, lines) over every transaction; checks that each key's
    lines are in sequence order."""
    runs = lines = 0
    for txn in _transactions_in_order(run_dir):
        last: dict[str, int] = {}
        for i, line in enumerate(txn):
            key, seq = line.split('"')[1], int(line.split(",")[1])
            assert seq > last.get(key, 0)  # in order within a key
            last[key] = seq
            runs += i == 0 or txn[i - 1].split('"')[1] != key
        lines += len(txn)
    return runs, lines


@allure.feature("batched state API")
def test_batched_function_gets_records_grouped_by_key_per_record_one_gets_them_as_they_come(sim_run):
    grouped = sim_run(keys=6, records=600)
    one_by_one = sim_run(keys=6, records=600, job_options={"batched": False})
    assert failed(grouped) == set() and failed(one_by_one) == set()
    runs_grouped, lines = _key_runs(grouped.run_dir)
    runs_one_by_one, lines_b = _key_runs(one_by_one.run_dir)
    assert lines == lines_b == 600
    # the source emits round-robin over keys: one by one, a key rarely follows itself
    assert runs_grouped < lines / 2 < runs_one_by_one, (runs_grouped, runs_one_by_one)


def _records(ch: int, *xs: int) -> tuple[int, tuple[str, list[int]]]:
    return (ch, ("records", list(xs)))


@allure.feature("batched state API")
@pytest.mark.parametrize("broadcast_from", [None, 2])
def test_merged_input_never_spans_a_barrier(broadcast_from):
    def is_broadcast(ch: int) -> bool:
        return broadcast_from is not None and ch >= broadcast_from

    barrier = (1, ("barrier", 7, 0, "checkpoint"))
    msgs = [_records(0, 1, 2), _records(1, 3), barrier, _records(0, 4), _records(1, 5), (0, ("eof",))]
    msgs += [_records(0, 6), _records(2, 7), _records(2, 8), _records(0, 9)]
    out = merge_record_runs(msgs, is_broadcast)
    flat = [(ch, tuple(m[1]) if m[0] == "records" else m) for ch, m in out]
    head = [(0, (1, 2, 3)), barrier, (0, (4, 5)), (0, ("eof",))]
    if broadcast_from is None:
        assert flat == head + [(0, (6, 7, 8, 9))]
    else:  # keyed and broadcast records are not merged with each other
        assert flat == head + [(0, (6,)), (2, (7, 8)), (0, (9,))]
