"""History files: ordered, deterministic JSON lines; damaged lines are reported with file and line."""

from __future__ import annotations

import pytest

from harness.driver.coordinator import CheckpointConfig, CheckpointCoordinator
from harness.history import HistoryWriter, read_history
from reference_impl.checkpoint import FileSystemCheckpointStorage
from reference_impl.time import ManualClock


def _run(tmp_path, name):
    clock = ManualClock()
    with HistoryWriter(tmp_path / name, clock.now_ms) as h:
        c = CheckpointCoordinator(
            "job",
            CheckpointConfig(100),
            [("op", 0)],
            {},
            FileSystemCheckpointStorage(tmp_path / f"{name}-chk"),
            notify=lambda *a: None,
            emit=h.emit,
        )
        for _ in range(3):
            clock.advance(100)
            cid = c.tick(clock.now_ms())
            c.acknowledge(cid, "op", 0, None, clock.now_ms(), extra={"source_offsets": {"0": cid}})
    return (tmp_path / name).read_bytes()


def test_history_is_ordered_and_deterministic(tmp_path):
    a, b = _run(tmp_path, "a.jsonl"), _run(tmp_path, "b.jsonl")
    assert a == b
    events = list(read_history(tmp_path / "a.jsonl"))
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert [e["checkpoint_id"] for e in events if e["type"] == "checkpoint_completed"] == [1, 2, 3]


def test_damaged_line_names_file_and_line(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_text('{"seq": 0, "t": 0, "type": "run_start"}\n{broken\n')
    with pytest.raises(ValueError, match=r"h.jsonl:2"):
        list(read_history(p))
